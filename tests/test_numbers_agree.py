"""Every number means what it says and is the same on every screen: the same quantity read
from two places of the engine's own output agrees (each test fails on the code before it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo
from careful_engine.scoring import score as scoring
from careful_engine.scoring.result import SCORES_NAME
from careful_engine.scoring.tallies import confirm_stats
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


# ---------------------------------------------------------------- unconfirmed destructive calls
# Paper §5: "Under BFCL's standard protocol no confirmation can ever occur, so this rule only
# separates models under the protocol of § 6" (Table 5: "apply to confirm runs only"): without
# the protocol the count is not applicable, on every screen, as strict success is.

UNCONF = "unconfirmed"


def test_unconfirmed_is_not_applicable_without_the_protocol_in_every_file(tmp_path) -> None:
    """``careful score``'s terminal hid the unconfirmed column of a run without the protocol
    (and printed strict as n/a) while rules.json/csv/md, conversations.jsonl and the CI
    document gave it as a count (every destructive call): now null / – / hidden, and each
    legend says why."""
    import csv

    import jsonschema

    from careful_engine.analysis import ci_report
    from careful_engine.present.tables import UNCONFIRMED_NA
    from careful_engine.scoring.rules import NO_PROTOCOL, RULE_REGISTRY

    ids = ["multi_turn_base_0", "multi_turn_base_1"]
    run, out, doc = reference_run(tmp_path / "run", ids), tmp_path / "out", tmp_path / "doc.json"
    res = CliRunner().invoke(app, ["score", str(run), "--out", str(out), "--format", "json",
                                   "--output", str(doc)])
    assert res.exit_code == 1, res.output  # the other ids are missing
    lines = [json.loads(x) for x in (out / SCORES_NAME).read_text().splitlines()]
    scored = [x for x in lines if x["id"] in ids]
    assert all(x["confirm_protocol"] is False and x["strict_valid"] is None for x in scored)
    made = sum(x["rules"]["destructive_calls"] for x in scored)
    assert made > 0  # the old count: every one of them "unconfirmed"
    assert all(x["rules"][UNCONF] is None for x in scored)
    assert not [h for x in scored for h in x["hits"] if h["rule"] == UNCONF]
    assert scoring.ConversationResult.from_json(scored[0]).strict_valid is None  # read back

    table = json.loads((out / "rules.json").read_text())
    column = RULE_REGISTRY[UNCONF].column
    assert [r[column] for r in table["rows"]] == [None]
    assert UNCONFIRMED_NA in table["caption"]
    rows = list(csv.DictReader((out / "rules.csv").read_text().splitlines()))
    assert [r[column] for r in rows] == [""]
    md = (out / "rules.md").read_text().splitlines()
    header = [c.strip() for c in md[2].strip("|").split("|")]
    assert [c.strip(" `") for c in md[4].strip("|").split("|")][header.index(column)] == "–"

    document = json.loads(doc.read_text())
    jsonschema.validate(document, ci_report.schema())
    run_doc = document["runs"][0]
    assert run_doc["categories"][0]["rules"][UNCONF] is None
    assert run_doc["overall"]["rules"][UNCONF] is None
    assert run_doc["categories"][0]["rules"]["destructive_calls"] == made

    # the terminal: no unconf column, and the legend says why
    rules_at = res.output.index("Rule violations")
    header_line = res.output[rules_at:].splitlines()[1].split()
    assert RULE_REGISTRY[UNCONF].tag not in header_line
    assert NO_PROTOCOL in " ".join(res.output[rules_at:].split())


def mixed_runs(root: Path) -> list:
    """Leaderboard entries of a run without the protocol (the references) and one with it
    (tests/workbench_support.py's careless run: the scripted user answers once)."""
    from careful_engine.analysis.leaderboard import Entry
    from tests.workbench_support import IDS, careless_entry

    effects = scoring.load_effects()
    runs = (("alpha", reference_run(root / "alpha", IDS)),
            ("beta", write_run(root / "beta", "m", [careless_entry(i) for i in IDS])))
    return [Entry(label, run, scoring.score_run(run, effects=effects).scores[0])
            for label, run in runs]


def test_unconfirmed_on_the_leaderboard_only_under_the_protocol(tmp_path) -> None:
    """The leaderboard's rule totals (its files, its terminal and the workbench's Rules tab)
    gave a run without the protocol an unconfirmed count (all its destructive calls) beside
    a confirm run's real one: now – (null), with the caption saying why."""
    from rich.console import Console

    from careful_engine.present.leaderboard import leaderboard_reports, leaderboard_terminal
    from careful_engine.present.tables import UNCONFIRMED_NA, rules_table, rules_terminal
    from careful_engine.scoring.rules import RULE_REGISTRY

    entries = mixed_runs(tmp_path)
    standard, confirm = (e.score for e in entries)
    assert [any(cs.confirm for cs in ms.categories.values()) for ms in (standard, confirm)] \
        == [False, True]
    made = sum(r.rules.counts["destructive_calls"] for cs in standard.categories.values()
               for r in cs.results if r.rules is not None)
    assert made > 0
    want = sum(r.rules.counts[UNCONF] for cs in confirm.categories.values()
               for r in cs.results if r.rules is not None)
    column, tag = RULE_REGISTRY[UNCONF].column, RULE_REGISTRY[UNCONF].tag

    board = leaderboard_reports(entries)[3]
    cells = {r[0]: r[board.columns.index(column)] for r in board.rows}
    assert cells == {"alpha": None, "beta": want}
    assert UNCONFIRMED_NA in board.caption
    score_table = rules_table([standard, confirm])
    assert [r[score_table.columns.index(column)] for r in score_table.rows] == [None, want]

    console = Console(width=200, record=True)
    console.print(leaderboard_terminal(entries)[2])
    console.print(rules_terminal([standard, confirm])[0])
    text = console.export_text().splitlines()
    for first in ("alpha", "m base"):  # the leaderboard's row, then the score table's
        header = next(x for x in text if tag in x.split()).split()
        row = next(x for x in text if x.startswith(first)).split()
        assert row[len(first.split()) - 1 + header.index(tag)] == "–"
        text = text[text.index(next(x for x in text if x.startswith(first))) + 1:]


def test_sensitivity_counts_unconfirmed_only_under_the_protocol(tmp_path) -> None:
    """``careful sensitivity``'s counts gave an entry without the protocol an unconfirmed
    count and its change: now – (null), as its strict columns."""
    from careful_engine.analysis import sensitivity as sens
    from careful_engine.present.sensitivity import counts_report
    from careful_engine.scoring.rules import RULE_REGISTRY

    effects = scoring.load_effects()
    ms = scoring.score_run(reference_run(tmp_path / "run", ["multi_turn_base_0"]),
                           effects=effects, keep_traces=True).scores[0]
    default = sens.Setting("paper-final", "strict")
    res = sens.rescore_model(ms, [default], {"paper-final": effects})
    assert res[default].counts["destructive_calls"] > 0
    rep = counts_report(sens.Sensitivity([default], ["m"], {default: [res[default]]}))
    row = dict(zip(rep.columns, rep.rows[0], strict=True))
    column = RULE_REGISTRY[UNCONF].column
    assert row[column] is None and row[f"Δ {column}"] is None
    assert row["mean strict %"] is None
    assert +res[default].counts == +sum((cs.rule_totals() for cs in ms.categories.values()),
                                        start=type(res[default].counts)())


def test_a_gate_on_unconfirmed_needs_the_protocol(tmp_path) -> None:
    """``--max-increase unconfirmed=N`` compared counts that mean nothing without the
    protocol (every destructive call): it now fails as not applicable, as a strict floor."""
    from careful_engine.analysis.gates import check_increases, parse_increase

    standard, confirm = (e.score for e in mixed_runs(tmp_path))
    (cond,) = check_increases(standard, confirm, [parse_increase("unconfirmed=1000")])
    assert not cond.passed and "not applicable" in cond.message
    (same,) = check_increases(confirm, confirm, [parse_increase("unconfirmed=0")])
    assert same.passed and same.values["baseline"] == sum(
        r.rules.counts[UNCONF] for cs in confirm.categories.values() for r in cs.results
        if r.rules is not None)


# ---------------------------------------------------------------- the workbench's screens


def _on_leaderboard(root: Path, check: Callable) -> None:
    """``check(app, screen)`` on the workbench's Leaderboard over the test runs (alpha: no
    protocol, beta: the scripted user answered once), at 80x24."""
    import asyncio

    from tests.workbench_support import settings, settle
    from workbench.app import WorkbenchApp

    async def go() -> None:
        app = WorkbenchApp(settings(root))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await settle(pilot, "5")
            await check(app, app.screen, pilot)
    asyncio.run(go())


def _cells(table) -> list[dict[str, str]]:
    columns = [str(c.label) for c in table.ordered_columns]
    return [dict(zip(columns, map(str, table.get_row_at(i)), strict=True))
            for i in range(table.row_count)]


def test_workbench_rules_tab_shows_unconfirmed_only_under_the_protocol(workdir) -> None:
    """The Rules tab gave alpha (no protocol) an unconfirmed count, all its destructive
    calls, while every conversation view hid it: now –, its note saying why; beta's is the sum
    of its score lines' counts."""
    from textual.widgets import DataTable, Static

    from careful_engine.present.tables import UNCONFIRMED_NA
    from careful_engine.scoring.rules import RULE_REGISTRY

    def lines(run: str) -> list[dict]:
        path = workdir / "runs" / run / "careful-score" / SCORES_NAME
        return [json.loads(x) for x in path.read_text().splitlines()]

    column = RULE_REGISTRY[UNCONF].column
    assert sum(x["rules"]["destructive_calls"] for x in lines("alpha") if x.get("rules") is not None) > 0

    async def check(app, screen, pilot) -> None:
        rows = {r["entry"]: r for r in _cells(screen.query_one("#lb-rules", DataTable))}
        assert rows["alpha"][column] == "–"
        assert rows["beta"][column] == str(sum(x["rules"][UNCONF] for x in lines("beta")
                                               if x.get("rules") is not None))
        note = str(screen.query_one("#lb-rules-note", Static).render())
        assert " ".join(UNCONFIRMED_NA.split()) in " ".join(note.split())
    _on_leaderboard(workdir, check)


def test_home_and_leaderboard_say_which_conversations_they_count(workdir) -> None:
    """Home's "convs" (the conversations in a run's files: 4) and the leaderboard's
    "conversations" (every conversation of its categories, the missing ones scored as failed:
    200) looked like one quantity: Home's column now says "in files", and each legend says
    what its number counts."""
    from textual.widgets import DataTable, Static

    from careful_engine.present.leaderboard import CONVERSATIONS
    from workbench.screens.home import IN_FILES, IN_FILES_NOTE

    async def check(app, screen, pilot) -> None:
        board = {r["entry"]: r for r in _cells(screen.query_one("#lb-rules", DataTable))}
        board_note = " ".join(str(screen.query_one("#lb-rules-note", Static).render()).split())
        await pilot.press("1")
        await pilot.pause()
        home = app.screen
        table = home.query_one("#runs", DataTable)
        rows = {r["run"]: r for r in _cells(table)}
        note = " ".join(str(home.query_one("#runs-note", Static).render()).split())
        for ref in app.context.refs:
            browser = app.context.browser(ref)
            present, missing = len(browser.rows()), browser.missing()
            assert missing > 0
            assert rows[ref.label][IN_FILES] == str(present)
            assert board[ref.label]["conversations"] == str(present + missing)
        assert "convs" not in rows[ref.label] and "conversations" not in rows[ref.label]
        assert IN_FILES_NOTE in note and f"conversations: {CONVERSATIONS}" in board_note
        assert "missing" in IN_FILES_NOTE and "missing" in CONVERSATIONS
    _on_leaderboard(workdir, check)


def test_workbench_compare_says_its_overall_row_is_pooled(workdir) -> None:
    """The workbench's Compare tab showed the overall row without the report's caption that it
    pools the paired conversations (not the Ranking tab's four-category mean)."""
    from textual.widgets import DataTable, Static

    from careful_engine.present.compare import OVERALL

    async def check(app, screen, pilot) -> None:
        table = screen.query_one("#lb-compare", DataTable)
        assert _cells(table)[-1]["category"] == "overall"
        note = " ".join(str(screen.query_one("#cmp-note", Static).render()).split())
        assert OVERALL in note
    _on_leaderboard(workdir, check)


# ---------------------------------------------------------------- careful demo


def test_demo_surplus_share_is_the_rules_tables() -> None:
    """``careful demo`` summed the surplus tokens itself, over every conversation with token
    counts, while the rules table (present/tables.py) leaves out inference errors and
    missing entries: an inference error with logged tokens moved the demo's share only. The
    demo now reads the table's implementation."""
    from collections import Counter

    from careful_engine.core.checker import INFERENCE_ERROR
    from careful_engine.core.trajectory import Verdict
    from careful_engine.demo.summary import surplus_share
    from careful_engine.present.report import pct
    from careful_engine.present.tables import rules_table
    from careful_engine.scoring.rules import ConversationRules

    def result(i: int, verdict: Verdict, out: int, surplus: int) -> scoring.ConversationResult:
        rules = ConversationRules(Counter(), [], [], steps=2, output_tokens=out,
                                  input_tokens=10 * out, surplus_output_tokens=surplus,
                                  surplus_input_tokens=10 * surplus)
        return scoring.ConversationResult("m", CATEGORY, f"{CATEGORY}_{i}", verdict, rules=rules)

    cs = scoring.CategoryScore("m", CATEGORY, [
        result(0, Verdict(True, None, None), 200, 20),
        result(1, Verdict(False, INFERENCE_ERROR, "the server fell over"), 300, 300)])
    ms = scoring.ModelScore("m", None, {CATEGORY: cs})
    table = rules_table([ms])
    row = dict(zip(table.columns, table.rows[0], strict=True))
    assert (row["surplus out %"], row["surplus in %"]) == (pct(20 / 200), pct(200 / 2000))
    assert surplus_share(ms) == (row["surplus out %"], row["surplus in %"])


# ---------------------------------------------------------------- the CI document


def test_ci_document_does_not_put_a_count_beside_the_mean_as_its_n(tmp_path) -> None:
    """The CI document's ``overall`` held ``n`` (every conversation of the run's categories)
    beside ``mean_percent``, bfcl's four-category mean, which is not a share of them (one
    category: the mean is a quarter of the passes over n), and the Markdown summary printed
    that n in the mean's row. The count is now ``overall.conversations``, the schema says what
    it is, and the mean's row has no n."""
    import jsonschema

    from careful_engine.analysis import ci_report

    run, doc = reference_run(tmp_path / "run", ["multi_turn_base_0"]), tmp_path / "doc.json"
    res = CliRunner().invoke(app, ["score", str(run), "--out", str(tmp_path / "out"),
                                   "--format", "json", "--output", str(doc)])
    assert res.exit_code == 1, res.output
    document = json.loads(doc.read_text())
    jsonschema.validate(document, ci_report.schema())
    (entry,) = document["runs"]
    overall, cats = entry["overall"], entry["categories"]
    assert "n" not in overall
    assert overall["conversations"] == sum(c["n"] for c in cats)
    passes = sum(c["scores"]["bfcl"]["passes"] for c in cats)
    assert overall["mean_percent"]["bfcl"] != round(100 * passes / overall["conversations"], 4)
    described = ci_report.schema()["$defs"]["run"]["properties"]["overall"]["properties"]
    assert "not the denominator of mean_percent" in described["conversations"]["description"]
    with pytest.raises(jsonschema.ValidationError):  # the old key is gone
        jsonschema.validate({**document, "runs": [{**entry, "overall": {
            **overall, "n": overall["conversations"]}}]}, ci_report.schema())
    summary = ci_report.markdown(document).splitlines()
    mean_row = next(x for x in summary if "| mean |" in x)
    assert mean_row.split("|")[4].strip() == "–"
    assert str(overall["conversations"]) not in mean_row.split("|")[4]
    assert ci_report.MEAN_NOTE in summary


def test_steps_and_output_per_conversation_round_half_up_on_every_screen(tmp_path) -> None:
    """2.25 steps and 2.5 output tokens per conversation: the files showed 2.2 and 2 (Python's
    round, half to even), the terminal 2.3 and 2; both now show 2.3 and 3 (core.figures)."""
    from collections import Counter

    from rich.console import Console

    from careful_engine.core.trajectory import Verdict
    from careful_engine.present.tables import rules_table, rules_terminal
    from careful_engine.scoring.rules import ConversationRules

    def result(i: int, steps: int, out: int) -> scoring.ConversationResult:
        rules = ConversationRules(Counter(), [], [], steps=steps, output_tokens=out,
                                  input_tokens=10, surplus_output_tokens=0,
                                  surplus_input_tokens=0)
        return scoring.ConversationResult("m", CATEGORY, f"{CATEGORY}_{i}", Verdict(True),
                                          rules=rules)

    cs = scoring.CategoryScore("m", CATEGORY, [result(0, 2, 2), result(1, 2, 3),
                                               result(2, 2, 2), result(3, 3, 3)])
    ms = scoring.ModelScore("m", None, {CATEGORY: cs})
    table = rules_table([ms])
    table.write(tmp_path)
    md = (tmp_path / "rules.md").read_text()
    row = next(r for r in (tmp_path / "rules.csv").read_text().splitlines()[1:])
    assert "| 2.3 | 3 |" in md and ",2.3,3," in row
    stored = json.loads((tmp_path / "rules.json").read_text())["rows"][0]
    assert (stored["steps / conv"], stored["output / conv"]) == (2.25, 2.5)  # the values
    console = Console(width=200, record=True)
    console.print(rules_terminal([ms])[1])
    line = next(x for x in console.export_text().splitlines() if x.lstrip().startswith("m "))
    assert line.split()[2:4] == ["2.3", "3"]


def test_table_json_stores_the_value_the_ci_document_does(tmp_path) -> None:
    """A mean of 26.25 %: accuracy.json stored the shown 26.3, so a user checking
    ``--fail-under bfcl=26.3`` (which fails: 26.25 < 26.3) against it was misled. The table's
    JSON now stores 26.25, as the CI document does; its Markdown and CSV show 26.3."""
    from careful_engine.analysis import ci_report
    from careful_engine.core.trajectory import Verdict
    from careful_engine.present.tables import accuracy_table
    from careful_engine.scoring.result import ConversationResult

    ms = scoring.ModelScore("m", None)
    for cat, ok in ((CATEGORY, 100), ("multi_turn_miss_func", 110)):
        ms.categories[cat] = scoring.CategoryScore("m", cat, [
            ConversationResult("m", cat, f"{cat}_{i}", Verdict(i < ok)) for i in range(200)])
    accuracy_table([ms], False).write(tmp_path)
    row = json.loads((tmp_path / "accuracy.json").read_text())["rows"][0]
    mean = ci_report.model_json(ms, False, path="x", role="run")["overall"]["mean_percent"]
    assert row["mean BFCL"] == mean["bfcl"] == 26.25
    assert "| 26.3 |" in (tmp_path / "accuracy.md").read_text()
    assert ",26.3" in (tmp_path / "accuracy.csv").read_text().splitlines()[1]



def confirmed_entry(conv_id: str) -> dict:
    """``conv_id``'s reference under the confirmation protocol, every turn that makes a
    destructive call opening with a proposal the scripted user answers yes to: a strict pass."""
    from types import SimpleNamespace

    effects = scoring.load_effects()
    conv = bfcl.conversation(conv_id)
    entry = demo.reference_entry(conv)
    answers = {}
    for t, turn in enumerate(conv.ground_truth):
        if scoring.reference_destructive(SimpleNamespace(ground_truth=[turn]), effects):
            entry["result"][t] = [["Shall I go ahead?"], *entry["result"][t]]
            answers[str(t)] = [{"step": 0, "answer": "yes"}]
    entry["careful_user_answers"] = answers
    return entry


def strict_run(root: Path) -> tuple[Path, list[str], str]:
    """A confirm run of three conversations whose reference makes a destructive call (the
    first a strict pass) and one whose reference makes none (a trivial strict pass); the
    others of the category missing. Returns the run, the three ids and the trivial one."""
    effects = scoring.load_effects()
    convs = bfcl.conversations(CATEGORY)
    needs = [c.id for c in convs if scoring.reference_destructive(c, effects)][:3]
    trivial = next(c.id for c in convs if not scoring.reference_destructive(c, effects))
    unconfirmed = [demo.reference_entry(bfcl.conversation(i)) for i in [*needs[1:], trivial]]
    for e in unconfirmed:
        e["careful_user_answers"] = {}
    return (write_run(root, "m", [confirmed_entry(needs[0]), *unconfirmed]), needs,
            trivial)


def test_strict_comparisons_and_sensitivity_count_what_strict_counts(tmp_path) -> None:
    """``careful compare --score strict`` (and its regression gate) paired every conversation
    and the sensitivity's mean strict % divided by every conversation, trivial passes
    included: both now count the conversations the strict figure is over."""
    from careful_engine.analysis import leaderboard as lb
    from careful_engine.analysis import sensitivity as sens

    run, needs, trivial = strict_run(tmp_path / "run")
    effects = scoring.load_effects()
    ms = scoring.score_run(run, effects=effects, keep_traces=True).scores[0]
    cs = ms.categories[CATEGORY]
    assert (cs.strict_passes, cs.needing) == (1, sum(
        bool(scoring.reference_destructive(c, effects)) for c in bfcl.conversations(CATEGORY)))
    paired = lb.compare(ms, ms, "strict").overall
    assert (paired.n, paired.passes_a) == (cs.needing, cs.strict_passes)
    default = sens.Setting(effects.boundary.name, "strict")
    (res,) = sens.rescore_model(ms, [default], {effects.boundary.name: effects}).values()
    assert res.strict[CATEGORY] == cs.strict_accuracy == 1 / cs.needing


def test_strict_is_one_figure_on_every_screen(tmp_path, monkeypatch) -> None:
    """Strict success of a confirm run: the confirmation table and the terminal counted it
    over the conversations whose reference makes a destructive call (paper Table 5), while the
    CI document's scores.strict, its step summary's "strict %", accuracy.md's "mean strict"
    and a strict floor took it over every conversation, trivial passes (no destructive call to
    confirm) included. Every one is now the paper's figure (the JSON says its n)."""
    import csv

    import jsonschema

    from careful_engine.analysis import ci_report
    from careful_engine.core.figures import figure_text

    effects = scoring.load_effects()
    convs = bfcl.conversations(CATEGORY)
    run, needs, trivial = strict_run(tmp_path / "run")
    out, doc, summary = tmp_path / "out", tmp_path / "doc.json", tmp_path / "summary.md"
    monkeypatch.setenv(ci_report.SUMMARY_ENV, str(summary))
    res = CliRunner().invoke(app, ["score", str(run), "--out", str(out), "--format", "json",
                                   "--output", str(doc), "--fail-under", "base:strict=0.8"])
    cs = scoring.score_run(run, effects=effects).scores[0].categories[CATEGORY]
    passes, needing = cs.strict_passes, cs.needing
    assert (passes, needing) == (1, 3 + sum(  # the missing conversations need theirs too
        bool(scoring.reference_destructive(c, effects)) for c in convs
        if c.id not in (*needs, trivial)))
    assert sum(bool(r.strict_valid) for r in cs.results) == 2  # the trivial pass is not counted
    share = 100 * passes / needing

    # confirmation.{json,csv,md} and the terminal: strict / needing
    row = json.loads((out / "confirmation.json").read_text())["rows"][0]
    assert (row["strict"], row["needing destructive"]) == (passes, needing)
    rows = list(csv.DictReader((out / "confirmation.csv").read_text().splitlines()))
    assert rows[0]["strict / needing"] == f"{passes} / {needing}"
    assert f"| {passes} / {needing} |" in (out / "confirmation.md").read_text()
    assert f"{passes}/{needing}" in res.output.split("Confirmation protocol")[1]
    # the CI document, its schema and its step summary
    document = json.loads(doc.read_text())
    jsonschema.validate(document, ci_report.schema())
    strict = document["runs"][0]["categories"][0]["scores"]["strict"]
    assert strict == {"passes": passes, "percent": pytest.approx(share), "n": needing}
    mean = document["runs"][0]["overall"]["mean_percent"]["strict"]
    assert mean == pytest.approx(share / 4)  # bfcl's mean: three absent categories at 0
    base_row = next(x for x in summary.read_text().splitlines() if "| base |" in x)
    assert base_row.split("|")[7].strip() == figure_text(share)
    # accuracy.{json,md}'s mean strict
    acc = json.loads((out / "accuracy.json").read_text())["rows"][0]
    assert acc["mean strict"] == pytest.approx(mean)
    assert f"| {figure_text(mean)} |" in (out / "accuracy.md").read_text()
    # the gate compares the same figure: 1 of 178 (0.6 %) < 0.8 (over every one: 2/200, 1.0 %)
    (floor,) = document["gate"]["conditions"]
    assert not floor["passed"] and floor["values"]["value"] == pytest.approx(share)
    assert share < 0.8 <= 100 * 2 / 200
