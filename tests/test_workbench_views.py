"""Pilot tests for the workbench's views (issue 15): values seen whole with a character diff
(defect 7), the Compare drill-down (defect 9), the stepper's smaller defects (12), the sortable
conversation list and the engine's vocabulary on screen. Each fails on the code before it."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable

from careful_engine.scoring.rules import RULE_REGISTRY
from tests.workbench_support import IDS, open_replay, screen_text, settings, settle
from workbench.app import WorkbenchApp
from workbench.screens import ConversationScreen, LeaderboardScreen
from workbench.screens.problems import LinesScreen
from workbench.screens.replay import _hits

pytestmark = pytest.mark.usefixtures("no_blink")


def notes(app: WorkbenchApp) -> list[str]:
    return [n.message for n in app._notifications]


# ---------------------------------------------------------------- defect 7: see everything


def test_char_diff_marks_only_the_differing_characters() -> None:
    from workbench.widgets import whole

    model = "revenue generation grew " * 40 + "in the core markets"
    reference = "revenue generation grew " * 40 + "in the CORE markets\x1b[31m"
    m, r = whole.char_diff(model, reference)
    assert m.plain == model and r.plain == reference.replace("\x1b", "\\x1b")
    assert whole.marked(m, whole.ADDED) == "core"
    assert whole.marked(r, whole.REMOVED) == "CORE\\x1b[31m"  # control characters escaped


def test_a_long_differing_value_opens_whole(shared_runs, tmp_path) -> None:
    """glyphh's long_context_30, turn 1: the model tweets 88 characters where the reference's
    tweet also carries the file's 3,000-character filler. The stepper cuts it; `v` on the
    blamed call shows both values whole, and the diff marks exactly the filler."""
    from careful_engine.analysis.leaderboard import DecoderChoice
    from workbench.context import Settings
    from workbench.widgets import whole

    app = WorkbenchApp(Settings(runs=[shared_runs / "glyphh-ada-1.1"], db=tmp_path / "c.db",
                                decoders=DecoderChoice("gpt-4o-2024-11-20-FC"),
                                cache_dir=tmp_path / "cache", user="tester"))

    async def go():
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            wb = app.context
            view = wb.browser(wb.refs[0]).open("multi_turn_long_context_30")
            await app.push_screen(ConversationScreen(view))
            await settle(pilot)
            stepper = app.screen
            assert stepper.view.calls[stepper.selected_call].divergence
            assert "v" in {k for k, b in app.active_bindings.items() if b.binding.show}
            await settle(pilot, "v")
            modal = app.screen
            assert isinstance(modal, LinesScreen)
            lines = modal._lines
            text = "\n".join(t.plain for t in lines)
            assert "profitability." in text and "…" not in text  # whole, not cut
            reference = next(t for t in lines if t.plain.lstrip().startswith("reference")
                             and "The company's financials" in t.plain)
            model = lines[lines.index(reference) - 1]
            filler = whole.marked(reference, whole.REMOVED)
            assert filler.startswith("The company's financials for the year")
            assert filler.endswith("future growth and profitability.")
            assert whole.marked(model, whole.ADDED) == ""
            await settle(pilot, "escape")
            assert app.screen is stepper
            await settle(pilot, "up")  # the turn heading: what differs at the end of turn 1
            while stepper.view.lines[stepper.line].kind != "turn":
                await settle(pilot, "up")
            await settle(pilot, "v")
            text = "\n".join(t.plain for t in app.screen._lines)
            assert "TwitterAPI.tweets[3].content" in text and "profitability." in text
    asyncio.run(go())


def test_table_rows_open_whole(workdir) -> None:
    """`v` on the conversation list and on a leaderboard table shows the selected row whole
    (rule hits named with the registry's words)."""
    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_replay(pilot)
            await settle(pilot, "v")
            text = "\n".join(t.plain for t in app.screen._lines)
            assert f"conversation: {IDS[0]}" in text
            assert RULE_REGISTRY["collateral"].description in text
            await settle(pilot, "escape")
            assert app.screen is screen
            await settle(pilot, "5")
            assert isinstance(app.screen, LeaderboardScreen)
            app.screen.query_one("#lb-ranking").focus()
            await settle(pilot, "v")
            assert "entry: alpha" in "\n".join(t.plain for t in app.screen._lines)
    asyncio.run(go())


# ---------------------------------------------------------------- defect 9: compare drill-down


def test_compare_drill_down_shows_both_runs_whole(workdir) -> None:
    """Enter on a changed conversation: A and B side by side, both named; `v` shows the
    focused side's line whole, naming its run; Escape comes back to Compare."""
    from workbench.screens.pair import PairScreen

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "5", "k")
            board = app.screen
            board.query_one("#lb-pairs").focus()
            await settle(pilot, "enter")
            pair = app.screen
            assert isinstance(pair, PairScreen) and [v.id for v in pair.views] == [IDS[0]] * 2
            titles = [str(box.border_title) for box in pair.query(".pair-side")]
            assert titles == ["A: alpha", "B: beta"]
            for side in "ab":  # each line cut to its half of the screen, not to the screen's
                calls = pair.query_one(f"#pair-calls-{side}")
                widest = max(calls.get_option_at_index(i).prompt.cell_len
                             for i in range(calls.option_count))
                assert widest <= calls.size.width, (side, widest, calls.size.width)
            await settle(pilot, "tab", "v")
            assert isinstance(app.screen, LinesScreen)
            assert app.screen._title.startswith("B: beta")
            text = "\n".join(t.plain for t in app.screen._lines)
            assert "rm(file_name='previous_report.pdf')" in text  # B's blamed call, whole
            await settle(pilot, "escape")
            assert app.screen is pair
            await settle(pilot, "escape")
            assert app.screen is board and str(board.query_one("#lb-tabs").active) == "compare"
            assert "replaying" not in str(board.query_one("#cmp-note").content)  # not stale
    asyncio.run(go())


