"""Declarations files given with -d / --declarations are hostile: every entry is checked
when the file is read, and a bad one stops the command with one line naming it (before:
KeyError, TypeError or UnicodeEncodeError from deep inside, or a result file blamed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.signals import parse_declarations
from careful_engine.effects import declarations as decl_mod
from careful_engine.effects.declarations import DeclarationsError

_load()  # every command on `careful`
SHIPPED = Path(__file__).resolve().parents[1] / "declarations" / "effects.json"


def _mutated(tmp_path: Path, change) -> Path:
    doc = json.loads(SHIPPED.read_text(encoding="utf-8"))
    change(doc)
    path = tmp_path / "effects.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _set(name: str, key: str, value):
    def change(doc):
        doc["functions"][name][key] = value
    return change


CASES = {
    "no kind": (lambda d: d["functions"]["rm"].pop("kind"), "[rm]: kind is missing"),
    "kind destroy": (_set("rm", "kind", "destroy"), "[rm]: kind 'destroy' is neither"),
    "entry a string": (lambda d: d["functions"].__setitem__("rm", "write"),
                       "[rm]: a string, not an object"),
    "functions a list": (lambda d: d.__setitem__("functions", list(d["functions"].values())),
                         "'functions' is a list"),
    "footprint numbers": (_set("rm", "footprint", [1, 2]), "[rm]: footprint and signals"),
    "hidden_only text": (_set("rm", "hidden_only", "no"), "[rm]: hidden_only is a string"),
    "lone surrogate": (_set("rm", "note", "\ud800"), "[rm]: a lone surrogate"),
    "all entries strings": (lambda d: d["functions"].update(
        dict.fromkeys(d["functions"], "read")), "128 declaration(s)"),
    # a function bfcl does not have was accepted (129 functions), its name unchecked
    "unknown function": (lambda d: d["functions"].__setitem__(
        "zz\x1b[31mextra", dict(d["functions"]["ls"])),
        "functions bfcl does not have: 'zz\\x1b[31mextra'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_declaration_is_refused_by_name(case: str, tmp_path: Path) -> None:
    change, message = CASES[case]
    path = _mutated(tmp_path, change)
    with pytest.raises(DeclarationsError) as e:
        decl_mod.load(path)
    assert message in str(e.value), str(e.value)
    for args in (["audit", "references", "-d", str(path)],
                 ["review-sheet", "-d", str(path), "--out", str(tmp_path / "sheet")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.exit_code, res.output[-400:])
        assert "Traceback" not in res.output and message in " ".join(res.output.split())


def _set_in(name: str, key: str, change):
    def mutate(doc):
        change(doc["functions"][name][key])
    return mutate


# what the review sheet, the workbench and the MCP export read inside an entry (before: a
# TypeError or KeyError from deep inside, exit 3, or an escape code written into the sheet)
CONTENT_CASES = {
    "signal count text": (_set_in("post_tweet", "signal_counts",
                                  lambda c: c.__setitem__("third-party", "x")),
                          "[post_tweet]: signal_counts['third-party'] is 'x', not a count"),
    "signal count negative": (_set_in("post_tweet", "signal_counts",
                                      lambda c: c.__setitem__("third-party", -1)),
                              "[post_tweet]: signal_counts['third-party'] is -1, not a count"),
    "evidence empty": (_set("rm", "evidence", {}), "[rm]: evidence.calls is missing"),
    "evidence calls text": (_set_in("rm", "evidence",
                                    lambda ev: ev.__setitem__("calls", "\x1b[31mred")),
                            "[rm]: evidence.calls is a string"),
    "evidence repeat bool": (_set_in("rm", "evidence",
                                     lambda ev: ev.__setitem__("repeat_changed", True)),
                             "[rm]: evidence.repeat_changed is a bool"),
    "example call only": (_set("rm", "example", {"call": 1}), "[rm]: example.call is an int"),
    "example no source": (_set("rm", "example", {"call": "rm()", "where": "w", "changes": []}),
                          "[rm]: example.source is missing"),
    "change a string": (_set("rm", "example", {"call": "rm()", "source": "s", "where": "w",
                                               "changes": ["x"]}),
                        "[rm]: example.changes[0] is a string, not an object"),
    "change path number": (_set("rm", "example", {"call": "rm()", "source": "s", "where": "w",
                                                  "changes": [{"kind": "added", "path": 1}]}),
                           "[rm]: example.changes[0].path is an int"),
    "repeat check text": (_set("rm", "idempotence_evidence", [{"call": "rm()", "checks": "2",
                                                               "repeat_changed": 0}]),
                          "[rm]: idempotence_evidence[0].checks is a string"),
    "class of another": (_set("rm", "class", "\x1b[2JTwitterAPI"),
                         "[rm]: class '\\x1b[2JTwitterAPI' is not its function's"),
}


def _refused_by_its_readers(path: Path, tmp_path: Path) -> list[str]:
    """What ``export mcp`` and ``review-sheet`` say of a declarations file they both refuse
    (exit 2, no traceback, no raw escape code), each as one line."""
    said = []
    for args in (["export", "mcp", "-d", str(path), "-o", str(tmp_path / "mcp.json")],
                 ["review-sheet", "-d", str(path), "--out", str(tmp_path / "sheet")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.exit_code, res.output[-400:])
        assert "Traceback" not in res.output and "\x1b" not in res.output
        said.append(" ".join(res.output.split()))
    return said


@pytest.mark.parametrize("case", sorted(CONTENT_CASES))
def test_what_readers_use_inside_a_declaration_is_checked(case: str, tmp_path: Path) -> None:
    change, message = CONTENT_CASES[case]
    doc = json.loads(SHIPPED.read_text(encoding="utf-8"))
    change(doc)
    path = tmp_path / "effects.json"
    text = json.dumps(doc, indent=1)
    path.write_text(text, encoding="utf-8")
    name = message[1:message.index("]")]
    line = text.splitlines().index(f'  "{name}": {{') + 1  # the line its declaration starts on
    for out in _refused_by_its_readers(path, tmp_path):
        assert f"{path}:{line} {message}" in out, out
    assert not (tmp_path / "sheet.md").exists() and not (tmp_path / "mcp.json").exists()


def test_the_review_sheet_shows_declared_text_literally(tmp_path: Path) -> None:
    doc = json.loads(SHIPPED.read_text(encoding="utf-8"))
    rm = doc["functions"]["rm"]
    rm["example"] = {"call": "rm(file_name='`x` \x1b[31m')", "source": "runs\u202e",
                     "where": "[click](https://evil.example) <b>run</b>", "success": True,
                     "changes": [{"kind": "more", "path": "```"},
                                 {"kind": "added", "path": "p\x07", "after": "a\nb"}]}
    rm["footprint"] = ["`root`/**"]
    path = tmp_path / "effects.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    res = CliRunner().invoke(app, ["review-sheet", "-d", str(path), "--out",
                                   str(tmp_path / "sheet")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "sheet.md").read_text(encoding="utf-8")
    assert not any(c in md for c in "\x1b\x07\u202e")
    section = md[md.index("## GorillaFileSystem.rm"):md.index("## GorillaFileSystem.rmdir")]
    assert "- Footprint: `` `root`/** ``" in section
    assert ("- ``rm(file_name='`x` \\x1b[31m')`` (`runs\\u202e`, "
            "`[click](https://evil.example) <b>run</b>`)") in section
    # the changes in a fence longer than any backticks in them, one change a line
    assert "  ````\n  ```\n  + p\\x07 = a\\x0ab\n  ````\n" in section
    assert "\x1b" not in (tmp_path / "sheet.csv").read_text(encoding="utf-8")


def test_a_key_given_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    """JSON keeps the last of two equal keys: a second "rm" entry, or a second "kind" in one,
    silently replaced the first."""
    text = json.dumps(json.loads(SHIPPED.read_text(encoding="utf-8")), indent=1)
    start = text.index('\n  "rm": {')
    kind = text.index('\n   "kind": ', start) + 1
    text = text[:kind] + '   "kind": "read",\n' + text[kind:]
    line = text.count("\n", 0, kind) + 2  # the second "kind"
    path = tmp_path / "effects.json"
    path.write_text(text, encoding="utf-8")
    for out in _refused_by_its_readers(path, tmp_path):
        assert f"{path}:{line}: 'kind' is given twice in one object" in out, out


def test_nan_is_not_json(tmp_path: Path) -> None:
    path = _mutated(tmp_path, _set("rm", "idempotent", True))
    path.write_text(path.read_text().replace('"idempotent": true', '"idempotent": NaN', 1))
    with pytest.raises(DeclarationsError, match="NaN is not a JSON value"):
        decl_mod.load(path)


def test_the_shipped_declarations_are_of_their_own_shape() -> None:
    assert all(decl_mod.entry_problem(e) is None
               for e in decl_mod.load(SHIPPED).functions.values())


@pytest.mark.parametrize("functions, message", [
    ([{"name": 1}], "every function in the list needs a name"),
    ([["rm"]], "every function in the list needs a name"),
    ({"rm": {"kind": "write", "signals": ["\ud800"]}}, "a lone surrogate"),
    ({"rm": {"kind": "write", "x": float("inf")}}, "not finite"),
    ({"\x1b[2Jrm": {}}, "\\x1b[2Jrm"),
])
def test_round_inputs_are_checked(functions, message) -> None:
    with pytest.raises(AnnotationError) as e:
        parse_declarations({"functions": functions}, "d.json")
    assert message in str(e.value) and "\x1b" not in str(e.value)


def test_a_wrong_schema_is_named_clipped(tmp_path: Path) -> None:
    """The schema value was echoed whole: a 3 MB line."""
    doc = json.loads(SHIPPED.read_text(encoding="utf-8"))
    doc["schema"] = "x\x1b" * 1_000_000
    path = tmp_path / "effects.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(DeclarationsError) as e:
        decl_mod.load(path)
    said = str(e.value)
    assert "not an effects document" in said and len(said) < 400 + len(str(path)), said[:500]
    assert "\x1b" not in said and "characters)" in said
