"""The headless commands: round, label, agree, adjudicate, labels export|import."""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.store import Store
from careful_engine.effects import boundary
from tests.fakes import paper_round

_load()  # every command on `careful`

WIDE = {"COLUMNS": "250"}


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "careful.db"
    monkeypatch.setenv("CAREFUL_DB", str(path))  # the --db default
    return path


def invoke(runner, *args, input=None):
    return runner.invoke(app, list(args), input=input, env=WIDE)


def test_help_of_every_command(runner):
    for args in (["round", "--help"], ["round", "new", "--help"], ["round", "status", "--help"],
                 ["label", "--help"], ["agree", "--help"], ["adjudicate", "--help"],
                 ["labels", "export", "--help"], ["labels", "import", "--help"],
                 ["annotate-llm", "--help"]):
        result = invoke(runner, *args)
        assert result.exit_code == 0, (args, result.output)
        if args[0] != "round" or len(args) > 2:
            assert "--db" in result.output, args


def test_round_label_agree_adjudicate(runner, db, tmp_path):
    decl = paper_round.write_declarations(tmp_path / "effects.json")
    result = invoke(runner, "round", "new", "small", "-d", str(decl), "-f", "rm,cd,ls",
                    "-a", "H1", "-a", "H2", "--by", "lead")
    assert result.exit_code == 0, result.output
    assert "3 functions (2 writes)" in result.output and "H1, H2" in result.output

    # H1 labels through the terminal loop: a missing reason is asked for again
    result = invoke(runner, "label", "-r", "small", "-a", "H1", "--submit",
                    input="y\ny moves cwd\nn\nn\nn the file can be recovered from backup\n")
    assert result.exit_code == 0, result.output
    assert "departing from the signals' proposal" in result.output
    assert "required for every 'destructive'" in result.output
    assert "saved cd = yes (1/3)" in result.output and "saved rm = no (3/3)" in result.output
    assert "submitted at" in result.output

    # H2 quits half way: what was entered is kept; a rerun continues
    result = invoke(runner, "label", "-r", "small", "-a", "H2", input="s\nn\nq\n")
    assert result.exit_code == 0 and "2 functions left" in result.output
    result = invoke(runner, "round", "status", "small")
    assert "1/3" in result.output and "3/3" in result.output and "open" in result.output

    # blind: no agreement before H2 submits (exit 2), unless overridden (recorded)
    result = invoke(runner, "agree", "-r", "small")
    assert result.exit_code == 2 and "H2 has not submitted" in result.output
    result = invoke(runner, "agree", "-r", "small", "--override", "pilot check")
    assert result.exit_code == 0 and "override" in result.output
    assert "override by" in invoke(runner, "round", "status", "small").output

    result = invoke(runner, "label", "-r", "small", "-a", "H2", input="y changes where you are\ny deletes a file\n")
    assert result.exit_code == 0 and "submit with" in result.output
    result = invoke(runner, "round", "submit", "small", "-a", "H2")
    assert result.exit_code == 0 and "the round is closed" in result.output
    result = invoke(runner, "label", "-r", "small", "-a", "H2", input="")
    assert result.exit_code == 2 and "labels are final" in result.output

    result = invoke(runner, "agree", "-r", "small", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    writes = report["agreement"]["writes"]
    assert writes["functions"] == 2 and writes["pairs"][0]["agree"] == 1
    assert {s["function"] for s in report["splits"]} == {"rm"}
    # one convention for repeatable names: -a A -a B, -a A,B and --annotators A,B agree
    forms = [("-a", "H1", "-a", "H2"), ("-a", "H1,H2"), ("--annotators", "H1, H2")]
    for form in forms:
        subset = json.loads(invoke(runner, "agree", "-r", "small", "--json", *form).output)
        assert subset["agreement"] == report["agreement"], form
    result = invoke(runner, "agree", "-r", "small", "--json", "-a", "H1,nobody")
    assert result.exit_code != 0
    result = invoke(runner, "agree", "-r", "small")
    assert result.exit_code == 0 and "Fleiss" in result.output and "Splits (1)" in result.output

    out = tmp_path / "small-any.json"
    result = invoke(runner, "adjudicate", "-r", "small", "--policy", "any", "--out", str(out),
                    "--author", "lead")
    assert result.exit_code == 0, result.output
    assert set(boundary.load(out).destructive) == {"rm", "cd"}
    result = invoke(runner, "adjudicate", "-r", "small", "--policy", "majority", "--dry-run")
    assert result.exit_code == 2 and "tied on" in result.output
    result = invoke(runner, "adjudicate", "-r", "small", "--policy", "majority", "--tie", "no",
                    "--decide", "rm=yes:deletion is final", "--author", "lead",
                    "--out", str(tmp_path / "m.json"))
    assert result.exit_code == 0, result.output
    m = boundary.load(tmp_path / "m.json")
    assert set(m.destructive) == {"cd", "rm"} and "manual decision by lead" in m.destructive["rm"]
    result = invoke(runner, "adjudicate", "-r", "small", "--out", str(out))
    assert result.exit_code == 2 and "exists" in result.output
    result = invoke(runner, "adjudicate", "-r", "small", "--out", str(out), "--force")
    assert result.exit_code == 0 and boundary.load(out).version == 2


@pytest.mark.parametrize("args, message", [
    (["round", "new", "x", "--llm", "A2"], "NAME=MODEL"),
    (["round", "new", "x", "-d", "/nonexistent.json"], "cannot read declarations"),
    (["round", "new", "x", "-f", "nope"], "not among the round inputs"),
    (["round", "status", "nope"], "no round"),
    (["agree", "-r", "nope"], "no round"),
    (["agree", "-r", "nope", "--subset", "some"], "writes, all or both"),
    (["adjudicate", "-r", "nope", "--decide", "rm=perhaps:x"], "FUNCTION=yes|no:REASON"),
    (["adjudicate", "-r", "nope", "--decide", "rm=yes"], "needs a reason"),
    (["adjudicate", "-r", "nope", "--policy", "most"], "unknown policy"),
    (["adjudicate", "-r", "nope", "--tie", "coin"], "yes, no, error"),
    (["label", "-r", "nope", "-a", "A1"], "no round"),
])
def test_bad_input_exits_2(runner, db, args, message):
    result = invoke(runner, *args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output


def test_labels_export_import(runner, db, tmp_path):
    with Store(db) as store:
        paper_round.build(store, tmp_path)
    out = tmp_path / "release"
    result = invoke(runner, "labels", "export", "-r", "paper", "-o", str(out))
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.json"))
    assert [f.name for f in files] == ["A1.json", "A2.json", "A3.json", "A4.json"]
    other = tmp_path / "other.db"
    result = invoke(runner, "labels", "import", *map(str, files), "--db", str(other),
                    "--round", "copy")
    assert result.exit_code == 0, result.output
    assert result.output.count("128 labels") == 4
    result = invoke(runner, "labels", "import", str(files[0]), "--db", str(other),
                    "--round", "copy")
    assert "already present" in result.output
    result = invoke(runner, "adjudicate", "--db", str(other), "-r", "copy",
                    "--out", str(tmp_path / "b.json"))
    assert result.exit_code == 0, result.output
    assert set(boundary.load(tmp_path / "b.json").destructive) == set(
        boundary.load("paper-final").destructive)
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    result = invoke(runner, "labels", "import", str(bad), "--db", str(other))
    assert result.exit_code == 2 and "not a label set" in result.output


def test_the_method_says_who_was_counted() -> None:
    """A boundary's method text names the roster; where an annotator did not label a
    function the policy counts the labels given, and the text now says so (it read
    'destructive only if every annotator judged it so' over rm judged by 1 of 3)."""
    from careful_engine.annotation.adjudication import adjudicate, describe
    from careful_engine.annotation.records import Label
    from careful_engine.annotation.signals import FunctionInput

    def lab(who: str, name: str, yes: bool) -> Label:
        return Label(who, name, yes, "it deletes" if yes else "", "t", "t")

    fns = [FunctionInput("rm", "GorillaFileSystem", "write"),
           FunctionInput("cat", "GorillaFileSystem", "read")]
    labels = {"A": {"rm": lab("A", "rm", True), "cat": lab("A", "cat", False)},
              "B": {"cat": lab("B", "cat", False)}, "C": {"cat": lab("C", "cat", False)}}
    for policy in ("unanimous", "majority", "any"):
        result = adjudicate(labels, fns, policy)
        assert result.outcomes["rm"].destructive
        assert "not counted for it (1 function judged by fewer)" in describe(result), policy
    full = {who: {**got, "rm": lab(who, "rm", False)} for who, got in labels.items()}
    assert "not counted" not in describe(adjudicate(full, fns, "any"))


def _closed_round(runner, tmp_path, name: str = "t") -> None:
    decl = paper_round.write_declarations(tmp_path / "effects.json")
    assert invoke(runner, "round", "new", name, "-d", str(decl), "-f", "rm,cd",
                  "--annotators", "H1,H2", "--by", "lead").exit_code == 0
    for who in ("H1", "H2"):
        result = invoke(runner, "label", "-r", name, "-a", who, "--submit",
                        input="n\ny deletes a file\n")  # cd, then rm
        assert result.exit_code == 0 and "submitted at" in result.output, result.output


def test_a_dry_run_writes_no_decision_but_shows_it(runner, db, tmp_path):
    _closed_round(runner, tmp_path)
    result = invoke(runner, "adjudicate", "-r", "t", "--decide", "cd=yes:moves you",
                    "--dry-run", "--author", "lead")
    assert result.exit_code == 0, result.output
    assert "2 destructive of 2" in result.output and "no decision written" in result.output
    with Store(db) as store:
        assert store.adjudication_session("t", "lead").decisions() == []
    result = invoke(runner, "adjudicate", "-r", "t", "--dry-run")
    assert "1 destructive of 2" in result.output  # the dry run's decision is gone
    result = invoke(runner, "adjudicate", "-r", "t", "--decide", "cd=yes:moves you",
                    "--dry-run", "--no-decisions")
    assert "1 destructive of 2" in result.output  # --no-decisions: none taken into account
    out = tmp_path / "b.json"
    result = invoke(runner, "adjudicate", "-r", "t", "--decide", "cd=yes:moves you",
                    "--out", str(out), "--author", "lead")
    assert result.exit_code == 0 and "2 destructive of 2" in result.output
    with Store(db) as store:
        assert [d.function for d in store.adjudication_session("t", "lead").decisions()] == ["cd"]


def test_adjudicate_writes_beside_the_user_and_score_finds_it_by_name(runner, db, tmp_path,
                                                                    monkeypatch):
    """Without --out a round's boundary goes to <name>.json in the working folder, never into
    the shipped declarations/boundary/ (where sensitivity would compare it as if shipped);
    `--boundary NAME` finds it from there, as the output says, and scores with it."""
    from careful_engine.annotation import adjudication
    from careful_engine.annotation.paper_labels import BOUNDARIES
    from tests import hostile_corpus as hc

    _closed_round(runner, tmp_path)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in BOUNDARIES:
        (shipped / f"{name}.json").write_bytes(
            (boundary.boundary_dir() / f"{name}.json").read_bytes())
    monkeypatch.setattr(boundary, "boundary_dir", lambda: shipped)
    monkeypatch.setattr(adjudication, "boundary_dir", lambda: shipped)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = invoke(runner, "adjudicate", "-r", "t")
    assert result.exit_code == 0, result.output
    assert sorted(p.stem for p in shipped.iterdir()) == sorted(BOUNDARIES)
    assert boundary.read_file(work / "t-any.json").destructive.keys() == {"rm"}
    said = " ".join(result.output.split())
    assert "wrote t-any.json" in said and "--boundary t-any " in said
    assert boundary.load("t-any").destructive.keys() == {"rm"}
    assert boundary.load("paper-final") == boundary.read_file(shipped / "paper-final.json")
    hc.write_model(work / "run", "m")
    result = invoke(runner, "score", str(work / "run"), "--boundary", "t-any", "-j1",
                    "--out", str(work / "out"))
    assert result.exit_code == 1, result.output  # (scored; the entries the file lacks: missing)
    line = json.loads((work / "out" / "conversations.jsonl").read_text().splitlines()[0])
    assert "t-any" in json.dumps(line["scored_with"])
    (work / "t-any.json").unlink()
    result = invoke(runner, "score", str(work / "run"), "--boundary", "t-any", "-j1",
                    "--out", str(work / "out2"))
    assert result.exit_code == 2 and "no boundary 't-any'" in result.output


def test_a_failed_adjudication_records_no_decision(runner, db, tmp_path):
    _closed_round(runner, tmp_path)
    exists = tmp_path / "exists.json"
    exists.write_text("{}")
    result = invoke(runner, "adjudicate", "-r", "t", "--decide", "rm=no:oops",
                    "--out", str(exists), "--author", "lead")
    assert result.exit_code == 2 and "exists" in result.output, result.output
    result = invoke(runner, "adjudicate", "-r", "t", "--decide", "cd=yes:oops", "--policy",
                    "annotator:nobody", "--out", str(tmp_path / "never.json"))
    assert result.exit_code == 2, result.output
    assert exists.read_text() == "{}" and not (tmp_path / "never.json").exists()
    with Store(db) as store:
        session = store.adjudication_session("t", "lead")
        assert session.decisions() == []
        assert rows_of(db, "adjudications") == []
    result = invoke(runner, "adjudicate", "-r", "t", "--dry-run")
    assert "1 destructive of 2" in result.output and "decision" not in result.output.replace(
        "no decision written", "")


def rows_of(db, table: str) -> list:
    from tests.annotation_db import rows

    return rows(db, f"select * from {table}")


def test_round_add_and_remove_take_annotators_in_every_form(runner, db, tmp_path):
    decl = paper_round.write_declarations(tmp_path / "effects.json")
    assert invoke(runner, "round", "new", "u", "-d", str(decl), "-f", "rm",
                  "--annotators", "H1").exit_code == 0
    result = invoke(runner, "round", "add", "u", "--annotators", "H2,H3")
    assert result.exit_code == 0 and "H1, H2, H3" in result.output, result.output
    result = invoke(runner, "round", "remove", "u", "--annotators", "H3")
    assert result.exit_code == 0 and "H1, H2" in result.output, result.output


BOM = "\ufeff".encode()


def _previous_boundaries(good: str) -> dict[str, bytes]:
    """name -> a file at --out that the boundary reader refuses (``good``: one it takes)."""
    dup = good.replace('"version": 1,', '"version": 1,\n  "version": 50,', 1)
    assert dup != good
    files = {f"version {v}": f'{{"version": {v}}}'.encode()
             for v in ("7", "1e999", '"x"', "-5", "1e300", "0", "1" + "0" * 40, "2.5")}
    files.update({
        "key twice": dup.encode(), "BOM, key twice": BOM + dup.encode(),
        "NaN version": good.replace('"version": 1,', '"version": NaN,').encode(),
        "a boundary, version -5": good.replace('"version": 1,', '"version": -5,').encode(),
        "not JSON": good[:40].encode(), "not UTF-8": b'{"version": "\xff"}',
        "a list": b"[1]", "other schema": good.replace("careful.boundary/1", "x").encode(),
    })
    return files


def test_force_over_a_previous_file_the_boundary_reader_refuses(runner, db, tmp_path):
    """--force replaces a boundary file only where the boundary reader takes it; any other
    previous file is its reader's located line, exit 2, no traceback, and nothing written
    (the file, the decisions, the adjudication record). It read the old file with a bare
    json.loads: a key given twice, NaN or a file that was no boundary was replaced."""
    from careful_engine.effects.boundary import BoundaryError

    _closed_round(runner, tmp_path)
    out = tmp_path / "b.json"
    assert invoke(runner, "adjudicate", "-r", "t", "--out", str(out)).exit_code == 0
    good = out.read_text(encoding="utf-8")
    for what, content in _previous_boundaries(good).items():
        out.write_bytes(content)
        with pytest.raises(BoundaryError) as reader:
            boundary.read_file(out)
        result = invoke(runner, "adjudicate", "-r", "t", "--out", str(out), "--force",
                        "--decide", "cd=yes:moves you", "--author", "lead")
        assert result.exit_code == 2, (what, result.output)
        assert result.output.count("\n") == 1 and "Traceback" not in result.output, what
        assert result.output.startswith(f"error: {reader.value}; it is not replaced"), (
            what, result.output)
        assert out.read_bytes() == content, what
        assert rows_of(db, "decisions") == [] and len(rows_of(db, "adjudications")) == 1
    out.write_bytes(_previous_boundaries(good)["key twice"])
    result = invoke(runner, "adjudicate", "-r", "t", "--out", str(out), "--force")
    assert f"{out}:5: 'version' is given twice in one object" in result.output, result.output
    if hasattr(os, "mkfifo"):  # a FIFO is refused, not waited on, and left where it is
        out.unlink()
        os.mkfifo(out)
        result = invoke(runner, "adjudicate", "-r", "t", "--out", str(out), "--force")
        assert result.exit_code == 2 and "not a regular file" in result.output, result.output
        assert stat.S_ISFIFO(out.lstat().st_mode)
        out.unlink()
    out.write_bytes(BOM + good.replace('"version": 1,', '"version": 7,').encode())
    assert invoke(runner, "adjudicate", "-r", "t", "--out", str(out), "--force").exit_code == 0
    assert boundary.load(out).version == 8


def test_a_boundary_name_its_reader_refuses_is_never_written(runner, db, tmp_path):
    _closed_round(runner, tmp_path, name="r\u00e91")
    result = invoke(runner, "adjudicate", "-r", "r\u00e91", "--decide", "cd=yes:moves",
                    "--out", str(tmp_path / "b.json"))
    assert result.exit_code == 2 and "'r\u00e91-any'" in result.output, result.output
    assert "give one with -n" in result.output
    for bad in ("my boundary", "../escape", "a/b", ".hidden", "x" * 101):
        result = invoke(runner, "adjudicate", "-r", "r\u00e91", "-n", bad,
                        "--out", str(tmp_path / "b.json"))
        assert result.exit_code == 2 and "boundary name" in result.output, (bad, result.output)
        assert "Traceback" not in result.output
    assert not (tmp_path / "b.json").exists()
    # without --out the name is a path under declarations/boundary/: refused before it is one
    from careful_engine.annotation.adjudication import save_boundary

    with pytest.raises(AnnotationError, match="boundary name"):
        save_boundary(None, "../../escape")  # type: ignore[arg-type]
    assert rows_of(db, "decisions") == [] and rows_of(db, "adjudications") == []
    result = invoke(runner, "adjudicate", "-r", "r\u00e91", "-n", "r1-any",
                    "--out", str(tmp_path / "b.json"))
    assert result.exit_code == 0, result.output
    assert boundary.load(tmp_path / "b.json").name == "r1-any"


@pytest.mark.parametrize("extra, says", [
    ("{not json", "its inputs are not JSON"), ("[" * 5000, "its inputs are nested too deeply"),
    ("[1]", "its inputs are a list, not an object"), ("null", "its inputs are null"),
    ('{"footprint": 5}', "footprint is not a list of text"),
    ('{"signals": ["a", 7]}', "signals is not a list of text"),
    ('{"idempotent": "x"}', "idempotent is not true, false or null"),
    ('{"signals": NaN}', "its inputs are not JSON"),
])
def test_a_round_function_changed_behind_careful_is_one_error(runner, db, tmp_path, extra,
                                                              says):
    import sqlite3

    _closed_round(runner, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("update round_functions set extra = ? where function = 'cd'", (extra,))
    conn.commit()
    conn.close()
    for args in (["round", "status", "t"], ["agree", "-r", "t"], ["label", "-r", "t", "-a", "H1"],
                 ["adjudicate", "-r", "t", "--dry-run"], ["labels", "export", "-r", "t"]):
        result = invoke(runner, *args, input="q\n")
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output and "internal error" not in result.output
        assert f"round t, function cd: {says}" in result.output.replace("\n", " "), result.output


@pytest.mark.parametrize("field, value, says", [
    ("footprint", 5, "footprint is not a list of text"),
    ("signals", [1], "signals is not a list of text"),
    ("idempotent", "yes", "idempotent is not true, false or null")])
def test_round_inputs_of_the_wrong_shape_are_refused(runner, db, tmp_path, field, value, says):
    decl = paper_round.write_declarations(tmp_path / "effects.json")
    doc = json.loads(decl.read_text())
    fns = doc["functions"]
    entry = fns["rm"] if isinstance(fns, dict) else next(f for f in fns if f["name"] == "rm")
    entry[field] = value
    decl.write_text(json.dumps(doc))
    result = invoke(runner, "round", "new", "w", "-d", str(decl), "-f", "rm")
    assert result.exit_code == 2 and f"rm: {says}" in result.output, result.output


@pytest.mark.parametrize("text, says", [
    ('{"functions": [{"name": "rm", "kind": "write", "proposed": true},\n'
     ' {"name": "rm", "kind": "read", "proposed": false}]}',
     ":2: functions[1]: rm is listed twice (first at functions[0])"),
    ('{"functions": {"rm": {"kind": "write"},\n "cd": null}}', ":1: cd: expected an object, got null"),
    ('{"functions": {"rm": {"kind": "write"},\n "cd": 0}}', ":1: cd: expected an object, got an int"),
    ('{"functions": {\n "rm": {"kind": "write"},\n "rm": {"kind": "read"}}}',
     ":3: invalid JSON: 'rm' is given twice in one object"),
    ('{"functions": {\n "rm": {"kind": "write",\n "kind": "read"}}}',
     ":3: invalid JSON: 'kind' is given twice in one object"),
])
def test_round_declarations_say_each_doubt_at_its_line(runner, db, tmp_path, text, says):
    decl = tmp_path / "d.json"
    decl.write_text(text)
    result = invoke(runner, "round", "new", "w", "-d", str(decl), "-a", "H1")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {decl}{says}", result.output
    with Store(db) as store:
        assert store.rounds() == []



def test_agree_lists_the_splits_of_the_subset(runner, db):
    """`agree --subset writes` lists the writes' splits only (it listed every function's, a
    read's among them, beside the writes' figures); all and both list every function's."""
    from tests.workbench_support import split_read_and_write

    split_read_and_write(db)
    for subset, wanted in (("writes", ["mv"]), ("all", ["cat", "mv"]), ("both", ["cat", "mv"])):
        result = invoke(runner, "agree", "-r", "r3", "--subset", subset, "--json")
        assert result.exit_code == 0, result.output
        assert sorted(s["function"] for s in json.loads(result.output)["splits"]) == wanted
    result = invoke(runner, "agree", "-r", "r3", "--subset", "writes")
    assert "Splits (1)" in result.output, result.output


def test_agree_on_an_open_blind_round_names_the_command_that_submits(runner, db, tmp_path):
    """The README's headless round: agree before every annotator submitted says how to
    submit (the exact command) and the override; running the named command opens it."""
    decl = paper_round.write_declarations(tmp_path / "effects.json")
    assert invoke(runner, "round", "new", "R1", "-d", str(decl), "-f", "rm", "-a", "alice",
                  "-a", "bob", "--by", "lead").exit_code == 0
    for who in ("alice", "bob"):
        assert invoke(runner, "label", "-r", "R1", "-a", who,
                      input="y deletes a file\n").exit_code == 0
    result = invoke(runner, "agree", "-r", "R1")
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "(`careful round submit R1 -a NAME`, for each of them)" in said, said
    assert "`--override REASON`" in said, said
    assert invoke(runner, "round", "submit", "R1", "-a", "alice").exit_code == 0
    said = " ".join(invoke(runner, "agree", "-r", "R1").output.split())
    command = said.split("`")[1]
    assert command == "careful round submit R1 -a bob", said
    assert invoke(runner, *command.split()[1:]).exit_code == 0
    assert invoke(runner, "agree", "-r", "R1").exit_code == 0


def test_agree_and_adjudicate_show_whole_function_names_at_80_columns(runner, db, tmp_path):
    """At 80 columns `agree`'s Splits table cut function and class names with "…"
    (``GorillaFileS…``), ambiguous in adjudication: names now fold at separators, never cut,
    and the reasons come in a table of their own with the room the names leave."""
    from careful_engine.present.tables import pieces

    with Store(db) as store:
        paper_round.build(store, tmp_path)
    narrow = {"COLUMNS": "80"}
    result = runner.invoke(app, ["agree", "-r", "paper", "--json"], env=WIDE)
    splits = json.loads(result.output)["splits"]
    names = {n for s in splits for n in (s["function"], s["class"])}
    assert "GorillaFileSystem" in names and any(len(n) > 20 for n in names)
    for args in (["agree", "-r", "paper"],
                 ["adjudicate", "-r", "paper", "--dry-run", "--out", str(tmp_path / "b.json")]):
        result = runner.invoke(app, args, env=narrow)
        assert result.exit_code == 0, result.output
        assert "…" not in result.output, result.output
        assert max(map(len, result.output.splitlines())) <= 80
        for name in names if args[0] == "agree" else {s["function"] for s in splits}:
            assert all(p in result.output for p in pieces(name)), name  # folded, whole
    assert "Reasons of the splits" in runner.invoke(app, ["agree", "-r", "paper"],
                                                    env=narrow).output