# ---------------------------------------------------------------- defect 12: smaller items


async def stepper_on(pilot, run: str, entry: str, edit=None) -> ConversationScreen:
    """The stepper on one conversation (``edit`` may change its view first)."""
    app = pilot.app
    await settle(pilot)
    view = app.context.browser(app.context.ref(run)).open(entry)
    if edit is not None:
        edit(view)
    await app.push_screen(ConversationScreen(view))
    await settle(pilot)
    return app.screen


def test_f_wraps_around_or_says_why(workdir) -> None:
    def also_turn_3(view) -> None:  # a second failing turn: its 'failed' hits fail safety
        view.turns[3].safety = ("failed",)

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await stepper_on(pilot, "beta", IDS[0])  # only turn 0 fails
            app.clear_notifications()
            await settle(pilot, "f")
            assert "turn 0 is the only failing turn" in notes(app)
            await app.pop_screen()
            screen = await stepper_on(pilot, "beta", IDS[0], also_turn_3)
            await settle(pilot, "f")
            assert screen.view.lines[screen.line].turn == 3
            app.clear_notifications()
            await settle(pilot, "f")  # from the last failing turn: around to the first
            assert screen.view.lines[screen.line].turn == 0
            assert "wrapped around to the first failing turn" in notes(app)
            await settle(pilot, "F")  # and back: around to the last
            assert screen.view.lines[screen.line].turn == 3
            await app.pop_screen()
            await stepper_on(pilot, "alpha", IDS[3])
            app.clear_notifications()
            await settle(pilot, "f")
            assert any(n.startswith("no failing turn") for n in notes(app))
    asyncio.run(go())


def test_repeated_tags_are_counted_once_and_explained(workdir) -> None:
    """beta base_0's turn 0 has two 'unconfirmed' hits: one tag with its count (it read
    "[unconf]×1 [unconf]×1"); an undeclared-effect hit's tag is explained in the legend."""
    def unknown(view) -> None:
        view.rules.counts["beyond_unknown"] = 1

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await stepper_on(pilot, "beta", IDS[0], unknown)
            screen.go(0)  # turn 0's heading
            await settle(pilot)
            detail = screen.query_one("#detail").content.plain
            hits = detail.split("hits:")[1].splitlines()[0]
            assert hits.count("[unconf]") == 1 and "[unconf]×2" in hits, hits
            assert "[coll]" in hits and "[+D]" not in hits  # +D counts the same calls as coll
            bar = screen.query_one("#verdict")
            assert "+? 1" in bar.content.plain
            assert RULE_REGISTRY["beyond_unknown"].description in bar.tooltip.plain
            await settle(pilot, "question_mark")
            shown = app.screen.query_one("#help-text").content.plain
            assert "+?: calls beyond the reference naming no declared function" in shown
    asyncio.run(go())


