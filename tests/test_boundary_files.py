"""Boundary files are input others write: every malformed one is refused with one line that
names the file, never a traceback; a FIFO is not waited on; a name read from a run's manifest
never becomes a path; a file cannot record a changed boundary under a stock name."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.effects import boundary as boundaries
from careful_engine.effects.boundary import BoundaryError

_load()
runner = CliRunner()
STOCK = json.loads((boundaries.boundary_dir() / "paper-final.json").read_text())


def _doc(**change) -> dict:
    doc = {**STOCK, "name": "mine"}
    for k, v in change.items():
        if v is None:
            doc.pop(k, None)
        else:
            doc[k] = v
    return doc


@pytest.mark.parametrize("doc, reason", [
    ([], "(a list, not an object)"),
    (_doc(destructive=None), "'destructive' must be a list of functions, not missing"),
    (_doc(destructive="rm"), "'destructive' must be a list of functions, not a string"),
    ({**STOCK, "destructive": None}, "'destructive' must be a list of functions, not null"),
    (_doc(destructive=["rm"]), "destructive[0] is a string"),
    (_doc(destructive=[{"name": "rm"}]), "rm has no reason"),
    (_doc(destructive=[{"name": "rm", "reason": "x"}] * 2), "rm is listed twice"),
    (_doc(destructive=[{"name": ["rm"], "reason": "x"}]), "is not one of the 128"),
    (_doc(destructive=[{"name": "rm", "class": "NoSuchClass", "reason": "x"}]),
     "rm is a function of GorillaFileSystem, not of 'NoSuchClass'"),
    (_doc(destructive=[{"name": "rm", "class": ["x"], "reason": "x"}]), "not of ['x']"),
    (_doc(version="abc"), "'version' must be a whole number"),
    (_doc(decided_by=5), "'decided_by' must be a list of names"),
    (_doc(name="../x"), "'name' must be letters"),
    (_doc(method=3), "'method' must be text"),
])
def test_malformed_boundaries_are_refused_with_the_file_named(tmp_path, doc, reason) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BoundaryError) as e:
        boundaries.load(path)
    assert str(path) in str(e.value) and reason in str(e.value)


def test_unreadable_boundaries(tmp_path) -> None:
    cases = {"bytes.json": b"\xff\xfe{", "bad.json": b"{\n  nope", "deep.json": b"[" * 100_000}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "dir.json").mkdir()
    for name, reason in [("bytes.json", "not UTF-8"), ("bad.json", ":2: invalid JSON"),
                         ("deep.json", "not usable JSON"), ("fifo.json", "a FIFO"),
                         ("dir.json", "cannot read it")]:
        with pytest.raises(BoundaryError, match=reason):
            boundaries.load(tmp_path / name)


def test_a_stock_name_with_other_contents_is_refused(tmp_path) -> None:
    changed = {**STOCK, "destructive": STOCK["destructive"][1:]}
    path = tmp_path / "paper-final.json"
    path.write_text(json.dumps(changed))
    with pytest.raises(BoundaryError, match="calls itself 'paper-final'"):
        boundaries.load(path)
    path.write_text(json.dumps(STOCK))  # the same functions: it is the stock boundary
    assert boundaries.load(path).destructive.keys() == boundaries.load().destructive.keys()


@pytest.mark.parametrize("name", ["../boundary/paper-final", "/etc/passwd", "a/b", ""])
def test_a_name_is_only_a_name(name) -> None:
    with pytest.raises(BoundaryError, match="no boundary"):
        boundaries.load_named(name)


def test_score_refuses_a_bad_boundary_in_one_line(tmp_path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_doc(destructive="rm")))
    res = runner.invoke(app, ["score", str(tmp_path), "--boundary", str(path)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "'destructive' must be a list" in res.output


def test_a_manifests_boundary_is_read_bounded_and_by_name(tmp_path) -> None:
    from careful_engine.analysis.reexamine import generation_boundary

    result = tmp_path / "m" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
    result.parent.mkdir(parents=True)
    manifest = tmp_path / "m" / "careful_run.json"
    os.mkfifo(manifest)
    assert generation_boundary(result) is None  # not waited on
    manifest.unlink()
    manifest.write_text("[" * 100_000 + "]" * 100_000)
    assert generation_boundary(result) is None
    manifest.write_text(json.dumps({"boundary": str(tmp_path / "planted.json")}))
    name = generation_boundary(result)
    with pytest.raises(BoundaryError, match="no boundary"):
        boundaries.load_named(name)


def test_a_key_given_twice_is_refused_with_its_line(tmp_path) -> None:
    """JSON keeps the last of two equal keys: a file whose first "destructive" lists rm and
    whose second lists the stock functions was read as the stock boundary, rm unnoticed."""
    text = json.dumps(_doc(), indent=1)
    text = text.replace('\n "destructive": [',
                        '\n "destructive": [{"name": "rm", "reason": "x"}],\n "destructive": [', 1)
    line = text.splitlines().index(' "destructive": [') + 1
    path = tmp_path / "b.json"
    path.write_text(text)
    res = runner.invoke(app, ["export", "mcp", "--boundary", str(path), "-o",
                              str(tmp_path / "mcp.json")])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert f"{path}:{line}: 'destructive' is given twice in one object" in out, out
    assert "Traceback" not in res.output and not (tmp_path / "mcp.json").exists()
    nested = _doc(destructive=[{"name": "rm", "reason": "x"}])
    path.write_text(json.dumps(nested).replace('"reason": "x"', '"reason": "x", "name": "cp"'))
    with pytest.raises(BoundaryError, match=":1: 'name' is given twice"):
        boundaries.load(path)


def test_a_byte_order_mark_is_dropped_and_lines_stay_right(tmp_path) -> None:
    """Editors on Windows write a BOM; label sets accepted it while boundaries were refused
    as invalid JSON."""
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_doc(), indent=1), encoding="utf-8-sig")
    res = runner.invoke(app, ["export", "mcp", "--boundary", str(path), "-o",
                              str(tmp_path / "mcp.json")])
    assert res.exit_code == 0, res.output
    tools = json.loads((tmp_path / "mcp.json").read_text())["tools"]
    assert {t["name"] for t in tools if t["annotations"]["destructiveHint"]} == {
        item["name"] for item in STOCK["destructive"]}
    path.write_text('{\n "schema": "careful.boundary/1",\n nope', encoding="utf-8-sig")
    with pytest.raises(BoundaryError, match=r"b\.json:3: invalid JSON"):
        boundaries.load(path)
    path.write_text('{\n "name": "a",\n "name": "b"}', encoding="utf-8-sig")
    with pytest.raises(BoundaryError, match=r"b\.json:3: 'name' is given twice"):
        boundaries.load(path)
