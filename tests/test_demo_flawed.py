"""``careful demo``'s SYNTHETIC flawed run: every flaw does what the manifest says, every rule
and several of bfcl's error types occur, bfcl-eval's own evaluator agrees with the engine's
verdicts (run here), the output fits a screen, and two runs write the same bytes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_cli.common import command_name, console
from careful_engine.core import bfcl
from careful_engine.core.checker import ERROR_TYPES
from careful_engine.core.decode import decode_entry
from careful_engine.core.trajectory import Outcome
from careful_engine.demo import flaws
from careful_engine.demo import reference as demo
from careful_engine.scoring.rules import RULE_REGISTRY, RULES

from .bfcl_oracle import error_type, evaluate_entries, official_handler

_load()
runner = CliRunner()
FLAWED = Path("runs/demo-flawed")
EFFECT_RULES = [r for r in RULES if r != "destructive_calls"]  # a count, not a rule


def _demo_in(root: Path):
    """``careful demo`` with its defaults, run in ``root`` on a 100-column console."""
    cwd, width = os.getcwd(), console.width
    os.chdir(root)
    console.width = 100
    try:
        return runner.invoke(app, ["demo"], catch_exceptions=False)
    finally:
        os.chdir(cwd)
        console.width = width


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("demo_a")
    res = _demo_in(root)
    assert res.exit_code == 0, res.output
    return root, res.output


def _lines(root: Path, run: str) -> dict[str, dict]:
    path = root / "runs" / run / "careful-score" / "conversations.jsonl"
    return {x["id"]: x for x in map(json.loads, path.read_text().splitlines())}


def _manifest(root: Path) -> dict:
    return json.loads((root / FLAWED / flaws.MODEL_DIR / demo.MANIFEST).read_text())


def _entries(root: Path, category: str) -> list[dict]:
    path = root / FLAWED / flaws.MODEL_DIR / "multi_turn" / f"BFCL_v4_{category}_result.json"
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_run_is_marked_synthetic_and_the_manifest_says_what_went_where(demo_root) -> None:
    root, output = demo_root
    assert flaws.MODEL_DIR.startswith("SYNTHETIC")
    m = _manifest(root)
    assert m["synthetic"] is True and m["seed"] == flaws.SEED
    assert m["decoder"] == demo.DECODER and demo.DECODER in bfcl.registry()
    assert demo.is_synthetic(root / FLAWED / flaws.MODEL_DIR)
    assert not demo.is_synthetic(root / "runs/reference/reference")
    placed = m["conversations"]
    for category in bfcl.CATEGORIES:
        ids = {c.id for c in bfcl.conversations(category)}
        mine = {i: f for i, f in placed.items() if i in ids}
        assert 0.25 <= len(mine) / len(ids) <= 0.40, category  # about a third
        assert set(flaws.kinds_for(category)) == {f["flaw"] for f in mine.values()}, category
        assert m["flaws_per_category"][category] == dict(
            sorted(Counter(f["flaw"] for f in mine.values()).items()))
    for f in placed.values():
        assert f["flaw"] in flaws.KINDS and isinstance(f["turn"], int) and f["why"]
    assert "SYNTHETIC" in output


def test_each_flaw_does_what_the_manifest_says(demo_root) -> None:
    root, _ = demo_root
    placed = _manifest(root)["conversations"]
    lines = _lines(root, "demo-flawed")
    assert len(lines) == 800

    def hits(line: dict, rule: str, turn: int) -> int:
        return sum(len(h["calls"]) or 1 for h in line["hits"]
                   if h["rule"] == rule and h["turn"] == turn)

    for cid, line in lines.items():
        f = placed.get(cid)
        rules = line["rules"]
        if f is None:  # untouched: the reference, one call per step
            assert line["official_valid"] and line["safe_valid"], cid
            assert all(rules[r] == 0 for r in EFFECT_RULES if r != "unconfirmed"), cid
            continue
        kind, t = f["flaw"], f["turn"]
        if kind == "unrequested_destructive":
            assert hits(line, "collateral", t) == 1 and not line["safe_valid"], cid
        elif kind == "duplicate_write":
            assert hits(line, "duplicate_writes", t) >= 1 and not line["safe_valid"], cid
        elif kind == "repeated_read":
            assert hits(line, "redundant_reads", t) >= 1 and line["official_valid"], cid
        elif kind == "failed_retry":
            assert hits(line, "failed", t) == 1 and line["official_valid"], cid
        elif kind == "asked":
            assert hits(line, "asked", t) == 1, cid
            assert line["official_error_type"] == "multi_turn:empty_turn_model_response"
        elif kind == "wrong_argument":
            assert line["official_failed_turn"] == t, cid
            assert line["official_error_type"] in ("multi_turn:instance_state_mismatch",
                                                   "multi_turn:execution_response_mismatch")
        elif kind == "empty_turn":
            assert line["official_failed_turn"] == t and rules["asked"] == 0, cid
            assert line["official_error_type"] == "multi_turn:empty_turn_model_response"
        elif kind == "held_out_call":
            beyond = sum(hits(line, f"beyond_{b}", t) for b in ("destructive", "write", "read"))
            assert beyond >= 1, cid
        elif kind == "step_limit":
            assert line["official_error_type"] == "multi_turn:force_terminated", cid
            assert hits(line, "failed", t) == bfcl.MAXIMUM_STEP_LIMIT + 1, cid
        elif kind == "decode_failure":
            assert line["official_valid"] and line["safe_valid"], cid
        else:
            raise AssertionError(f"{cid}: unknown flaw {kind}")
    # decode failures are steps that bfcl's decoder refuses (checked with the decoder itself)
    handler = bfcl.handler(demo.DECODER)
    for category in bfcl.CATEGORIES:
        for e in _entries(root, category):
            f = placed.get(e["id"])
            if f and f["flaw"] == "decode_failure":
                steps = decode_entry(e, handler).turns[f["turn"]]
                bad = [s for s, step in enumerate(steps) if step.outcome is Outcome.DECODE_ERROR
                       and not isinstance(step.raw[0], str)]
                assert len(bad) == 1, e["id"]
                assert steps[bad[0] + 1].calls, e["id"]  # resent


def test_every_rule_and_four_error_types_occur(demo_root) -> None:
    root, _ = demo_root
    flawed = _lines(root, "demo-flawed").values()
    totals = Counter()
    for line in flawed:
        totals.update({k: n for k, n in line["rules"].items() if n is not None})
    for rule in EFFECT_RULES:
        if RULE_REGISTRY[rule].confirm:  # no confirmation protocol here: not applicable
            assert all(x["rules"][rule] is None for x in flawed), rule
        else:
            assert totals[rule] > 0, rule
    assert sum(x["surplus_output_tokens"] for x in flawed) > 0  # the token cost shows
    assert sum(x["surplus_input_tokens"] for x in flawed) > 0
    types = Counter(x["official_error_type"] for x in flawed if not x["official_valid"])
    assert set(types) <= set(ERROR_TYPES)
    assert len(types) >= 4, types
    reference = _lines(root, "reference").values()
    assert all(x["official_valid"] and x["safe_valid"] for x in reference)
    assert all(x["rules"][r] == 0 for x in reference for r in EFFECT_RULES
               if r != "unconfirmed")


def test_bfcl_and_safe_accuracy_differ_in_every_category(demo_root) -> None:
    root, _ = demo_root
    lines = _lines(root, "demo-flawed").values()
    for category in bfcl.CATEGORIES:
        mine = [x for x in lines if x["category"] == category]
        official = sum(x["official_valid"] for x in mine)
        safe = sum(x["safe_valid"] for x in mine)
        assert len(mine) == 200 and safe < official < 200, category


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_official_verdicts_equal_bfcl_evals_own(demo_root, category: str) -> None:
    root, _ = demo_root
    lines = _lines(root, "demo-flawed")
    entries = _entries(root, category)
    theirs = evaluate_entries(entries, category, official_handler(demo.DECODER),
                              flaws.MODEL_DIR)
    assert len(theirs) == 200
    ours = {i: (lines[i]["official_valid"], lines[i]["official_error_type"]) for i in theirs}
    disagree = {i: (ours[i], (r["valid"], error_type(r))) for i, r in theirs.items()
                if ours[i] != (r["valid"], error_type(r))}
    assert not disagree, list(disagree.items())[:3]
    assert sum(not r["valid"] for r in theirs.values()) > 20


def test_output_fits_a_screen_and_says_where_to_look(demo_root) -> None:
    _, output = demo_root
    lines = output.rstrip("\n").splitlines()
    assert len(lines) <= 40, output
    assert max(map(len, lines)) <= 100
    for part in ("BFCL / effect-safe", "McNemar", "Rule totals", "surplus",
                 "careful workbench runs/reference runs/demo-flawed", "SYNTHETIC"):
        assert part.lower() in output.lower(), part
    first = next(x for x in lines if " first (" in x).split("open ")[1].split(" ")[0]
    line = _lines(demo_root[0], "demo-flawed")[first]
    assert line["official_valid"] and not line["safe_valid"]
    # every column of the rule totals is explained in the legend under it (+? was not)
    i = next(k for k, x in enumerate(lines) if x.startswith("Rule totals"))
    columns = lines[i + 1].split()[1:]
    legend = " ".join(lines[i + 5:next(k for k, x in enumerate(lines) if x.startswith("Surplus"))])
    assert "+?" in columns
    for tag in columns:
        assert f"{tag}:" in legend or f"{tag}/" in legend or f"/{tag}:" in legend \
            or f"({tag}:" in legend, (tag, legend)


@pytest.mark.parametrize(("on_path", "named"), [(False, ".venv/bin/careful"),
                                                (True, "careful")])
def test_the_next_hint_names_careful_as_the_user_can_run_it(tmp_path: Path, monkeypatch,
                                                           on_path: bool, named: str) -> None:
    """Run as ``.venv/bin/careful demo`` with ``careful`` not on PATH, the hint names the
    script (relative to the working folder); with it on PATH, plain ``careful``."""
    script = tmp_path / ".venv/bin/careful"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: str(script) if on_path else None)
    res = _demo_in(tmp_path)
    assert res.exit_code == 0, res.output
    assert f"Next: {named} workbench runs/reference runs/demo-flawed" in res.output


def test_the_command_outside_the_working_folder_is_named_by_its_full_path(
        tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "venv/bin/careful"
    monkeypatch.setattr(sys, "argv", [str(script)])
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: "/usr/bin/careful")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert command_name() == str(script)
    monkeypatch.setattr(sys, "argv", ["/x/pytest/__main__.py"])  # not the entry point
    assert command_name() == "careful"


def test_paired_columns_and_legends_are_those_of_compare_and_leaderboard(demo_root) -> None:
    """One order and one wording: the paired table's gained/lost as compare prints them, the
    rule legend as score and leaderboard word it (the rule registry's)."""
    from careful_engine.present.compare import GAINED_LOST, GAINED_LOST_NOTE
    from careful_engine.scoring.rules import rule_legend

    _, output = demo_root
    header = next(x for x in output.splitlines() if x.split()[:1] == ["category"]).split()
    plus, minus = GAINED_LOST
    assert (plus, minus) == ("+", "−")  # compare's order
    assert header == ["category", "n", "BFCL", plus, minus, "p", "safe", plus, minus, "p"]
    flat = " ".join(output.split())
    assert f"{GAINED_LOST_NOTE}; p: exact McNemar" in flat
    assert rule_legend(["beyond_write", "beyond_read", "beyond_unknown"]) in flat
    assert "+W/+R" not in flat


def test_two_runs_write_the_same_bytes(demo_root, tmp_path: Path) -> None:
    root, _ = demo_root
    res = _demo_in(tmp_path)
    assert res.exit_code == 0, res.output

    def tree(base: Path) -> dict[str, bytes]:
        return {str(p.relative_to(base)): p.read_bytes()
                for p in sorted((base / "runs").rglob("*")) if p.is_file()}

    a, b = tree(root), tree(tmp_path)
    assert a.keys() == b.keys() and len(a) > 20
    assert [k for k in a if a[k] != b[k]] == []


def test_the_workbench_reuses_the_demos_score_lines(demo_root, tmp_path, monkeypatch) -> None:
    """`careful demo` signs the score lines it writes: the workbench shows them as they are
    (no rescoring); the same folders under another install's key are not used."""
    from careful_engine import browse
    from careful_engine.scoring.score import load_effects

    root, _ = demo_root
    runs = [root / "runs" / "reference", root / FLAWED]

    def browsers() -> list[browse.RunBrowser]:
        return [browse.RunBrowser(ref, load_effects(), cache_dir=tmp_path / "wb-cache")
                for ref in browse.find_runs(runs)]

    here = browsers()
    assert len(here) == 2
    for b in here:
        assert b.scored and b.untrusted is None and b.mismatch is None
        assert b.scores_path == b.ref.run / browse.SCORE_DIR / browse.SCORES_NAME
    monkeypatch.setenv("CAREFUL_CACHE_DIR", str(tmp_path / "another-install"))
    for b in browsers():
        assert not b.scored and b.summaries() == {}
        assert "not signed by this install; not used" in b.untrusted


def test_the_manifest_is_read_defensively(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    assert demo.manifest(folder) == {} and not demo.is_synthetic(folder)
    for text in ("not json", "[1, 2]", '{"synthetic": "yes"}', "[" * 100_000):
        (folder / demo.MANIFEST).write_text(text)
        assert not demo.is_synthetic(folder)
    (folder / demo.MANIFEST).write_text('{"synthetic": true}')
    assert demo.is_synthetic(folder)
    assert demo.model_folder(folder / "multi_turn" / "x_result.json") == folder


def test_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    folder = tmp_path / "runs/demo-flawed" / flaws.MODEL_DIR / "multi_turn"
    folder.mkdir(parents=True)
    (folder / "BFCL_v4_multi_turn_base_result.json").symlink_to(target)
    res = runner.invoke(app, ["demo", "--out", str(tmp_path / "runs/reference"), "--no-score"])
    assert res.exit_code == 2, res.output
    assert target.read_text() == "keep me"


def test_the_workbench_shows_the_synthetic_badge(tmp_path: Path, monkeypatch) -> None:
    """Home marks the synthetic run, and Replay's top line carries the badge for it only."""
    import asyncio

    from textual.widgets import DataTable

    from workbench.app import WorkbenchApp
    from workbench.context import Settings
    from workbench.widgets import NavBar

    cats = ("multi_turn_base",)
    demo.write_reference_run(tmp_path / "runs/reference", cats)
    demo.write_reference_run(tmp_path / "runs/fake", cats)
    manifest = tmp_path / "runs/fake/reference" / demo.MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "synthetic": True}))
    monkeypatch.chdir(tmp_path)

    async def go() -> None:
        app = WorkbenchApp(Settings(runs=[Path("runs/fake"), Path("runs/reference")],
                                    db=Path("careful.db"), cache_dir=tmp_path / "cache",
                                    user="tester"))
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            assert [app.context.synthetic(r) for r in app.context.refs] == [True, False]
            runs = app.screen.query_one("#runs", DataTable)
            assert [str(runs.get_row(k)[0]) for k in ("fake", "reference")] == [
                "fake (SYNTHETIC)", "reference"]
            await pilot.press("4")
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()

            def top() -> str:
                return str(app.screen.query_one(NavBar).render())

            assert "SYNTHETIC" in top()
            await pilot.press("r")
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            assert "SYNTHETIC" not in top()

    asyncio.run(go())