def test_unconfirmed_only_under_the_protocol(workdir) -> None:
    """Without the confirmation protocol 'unconfirmed' means nothing: no view shows it (the
    verdict bar, the turn heading and its hits and the list's column did, while the call
    lines did not); the turn heading counts what its calls are tagged with. The stepper
    takes the protocol as scoring decided it (per file), as the list does."""
    from careful_engine.browse.runs import ConversationRow

    def standard(view) -> None:
        view.confirm = False

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(120, 30)) as pilot:
            replay = await open_replay(pilot, "beta")
            browser = app.context.browser(app.context.ref("beta"))
            for row in replay.rows:  # beta is a confirm run: base_2 records answers
                assert row.confirm and browser.open(row.id).confirm, row.id
            screen = await stepper_on(pilot, "beta", IDS[0], standard)
            assert screen.view.rules.counts["unconfirmed"] > 0
            screen.go(0)
            await settle(pilot)
            detail = screen.query_one("#detail").content.plain
            bar = screen.query_one("#verdict").content.plain
            assert "unconf" not in detail and "unconf" not in bar, (detail, bar)
            heading = detail.splitlines()[0]
            assert "coll 1" in heading and "hit" not in heading, heading
    asyncio.run(go())
    row = ConversationRow("multi_turn_base_0", "multi_turn_base", 1, 1, score={
        "official_valid": False, "rules": {"unconfirmed": 2, "collateral": 1},
        "confirm_protocol": False})
    assert "unconf" not in _hits(row).plain and "coll" in _hits(row).plain
    row.score["confirm_protocol"] = True
    assert "unconf 2" in _hits(row).plain


def test_label_counts_and_rounds_refresh_on_return(workdir) -> None:
    """Labels saved and rounds made elsewhere (the CLI, another annotator) show when the
    Label screen is shown again; with rounds, the drop-down never says 'no round yet'."""
    from careful_engine.annotation.signals import load_inputs
    from careful_engine.annotation.store import Store

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2")
            info = app.screen.query_one("#round-info")
            assert "A1 0/49" in info.content.plain
            select = app.screen.query_one("#round-select")
            assert "no round yet" not in select.prompt
            with Store(workdir / "careful.db") as store:
                store.annotator_session("r1", "A1").label("cd", False, "only hidden state")
                store.new_round("r3", load_inputs().select(["rm"]), ["A1"], created_by="lead")
            await app.switch_mode("home")  # (the name field would take a typed 1)
            await settle(pilot)
            await app.switch_mode("label")
            await settle(pilot)
            assert "A1 1/49" in info.content.plain
            assert select.value == "r1"  # the chosen round stays chosen
            assert "r3" in [v for _, v in select._options]
    asyncio.run(go())


# ---------------------------------------------------------------- build 7: a sortable list


def test_the_list_sorts_with_a_visible_indicator(workdir) -> None:
    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(100, 24)) as pilot:
            screen = await open_replay(pilot)
            table = screen.query_one(DataTable)

            def ids() -> list[str]:
                return [str(table.coordinate_to_cell_key((i, 0)).row_key.value)
                        for i in range(table.row_count)]

            await settle(pilot, "down", "down")  # a sort shows the top of its order
            await settle(pilot, "o")
            assert screen.sort == "id" and ids() == IDS
            assert "conversation ▲" in screen_text(app)
            await settle(pilot, "o")  # verdict: the failed one first
            assert ids()[0] == IDS[0] and "BFCL ▲" in screen_text(app)
            await settle(pilot, "o")  # rule hits, most severe first
            assert ids() == [IDS[0], IDS[1], IDS[2], IDS[3]]
            assert "rule hits ▼" in screen_text(app)
            await settle(pilot, "O")
            assert ids() == [IDS[3], IDS[2], IDS[1], IDS[0]]
            assert "rule hits ▲" in screen_text(app)
            await settle(pilot, "o")  # steps, most first
            steps = [r.steps for r in screen.shown_rows]
            assert steps == sorted(steps, reverse=True) and "steps ▼" in screen_text(app)
            assert table.cursor_row == 0 and table.scroll_y == 0
            await settle(pilot, "o")  # back to the files' order, no arrow
            assert screen.sort is None and "▲" not in screen_text(app)
    asyncio.run(go())


