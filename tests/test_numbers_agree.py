"""Every number means what it says and is the same on every screen: the same quantity read
from two places of the engine's own output agrees (each test fails on the code before it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo
from careful_engine.present.tables import confirm_stats
from careful_engine.scoring import score as scoring
from careful_engine.scoring.result import SCORES_NAME
from tests.workbench_support import write_run

_load()
CATEGORY = "multi_turn_base"


def reference_run(root: Path, ids: list[str]) -> Path:
    """A run of the reference trajectories of ``ids`` (the others of the category missing)."""
    return write_run(root, "m", [demo.reference_entry(bfcl.conversation(i)) for i in ids])


def breaks_on(victim: str, real: Callable) -> Callable:
    """``real`` failing inside the engine on conversation ``victim`` only (unscorable)."""
    def broken(conv, *a, **k):
        if conv.id == victim:
            raise RecursionError("maximum recursion depth exceeded")
        return real(conv, *a, **k)
    return broken


def test_failed_calls_in_a_line_are_the_failed_rule(tmp_path) -> None:
    """conversations.jsonl's model_failed_calls counted every unsuccessful call, a false
    verification_status among them (base_153's reference: its passport check returns false),
    while the rule ``failed`` and the paper count calls that raised or returned an error: one
    line said 1 failed call and 0. The references score zero on every rule, so on both."""
    ids = ["multi_turn_base_0", "multi_turn_base_153", "multi_turn_base_181"]
    run, out = reference_run(tmp_path / "run", ids), tmp_path / "out"
    res = CliRunner().invoke(app, ["score", str(run), "--out", str(out)])
    assert res.exit_code == 1, res.output  # the other ids are missing
    lines = {x["id"]: x for x in map(json.loads, (out / SCORES_NAME).read_text().splitlines())}
    for i in ids:
        line = lines[i]
        assert line["official_valid"] and line["model_calls"] > 0
        assert line["model_failed_calls"] == line["rules"]["failed"] == 0, (i, line)


def test_unscorable_and_missing_conversations_need_what_their_reference_needs(
        tmp_path, monkeypatch) -> None:
    """A conversation that could not be scored had no reference destructive count (None),
    so the confirmation table's "needing destructive" (and strict / needing) left it out,
    while a missing one, also failed, was counted: the denominator depended on how the
    conversation failed. Now each has its reference's count, the one a replay gives."""
    victim, other = "multi_turn_base_0", "multi_turn_base_1"
    effects = scoring.load_effects()

    def category(run: Path) -> scoring.CategoryScore:
        return scoring.score_run(run, effects=effects).scores[0].categories[CATEGORY]

    scored = category(reference_run(tmp_path / "all", [victim, other]))
    missing = category(reference_run(tmp_path / "lacking", [other]))
    monkeypatch.setattr(scoring, "replay", breaks_on(victim, scoring.replay))
    unscorable = category(reference_run(tmp_path / "broken", [victim, other]))

    def result(cs: scoring.CategoryScore):
        return next(r for r in cs.results if r.id == victim)

    assert result(scored).rules is not None
    assert result(missing).verdict.error_type == scoring.MISSING
    assert result(unscorable).verdict.error_type == scoring.UNSCORABLE
    needs = result(scored).rules.reference_destructive
    assert needs > 0
    assert result(missing).reference_destructive == needs
    assert result(unscorable).reference_destructive == needs
    assert result(unscorable).to_json()["reference_destructive_calls"] == needs
    counts = {confirm_stats(cs).needing for cs in (scored, missing, unscorable)}
    assert len(counts) == 1, counts


def test_sensitivity_says_how_many_entries_each_rho_ranks(monkeypatch) -> None:
    """``careful sensitivity`` titled its rho table "(3 entries)" while a category's rho
    ranks only the entries that have it (2 for miss_func here): each rho's count is now
    shown, the count its Spearman was computed over."""
    from collections import Counter

    from rich.console import Console

    from careful_engine.analysis import sensitivity as sens
    from careful_engine.present import sensitivity as show

    base, miss = "multi_turn_base", "multi_turn_miss_func"
    cats = [{base: 0.5, miss: 0.4}, {base: 0.3}, {base: 0.2, miss: 0.6}, {base: 0.1}]
    settings = [sens.Setting("paper-final", "strict"), sens.Setting("paper-final", "loose")]
    rows = {s: [sens.Rescored(s, f"m{i}", dict(c), {k: v / 2 for k, v in c.items()}, {},
                              Counter()) for i, c in enumerate(cats)] for s in settings}
    result = sens.Sensitivity(settings, [f"run{i}" for i in range(len(cats))], rows)
    used: dict[str | None, set[int]] = {}
    real = sens.spearman
    monkeypatch.setattr(sens, "spearman", lambda x, y: used.setdefault(
        current[0], set()).add(len(x)) or real(x, y))
    current: list[str | None] = [None]
    for c in (base, miss, None):
        current[0] = c
        for s in settings:
            result.rho(s, c)
    monkeypatch.setattr(sens, "spearman", real)
    console = Console(width=200, record=True)
    console.print(show.rho_terminal(result))
    lines = console.export_text().splitlines()
    shown = next(x for x in lines if x.split()[:1] == ["entries"]).split()[1:]
    assert [int(n) for n in shown[:3]] == [next(iter(used[c])) for c in (base, miss, None)]
    assert used[miss] == {2} and used[None] == {len(cats)}
    caption = show.rho_report(result).caption
    assert f"miss_func {next(iter(used[miss]))}" in caption


def test_compare_says_its_overall_row_is_pooled_not_the_mean(tmp_path) -> None:
    """Compare's overall A % (passes over the pooled paired conversations) is not the
    leaderboard's mean BFCL % of the same run (four categories, an absent one as 0): for a
    run of one category they differ fourfold; the caption now says which it is."""
    from careful_engine.analysis.leaderboard import Entry, compare
    from careful_engine.present.compare import compare_report
    from careful_engine.present.leaderboard import leaderboard_reports

    ids = ["multi_turn_base_0", "multi_turn_base_1"]
    entries = [Entry(name, run, scoring.score_run(run).scores[0]) for name, run in
               (("a", reference_run(tmp_path / "a", ids)),
                ("b", reference_run(tmp_path / "b", ids[:1])))]
    rep = compare_report(compare(entries[0].score, entries[1].score), "a", "b")
    overall = dict(zip(rep.columns, rep.rows[-1], strict=True))
    assert overall["category"] == "overall"
    board = leaderboard_reports(entries)[0]
    mean = {r[0]: r[board.columns.index("mean BFCL %")] for r in board.rows}
    assert overall["A %"] != mean["a"]  # two different quantities ...
    assert "pooled" in rep.caption and "not bfcl's four-category mean" in rep.caption  # ... named
