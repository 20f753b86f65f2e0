"""Hostile label-set files: each one is refused whole, with one line `file:line [id]: reason`
per problem, exit code 2, no traceback, and nothing created in the database."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.release import (
    LabelSetError,
    import_label_set,
    load_label_set,
    read_label_set,
    write_label_sets,
)
from careful_engine.annotation.signals import load_inputs
from careful_engine.annotation.store import Store
from tests.annotation_db import rows
from tests.fakes import paper_round

_load()  # every command on `careful`

WIDE = {"COLUMNS": "250"}
FUNCTIONS = ("rm", "cd", "ls")


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> dict:
    """A valid exported label set over rm, cd, ls (as a parsed document)."""
    tmp = tmp_path_factory.mktemp("valid")
    decl = paper_round.write_declarations(tmp / "effects.json")
    with Store(tmp / "source.db") as store:
        store.add_annotator("A1")
        store.new_round("r", load_inputs(decl).select(list(FUNCTIONS)), ["A1"], created_by="lead")
        session = store.annotator_session("r", "A1")
        for f in session.functions():
            session.label(f.name, bool(f.proposed), "it deletes data" if f.proposed else "")
        session.submit()
        (path,) = write_label_sets(store.adjudication_session("r", "lead"), tmp / "out")
    return json.loads(path.read_text(encoding="utf-8"))


def _doc(valid: dict, change) -> str:
    doc = json.loads(json.dumps(valid))
    change(doc)
    return json.dumps(doc, indent=2, ensure_ascii=False)


def _set(path: list, value):
    def change(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _label(doc: dict, name: str) -> dict:
    return next(x for x in doc["labels"] if x["function"] == name)


def corpus(valid: dict) -> dict[str, bytes | str]:
    """name -> file content (str is written as UTF-8, bytes as they are)."""
    text = json.dumps(valid, indent=2)
    deep = "[" * 100_000 + "]" * 100_000
    junk_inputs = {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": {"j": 1}}}}}}}}}}

    def drop(key):
        return lambda d: d.pop(key)

    def dup(d):
        d["labels"].append(dict(d["labels"][0]))

    def unsubmitted_hole(d):
        d["labels"][0]["destructive"] = None

    def many_fields(d):
        d["labels"][1].update({f"x{i}": "y" * 50 for i in range(5)})

    cases: dict[str, bytes | str] = {
        "empty": "",
        "whitespace": "  \n\t\n",
        "null": "null",
        "array": "[]",
        "array_of_sets": json.dumps([valid]),
        "string": '"careful.labels/1"',
        "number": "42",
        "truncated": text[: len(text) // 2],
        "trailing_garbage": text + "\n}{",
        "bom_then_garbage": b"\xef\xbb\xbf{oops",
        "latin1": text.replace("it deletes data", "it deletes d\u00e9j\u00e0").encode("latin-1"),
        "utf16": text.encode("utf-16"),
        "nul_bytes": b"\x00" * 64,
        "deep_nesting": deep,
        "huge_integer": text.replace('"blind": true', '"blind": ' + "9" * 5000),
        "nan": text.replace('"blind": true', '"blind": NaN'),
        "other_schema": _doc(valid, _set(["schema"], "careful.boundary/1")),
        "no_schema": _doc(valid, drop("schema")),
        "no_round": _doc(valid, drop("round")),
        "no_annotator": _doc(valid, drop("annotator")),
        "labels_object": _doc(valid, _set(["labels"], {"rm": True})),
        "labels_empty": _doc(valid, _set(["labels"], [])),
        "labels_strings": _doc(valid, _set(["labels"], ["rm", "cd"])),
        "label_null": _doc(valid, lambda d: d["labels"].__setitem__(1, None)),
        "destructive_string": _doc(valid, lambda d: _label(d, "rm").update(destructive="yes")),
        "destructive_int": _doc(valid, lambda d: _label(d, "rm").update(destructive=1)),
        "reason_number": _doc(valid, lambda d: _label(d, "rm").update(reason=42)),
        "reason_list": _doc(valid, lambda d: _label(d, "rm").update(reason=["a", "b"])),
        "reason_huge": _doc(valid, lambda d: _label(d, "rm").update(reason="x" * 200_000)),
        "reason_escape_codes": _doc(
            valid, lambda d: _label(d, "rm").update(reason="\x1b[31mred\x1b[0m \x07")),
        "reason_bidi": _doc(valid, lambda d: _label(d, "rm").update(reason="safe \u202eesrever")),
        "reason_missing_when_destructive": _doc(
            valid, lambda d: _label(d, "rm").update(reason="")),
        "duplicate_label": _doc(valid, dup),
        "unknown_function": _doc(valid, lambda d: _label(d, "rm").update(function="rm_rf_all")),
        "function_number": _doc(valid, lambda d: _label(d, "rm").update(function=7)),
        "wrong_class": _doc(valid, lambda d: _label(d, "rm").update({"class": "TwitterAPI"})),
        "unknown_kind": _doc(valid, lambda d: _label(d, "rm").update(kind="destroy")),
        "nested_junk_inputs": _doc(valid, lambda d: _label(d, "rm").update(inputs=junk_inputs)),
        "inputs_list": _doc(valid, lambda d: _label(d, "rm").update(inputs=[1, 2])),
        # the store refuses such inputs when it reads them back: every later command failed
        "inputs_signals_numbers": _doc(
            valid, lambda d: _label(d, "rm").update(inputs={"signals": [1, 2]})),
        "inputs_idempotent_text": _doc(
            valid, lambda d: _label(d, "rm").update(inputs={"idempotent": "yes"})),
        "inputs_footprint_text": _doc(
            valid, lambda d: _label(d, "cd").update(inputs={"footprint": "abc"})),
        "unknown_fields": _doc(valid, many_fields),
        "unknown_top_level": _doc(valid, _set(["extra"], {"x": [1, {"y": None}]})),
        "name_newline": _doc(valid, _set(["annotator", "name"], "alice\n")),
        "name_trailing_space": _doc(valid, _set(["annotator", "name"], "alice ")),
        "name_escape": _doc(valid, _set(["annotator", "name"], "al\x1b[2Jice")),
        "name_path": _doc(valid, _set(["annotator", "name"], "../../etc/passwd")),
        "name_empty": _doc(valid, _set(["annotator", "name"], "")),
        "name_object": _doc(valid, _set(["annotator", "name"], {"first": "a"})),
        "name_huge": _doc(valid, _set(["annotator", "name"], "a" * 100_000)),
        "round_name_list": _doc(valid, _set(["round", "name"], ["r"])),
        "round_name_zero_width": _doc(valid, _set(["round", "name"], "r\u200b1")),
        "sha_not_hex": _doc(valid, _set(["round", "declarations_sha256"], "zz" * 32)),
        "blind_string": _doc(valid, _set(["round", "blind"], "false")),
        "llm_without_model": _doc(valid, _set(["annotator", "kind"], "llm")),
        "human_with_model": _doc(valid, _set(["annotator", "model"], "gpt")),
        "kind_robot": _doc(valid, _set(["annotator", "kind"], "robot")),
        "bad_timestamp": _doc(valid, _set(["submitted"], "yesterday")),
        "submitted_incomplete": _doc(valid, unsubmitted_hole),
        # imported, then never exported (a lone surrogate cannot be written as UTF-8) or
        # exported as Infinity, which import refuses
        "inputs_lone_surrogate": text.replace('"inputs": {', '"inputs": {"x": "\\ud800", ', 1),
        "inputs_surrogate_key": text.replace('"inputs": {', '"inputs": {"\\udc00": 1, ', 1),
        "inputs_infinite": text.replace('"inputs": {', '"inputs": {"x": 1e999, ', 1),
        # json keeps the last of two keys silently: the label read as not destructive
        "duplicate_key": text.replace('"destructive": true,',
                                      '"destructive": true, "destructive": false,', 1),
        "duplicate_name": text.replace('"name": "A1",', '"name": "A1", "name": "B2",', 1),
    }
    return cases


def _write(tmp_path: Path, name: str, content: bytes | str) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def _empty(db: Path) -> bool:
    if not db.exists():
        return True
    return all(not rows(db, f"select * from {t}") for t in
               ("rounds", "annotators", "labels", "round_functions", "round_annotators"))


def test_the_valid_file_imports(valid, tmp_path):
    path = _write(tmp_path, "ok", json.dumps(valid, indent=2))
    result = CliRunner().invoke(app, ["labels", "import", str(path), "--db",
                                      str(tmp_path / "x.db")], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "A1 -> round r: 3 labels" in result.output
    # a byte-order mark in front is tolerated
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_label_set(path).annotator == "A1"


def test_every_hostile_file_is_refused_whole(valid, tmp_path):
    cases = corpus(valid)
    assert len(cases) >= 28
    refused = 0
    for name, content in cases.items():
        path = _write(tmp_path, name, content)
        db = tmp_path / f"{name}.db"
        result = CliRunner().invoke(app, ["labels", "import", str(path), "--db", str(db)],
                                    env=WIDE)
        out = result.output
        assert result.exit_code == 2, (name, result.exit_code, out[-500:])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            name, result.exception)
        assert "Traceback" not in out, name
        assert re.search(re.escape(str(path)) + r"(:\d+)? \[", out), (name, out[:500])
        assert "\x1b" not in out and "\u202e" not in out, name  # shown literally
        assert len(out) < 20_000, (name, len(out))  # a huge value is not echoed back
        assert _empty(db), name
        with pytest.raises(LabelSetError):
            read_label_set(path)
        refused += 1
    assert refused == len(cases)


def test_a_line_per_bad_item_at_its_line(valid, tmp_path):
    def change(d):
        _label(d, "rm").update(reason=42)
        _label(d, "ls").update(destructive="no")
        _label(d, "cd")["function"] = "nonexistent"
    text = _doc(valid, change)
    path = _write(tmp_path, "several", text)
    with pytest.raises(LabelSetError) as info:
        read_label_set(path)
    lines = text.splitlines()

    def line_of(function: str) -> int:
        at = next(i for i, ln in enumerate(lines) if f'"function": "{function}"' in ln)
        return max(i for i in range(at) if lines[i].strip() == "{") + 1

    problems = info.value.problems
    assert len(problems) == 3, problems
    assert any(p.startswith(f"{path}:{line_of('rm')} [rm]: ") and "expected string" in p
               for p in problems), problems
    assert any(p.startswith(f"{path}:{line_of('ls')} [ls]: ") and "boolean" in p
               for p in problems), problems
    assert any(f"{path}:{line_of('nonexistent')} [nonexistent]: " in p
               and "not a multi-turn function" in p for p in problems), problems


def test_inputs_are_checked_as_the_store_reads_them(valid, tmp_path):
    text = _doc(valid, lambda d: _label(d, "rm").update(
        inputs={"signals": [1, 2], "idempotent": "yes"}))
    path = _write(tmp_path, "inputs", text)
    db = tmp_path / "x.db"
    result = CliRunner().invoke(app, ["labels", "import", str(path), "--db", str(db)], env=WIDE)
    assert result.exit_code == 2, result.output
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if '"function": "rm"' in ln)
    line = next(i for i in range(at, len(lines)) if '"inputs": {' in lines[i]) + 1
    assert re.fullmatch(re.escape(f"error: {path}:{line} [rm]: labels[") + r"\d\]"
                        + re.escape(".inputs: signals is not a list of text"),
                        " ".join(result.output.split())), result.output
    assert _empty(db)
    # the database stays usable: nothing half-imported poisons the other commands
    assert CliRunner().invoke(app, ["round", "status", "--db", str(db)]).exit_code == 0


@pytest.mark.parametrize("old, new, says", [
    ('"destructive": true,', '"destructive": true,\n"destructive": false,',
     "'destructive' is given twice in one object"),
    ('"blind": true', '"blind": NaN', "NaN is not a JSON value"),
    ('"inputs": {', '"inputs": {"x": ' + "9" * 31 + ",", "an integer of 31 digits"),
])
def test_a_value_json_refuses_is_named_at_its_line(valid, tmp_path, old, new, says):
    text = json.dumps(valid, indent=2)
    assert old in text
    text = text.replace(old, new, 1)
    path = _write(tmp_path, "bad", text)
    # the value's line (of a key given twice: the second), as boundary files say it
    at = text[:text.index(new)].count("\n") + new.count("\n") + 1
    with pytest.raises(LabelSetError) as info:
        read_label_set(path)
    assert info.value.problems == [f"{path}:{at} [file]: invalid JSON: {says}"]
    assert at > 1


def test_a_set_of_no_labels_says_so(valid, tmp_path):
    def unlabelled(d):
        d["submitted"] = None
        for item in d["labels"]:
            item.update(destructive=None, reason=None)
    path = _write(tmp_path, "none", _doc(valid, unlabelled))
    db = tmp_path / "x.db"
    result = CliRunner().invoke(app, ["labels", "import", str(path), "--db", str(db)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "already present" not in result.output  # (it was: nothing had been there)
    assert "A1 -> round r: no labels (all 3 functions unlabelled)" in result.output
    assert rows(db, "select annotator from round_annotators") == [{"annotator": "A1"}]


def test_a_wrong_reason_type_leaves_no_half_created_round(valid, tmp_path):
    db = tmp_path / "x.db"
    with Store(db) as store:
        with pytest.raises(LabelSetError):
            import_label_set(store, json.loads(_doc(
                valid, lambda d: _label(d, "rm").update(reason=42))))
        assert store.rounds() == [] and store.annotators() == []


def test_a_failure_during_import_rolls_everything_back(valid, tmp_path):
    """Well-formed, but the annotator's name is confusable with one in the database: the
    round the file would create is not left behind."""
    db = tmp_path / "x.db"
    with Store(db) as store:
        store.add_annotator("a1")
        with pytest.raises(Exception, match="confused"):
            import_label_set(store, valid)
        assert store.rounds() == []
        assert [a.name for a in store.annotators()] == ["a1"]
    assert rows(db, "select * from round_functions") == []


def test_good_and_bad_files_together(valid, tmp_path):
    good = _write(tmp_path, "good", json.dumps(valid))
    bad = _write(tmp_path, "bad", "{")
    db = tmp_path / "x.db"
    result = CliRunner().invoke(app, ["labels", "import", str(bad), str(good), "--db", str(db)],
                                env=WIDE)
    assert result.exit_code == 1, result.output
    assert f"{bad}:1 [file]: invalid JSON" in result.output
    assert "A1 -> round r: 3 labels" in result.output
    assert len(rows(db, "select * from labels")) == 3


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_and_missing_files(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(9 * 1024 * 1024)
    db = tmp_path / "x.db"
    for path, message in ((fifo, "not a regular file"), (tmp_path, "not a regular file"),
                          (tmp_path / "missing.json", "cannot read"), (big, "bytes, more than")):
        result = CliRunner().invoke(app, ["labels", "import", str(path), "--db", str(db)],
                                    env=WIDE)
        assert result.exit_code == 2 and message in result.output, (path, result.output)
    assert _empty(db)


def test_a_round_over_the_real_declarations_round_trips(tmp_path):
    with Store(tmp_path / "a.db") as store:
        store.add_annotator("A1")
        store.new_round("real", load_inputs(None), ["A1"], created_by="lead")
        session = store.annotator_session("real", "A1")
        for f in session.functions():
            session.label(f.name, bool(f.proposed), "[bold]why[/] \u00e9" if f.proposed else "")
        session.submit()
        (path,) = write_label_sets(store.adjudication_session("real", "lead"), tmp_path / "out")
    with Store(tmp_path / "b.db") as other:
        assert import_label_set(other, read_label_set(path), who="importer") == ("real", 128)
        assert other.round("real").created_by == "importer"
        assert other.is_closed("real")


def test_a_file_of_a_million_small_objects_stops_early(valid, tmp_path):
    """8 MiB of `{}` in one label's inputs: refused at the objects' count, while reading (it
    took 18 s and 1.5 GB, building them all before the schema's size check)."""
    import tracemalloc

    from careful_engine.annotation import schema

    doc = json.loads(json.dumps(valid))
    doc["labels"][0]["inputs"] = {"x": [{}] * 2_000_000}
    text = json.dumps(doc)
    tracemalloc.start()
    try:
        with pytest.raises(schema.JSONFileError, match="more than 100,000 objects and arrays"):
            schema.loads_with_lines(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(text), peak  # (the whole parse took about 190 times the text)
    path = tmp_path / "flood.json"
    path.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(app, ["labels", "import", str(path), "--db", str(tmp_path / "d.db")],
                             env=WIDE)
    assert res.exit_code == 2 and "more than 100,000 objects and arrays" in res.output, res.output