def test_the_readme_transcript_is_what_the_demo_prints(demo_root) -> None:
    """The README's demo transcript, line by line (trailing spaces aside), on the same
    100-column console."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    start = readme.index("```\ncareful demo: runs/reference") + 4
    shown = readme[start:readme.index("```", start)].rstrip("\n").splitlines()
    printed = [x.rstrip() for x in demo_root[1].strip("\n").splitlines()]
    assert [x.rstrip() for x in shown] == printed


@pytest.mark.parametrize(("out", "flawed", "says"), [
    ("same/ref", "same/ref/reference", "--flawed-out is inside --out"),
    ("same/flawed/ref", "same/flawed", "--out is inside --flawed-out"),
])
def test_one_run_folder_inside_the_other_is_refused(tmp_path: Path, out, flawed, says) -> None:
    """The flawed run written inside the reference run (or the other way round) would mix
    two runs in one folder: refused before anything is written."""
    res = runner.invoke(app, ["demo", "--out", str(tmp_path / out), "--flawed-out",
                              str(tmp_path / flawed), "--no-score"])
    assert res.exit_code == 2, res.output
    assert says in " ".join(res.output.split())
    assert not (tmp_path / "same").exists()


def test_a_link_at_the_default_flawed_folder_names_flawed_out(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs/demo-flawed").symlink_to(tmp_path, target_is_directory=True)
    res = runner.invoke(app, ["demo", "--out", str(tmp_path / "runs/reference"), "--no-score"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "--flawed-out" in text and "--out " not in text.replace("--flawed-out", ""), text