def test_sorting_is_stable_and_deterministic() -> None:
    import random

    from careful_engine.browse.runs import ConversationRow
    from workbench.screens.replay import sort_rows

    def row(i: str, steps: int, ok: bool | None, rules: dict) -> ConversationRow:
        score = None if ok is None else {"official_valid": ok, "safe_valid": ok,
                                         "rules": rules}
        return ConversationRow(f"multi_turn_base_{i}", "multi_turn_base", 2, steps,
                               score=score)

    rows = [row("10", 5, False, {"failed": 1}), row("2", 5, True, {"beyond_read": 3}),
            row("1", 7, None, {}), row("3", 5, False, {"collateral": 1, "beyond_write": 9}),
            row("20", 1, True, {})]
    for by in ("id", "verdict", "hits", "steps"):
        for reverse in (False, True):
            first = [r.id for r in sort_rows(rows, by, reverse)]
            for _ in range(5):
                random.shuffle(rows)
                assert [r.id for r in sort_rows(rows, by, reverse)] == first, (by, reverse)
    short = [r.id.rsplit("_", 1)[1] for r in sort_rows(rows, "id")]
    assert short == ["1", "2", "3", "10", "20"]  # numbers as numbers
    assert [r.id.rsplit("_", 1)[1] for r in sort_rows(rows, "hits")][:3] == ["3", "10", "2"]
    assert [r.id.rsplit("_", 1)[1] for r in sort_rows(rows, "steps")] == [
        "1", "2", "3", "10", "20"]  # 7 steps, then the 5s by id, then 1
    assert [r.id.rsplit("_", 1)[1] for r in sort_rows(rows, "verdict")] == [
        "3", "10", "2", "20", "1"]  # failed (by id), passed, not scored


# ---------------------------------------------------------------- the engine's vocabulary


def test_tags_severities_and_error_words_come_from_the_engine(workdir, monkeypatch) -> None:
    """Renaming a tag or an error word in the engine renames it on screen: the workbench
    keeps no copy of its own."""
    import dataclasses

    from careful_engine.core.checker import STATE_MISMATCH
    from careful_engine.scoring import score as scoring

    rule = RULE_REGISTRY["collateral"]
    monkeypatch.setitem(RULE_REGISTRY, "collateral",
                        dataclasses.replace(rule, tag="COLL!", severity="notice"))
    monkeypatch.setitem(scoring.ERROR_WORDS, STATE_MISMATCH, "state differs")

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(100, 24)) as pilot:
            screen = await open_replay(pilot)
            table = screen.query_one(DataTable)
            cells = table.get_row(IDS[0])
            assert "state differs" in str(cells[5])
            hits = cells[6]
            assert "COLL! 1" in hits.plain
            span = next(s for s in hits.spans if hits.plain[s.start:s.end].startswith("COLL!"))
            assert str(span.style) == "dim"  # the notice style, from the registry's severity
    asyncio.run(go())


def test_long_state_paths_are_shown_cut_in_the_middle(tmp_path, monkeypatch) -> None:
    """mkdir + cd 300 times with 100-character names: every change's path is ~30,000
    characters long and the turn's diff panes and v showed up to 200 of them whole (2000
    deep took 28 s a key). A path is now shown in at most MAX_PATH_CHARS characters, its start
    and end kept, so each key costs the same however deep the tree."""
    import json

    from careful_engine.effects.infer import MAX_PATH_CHARS
    from tests import hostile_corpus as hc

    monkeypatch.chdir(tmp_path)
    ids = hc.ids()
    names = [chr(65 + i % 26) * 100 for i in range(300)]
    steps = [[{"mkdir": json.dumps({"dir_name": n})}, {"cd": json.dumps({"folder": n})}]
             for n in names]
    hc.write_model(tmp_path / "deep", "m", [json.dumps({"id": ids[3], "result": [steps]})],
                   good=3)
    app = WorkbenchApp(settings(tmp_path, runs=[tmp_path / "deep"]))

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await stepper_on(pilot, "deep", ids[3])
            await settle(pilot, "home")  # the turn: its every change in the diff pane
            model, _ = screen._rows[("turn", 0)]
            assert len(model) > 100
            assert all(len(r["path"]) <= MAX_PATH_CHARS for r in model)
            cut = [r["path"] for r in model if "…" in r["path"]]
            assert len(cut) > 90 and all(  # the start and the last folder's whole name
                p.startswith("GorillaFileSystem.root:/") and p.rsplit("/", 1)[1] in names
                for p in cut)
            for key in ("v", "escape", "n", "v"):  # the turn whole, then its first call whole
                await settle(pilot, key)
                if key == "v":
                    assert isinstance(app.screen, LinesScreen)
                    paths = [t.plain for t in app.screen._lines
                             if t.plain.lstrip().startswith("GorillaFileSystem.root:/")]
                    assert paths and max(map(len, paths)) < 2 * MAX_PATH_CHARS
            assert app._exception is None
    asyncio.run(go())


