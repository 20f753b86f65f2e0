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
    "no kind": (lambda d: d["functions"]["rm"].pop("kind"), "rm: kind is missing"),
    "kind destroy": (_set("rm", "kind", "destroy"), "rm: kind 'destroy' is neither"),
    "entry a string": (lambda d: d["functions"].__setitem__("rm", "write"),
                       "rm: a JSON str, not an object"),
    "functions a list": (lambda d: d.__setitem__("functions", list(d["functions"].values())),
                         "'functions' is a JSON list"),
    "footprint numbers": (_set("rm", "footprint", [1, 2]), "rm: footprint and signals"),
    "hidden_only text": (_set("rm", "hidden_only", "no"), "rm: hidden_only is str"),
    "lone surrogate": (_set("rm", "note", "\ud800"), "rm: a lone surrogate"),
    "all entries strings": (lambda d: d["functions"].update(
        dict.fromkeys(d["functions"], "read")), "128 declaration(s)"),
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