def test_a_conversation_not_replayed_says_so(workdir) -> None:
    """An inference error replays nothing: the verdict bar says not replayed and why, with no
    blame (it said 'no rule hit ▶ turn 0: a needed change is missing'); the list's rule-hits
    cell says not replayed (it was blank, as a clean conversation's), as for a replay the
    budget stopped."""
    import json

    from careful_engine.browse.runs import ConversationRow

    result = next((workdir / "runs" / "beta").rglob("BFCL_v4_multi_turn_base_result.json"))
    entries = [json.loads(t) for t in result.read_text().splitlines()]
    entries[1]["result"] = "Error during inference: boom"
    result.write_text("".join(json.dumps(e) + "\n" for e in entries))

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(120, 30)) as pilot:
            screen = await stepper_on(pilot, "beta", IDS[1])
            bar = screen.query_one("#verdict").content.plain
            assert "not replayed (inference error)" in bar and "▶" not in bar, bar
            assert "no rule hit" not in bar, bar
            await app.pop_screen()
            screen = await stepper_on(pilot, "beta", IDS[0])  # replayed: as before
            assert "not replayed" not in screen.query_one("#verdict").content.plain
    asyncio.run(go())
    row = ConversationRow(IDS[1], "multi_turn_base", 0, 0, inference_error=True)
    assert _hits(row).plain == "– not replayed (inference)"
    for error, word in (("multi_turn:inference_error", "inference"),
                        ("careful:budget_exceeded", "budget")):
        row = ConversationRow(IDS[1], "multi_turn_base", 1, 1, score={
            "official_valid": False, "official_error_type": error, "rules": None})
        assert _hits(row).plain == f"– not replayed ({word})"
        assert _hits(row, narrow=True).plain == f"– {word}"
    clean = ConversationRow(IDS[0], "multi_turn_base", 1, 1, score={"official_valid": True,
                                                                     "rules": {}})
    assert _hits(clean).plain == ""


def test_rows_are_marked_and_sorted_by_severity_under_their_safe_rule() -> None:
    """A line scored under --collateral effective shows effective collateral as severe (the
    count that fails it) and attempted collateral as a warning; a line naming no safe rule, or
    one that is not the engine's, is marked under the paper's."""
    from careful_engine.browse.runs import ConversationRow
    from workbench.screens.replay import _weight
    from workbench.widgets.calls import rule_style

    def row(safe: object) -> ConversationRow:
        return ConversationRow("multi_turn_base_0", "multi_turn_base", 1, 1, score={
            "official_valid": True, "safe_valid": False, "safe_rule": safe,
            "rules": {"collateral": 2, "collateral_effective": 1, "asked_destructive": 1}})

    effective = row({"collateral": "effective", "duplicates": "all"})
    assert effective.safe_rule is not None and effective.safe_rule.collateral == "effective"
    assert _weight(effective) == (1, 3, 0)  # collE severe; coll and askD warnings
    assert rule_style("collateral_effective", effective.safe_rule) == "bold red"
    assert rule_style("collateral", effective.safe_rule) == "yellow"
    for safe in (None, {"collateral": "sometimes"}, ["effective"]):
        assert row(safe).safe_rule is None
        assert _weight(row(safe)) == (2, 2, 0)  # coll severe (paper's); collE, askD warnings
