"""Pilot-driven tests of every workbench flow, asserting on data: labels stored with their
reasons, blindness kept, keys moving the selected call, filters narrowing the list, decisions
and the boundary written, scores made in the background, the leaderboard's comparison."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from textual.widgets import DataTable

from careful_engine.annotation.store import Store
from tests.workbench_support import (
    IDS,
    SECRET,
    open_agreement,
    open_replay,
    screen_text,
    settings,
    settle,
    split_read_and_write,
    start_labelling,
)
from workbench.app import WorkbenchApp
from workbench.screens import (
    ConversationScreen,
    HelpScreen,
    LabelScreen,
    LeaderboardScreen,
    ReplayScreen,
)

pytestmark = pytest.mark.usefixtures("no_blink")


def run(coro):
    return asyncio.run(coro)




def app_for(root: Path, **kw) -> WorkbenchApp:
    return WorkbenchApp(settings(root, **kw))


# ---------------------------------------------------------------- home


def test_home_counts_input_problems_as_score_does(workdir, monkeypatch) -> None:
    """The problems column is careful score's count of input problems; decode-audit flags
    (which score prints apart, as warnings) are shown apart (⚑), and listed by p with them."""
    from careful_engine.browse.runs import RunBrowser

    monkeypatch.setattr(RunBrowser, "decode_flags", lambda self: ["decodes nothing"])

    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(120, 24)) as pilot:
            await settle(pilot)
            runs = app.screen.query_one("#runs", DataTable)
            for i, label in enumerate(("alpha", "beta")):
                found = app.screen.problems[label]
                assert found[-1].startswith("decode audit (") and \
                    found[-1].endswith("): decodes nothing"), found
                assert str(runs.get_row_at(i)[4]) == f"{len(found) - 1} ⚑1", found
    run(go())


def test_home_counts_replays_the_budget_stopped(workdir, monkeypatch) -> None:
    """Score lines made under the default budget whose replay it stopped (counted as failed)
    are input problems, as careful score lists them: Home counts and lists them (before: 0)."""
    import dataclasses

    from careful_engine import browse
    from careful_engine.core import budget
    from careful_engine.scoring.score import score_to_file

    beta = workdir / "runs" / "beta"
    (ref,) = browse.find_runs([beta])
    clean = len(browse.RunBrowser(ref, None).problems())
    # the default budget, tiny here: the lines record no budget, as under the default one
    cached = browse.cache_scores_path(ref, workdir / "cache")  # (settings' cache_dir)
    with monkeypatch.context() as m:
        m.setattr(budget, "DEFAULT_BUDGET",
                  dataclasses.replace(budget.DEFAULT_BUDGET, seconds=1e-9))
        score_to_file(beta, ref.model, cached, decoder=ref.decoder)
    stopped = [json.loads(t)["id"] for t in cached.read_text().splitlines()
               if json.loads(t)["official_error_type"] == budget.BUDGET_EXCEEDED]
    assert stopped

    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(120, 24)) as pilot:
            await settle(pilot)
            runs = app.screen.query_one("#runs", DataTable)
            found = app.screen.problems["beta"]
            assert [f for f in found if "counted as failed" in f and "budget" in f]
            assert int(str(runs.get_row_at(1)[4]).split()[0]) == clean + len(stopped), found
    run(go())


def test_home_lists_runs_declarations_and_rounds(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            runs = app.screen.query_one("#runs", DataTable)
            # (cells from files are Text: never read as markup; str() is what they show)
            assert [str(runs.get_row_at(i)[0]) for i in range(runs.row_count)] == ["alpha",
                                                                                  "beta"]
            assert runs.get_row_at(1)[3] == "✓"
            rounds = app.screen.query_one("#rounds", DataTable)
            assert str(rounds.get_row_at(0)[0]) == "r1" and "A2 49/49" in rounds.get_row_at(0)[4]
            assert rounds.get_row_at(1)[3] == "closed"
            runs.focus()
            await settle(pilot, "down", "enter")
            assert isinstance(app.screen, ReplayScreen) and app.screen.ref.label == "beta"
    run(go())


# ---------------------------------------------------------------- label (blind)


def test_a_label_is_stored_with_its_reason(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await start_labelling(pilot)
            first = screen.current
            assert first == "cd"  # the round's first function: nothing labelled yet
            await settle(pilot, "y", *"it moves the cwd", "enter")
            label = screen.session.labels()[first]
            assert label.destructive is True and label.reason == "it moves the cwd"
            assert screen.current != first  # on to the next unlabelled function
            # 'not destructive' on a proposed candidate needs a reason: refused, not stored
            await settle(pilot, *[k for _ in range(4) for k in "]"])
            assert screen.current == "rm"
            await settle(pilot, "n", "enter")
            assert "rm" not in screen.session.labels()
            await settle(pilot, "n", *"a backup exists", "enter")  # n opens the reason again
            assert screen.session.labels()["rm"].reason == "a backup exists"
        with Store(workdir / "careful.db") as store:
            mine = store.annotator_session("r1", "A1").labels()
            assert {n: (lb.destructive, lb.reason) for n, lb in mine.items()} == {
                "cd": (True, "it moves the cwd"), "rm": (False, "a backup exists")}
    run(go())


def test_blindness_other_labels_never_shown(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await start_labelling(pilot)
            for _ in range(6):
                assert SECRET not in screen_text(app)
                await settle(pilot, "]")
            await settle(pilot, "s")  # with the simulator source shown
            assert SECRET not in screen_text(app)
            assert not screen.session.labels()  # A2's labels are not A1's
        with Store(workdir / "careful.db") as store:  # no adjudication session was opened
            assert all(store.reveal_log(r.name) == [] for r in store.rounds())
    run(go())


def test_labelling_resumes_where_it_was_left(workdir) -> None:
    with Store(workdir / "careful.db") as store:
        store.add_to_round("r1", "A1", by="lead")
        session = store.annotator_session("r1", "A1")
        for f in session.functions()[:3]:
            session.label(f.name, False, "no")
        fourth = session.functions()[3].name

    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await start_labelling(pilot)
            assert screen.current == fourth
            assert "3/49 labelled" in str(screen.query_one("#label-count").render())
    run(go())


def test_a_new_annotator_and_a_new_round(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2")
            await settle(pilot, "ctrl+n")
            await settle(pilot, *"H1", "enter")  # the default name r3, the roster H1
            screen = app.screen
            assert isinstance(screen, LabelScreen)
            await settle(pilot, *"H1", "enter")
            assert screen.session.round_name == "r3" and len(screen.session.functions()) == 49
        with Store(workdir / "careful.db") as store:
            assert store.round_annotators("r3") == ["H1"]
            assert store.annotator("H1").kind == "human"
    run(go())


# ---------------------------------------------------------------- agreement, adjudication


def test_agreement_decision_and_boundary(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_agreement(pilot)
            assert screen.session.round_name == "r2"  # the closed round
            pairs = screen.query_one("#pairs", DataTable)
            assert [str(c) for c in pairs.get_row_at(0)[:2]] == ["A1–A2", "3/5"]  # all five are writes
            assert screen.split_names == ["echo", "mv"]
            await settle(pilot, "w")
            assert screen.subset == "all" and pairs.get_row_at(0)[2] == "0.167"
            await settle(pilot, "d", "y", *"an overwrite loses the old content", "enter")
            decisions = screen.session.decisions()
            assert [(d.function, d.destructive, d.reason) for d in decisions] == [
                ("echo", True, "an overwrite loses the old content")]
            await settle(pilot, "p")  # majority: mv is a tie -> an error, nothing to write
            assert screen.policy == "majority" and screen.result is None
            await settle(pilot, "t")  # ties: yes
            assert screen.result is not None
            await settle(pilot, "b", "enter")
            path = workdir / "boundary" / "r2-majority.json"
            data = json.loads(path.read_text())
            assert sorted(d["name"] for d in data["destructive"]) == [
                "echo", "mv", "rm", "send_message"]
            assert data["policy"] == "majority" and data["tie"] == "yes"
    run(go())


def test_a_boundary_without_a_folder_goes_where_careful_adjudicate_writes_it(workdir,
                                                                            monkeypatch) -> None:
    """With no boundary folder set (as `careful workbench` runs) the boundary is written to
    <name>.json in the working folder, as `careful adjudicate` writes it; never into the
    shipped declarations/boundary/ (where sensitivity would take it for a shipped one)."""
    from careful_engine.annotation import adjudication
    from careful_engine.effects import boundary

    shipped = workdir / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(boundary, "boundary_dir", lambda: shipped)
    monkeypatch.setattr(adjudication, "boundary_dir", lambda: shipped)

    async def go():
        app = WorkbenchApp(settings(workdir, boundary_dir=None))
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await open_agreement(pilot)
            await settle(pilot, "b")
            prompt = " ".join(str(w.render()) for w in app.screen.query("Static"))
            assert "working folder, as careful adjudicate" in " ".join(prompt.split())
            await settle(pilot, "enter")
            assert screen.result is not None
    run(go())
    assert list(shipped.iterdir()) == []
    assert boundary.load("r2-any").destructive.keys() == boundary.read_file(
        workdir / "r2-any.json").destructive.keys()


def test_the_splits_are_those_of_the_subset(workdir) -> None:
    """The splits listed beside the figures are over the same subset (all functions were
    listed under 'writes' too: a read's split beside the writes' figures)."""
    split_read_and_write(workdir / "careful.db")

    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_agreement(pilot, "r3")
            assert screen.subset == "writes" and screen.split_names == ["mv"]
            await settle(pilot, "w")
            assert screen.subset == "all" and screen.split_names == ["cat", "mv"]
    run(go())


def test_a_blind_open_round_needs_a_recorded_override(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_agreement(pilot, "r1")
            assert screen.session is None
            assert "blind and still open" in str(screen.query_one("#agree-summary").render())
            await settle(pilot, "o", *"pilot check", "enter")
            assert screen.session is not None and screen.session.overridden
        with Store(workdir / "careful.db") as store:
            reveals = [(r["who"], r["override"]) for r in store.reveal_log("r1")]
            assert reveals == [("tester", "pilot check")]
    run(go())


# ---------------------------------------------------------------- replay and the stepper


def test_filters_narrow_the_list(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_replay(pilot)
            table = screen.query_one("#conversations", DataTable)
            assert table.row_count == 4
            await settle(pilot, "x")
            assert [r.id for r in screen.shown_rows] == [IDS[0]] and table.row_count == 1
            await settle(pilot, "x", "h")  # the first rule hit: collateral
            assert screen.filter.rule == "collateral" and table.row_count == 1
            await settle(pilot, "h")  # then its effective part (the rules' order)
            assert screen.filter.rule == "collateral_effective"
            seen = ["collateral", "collateral_effective"]
            while screen.filter.rule is not None and len(seen) < 12:
                await settle(pilot, "h")
                seen.append(screen.filter.rule)
            assert seen[-1] is None and table.row_count == 4  # past the last: any rule again
            assert seen[:-1] == screen.values["rule"] and "failed" in seen
    run(go())


def test_keys_move_the_selected_call(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_replay(pilot)
            await settle(pilot, "enter")
            screen = app.screen
            assert isinstance(screen, ConversationScreen) and screen.view.id == IDS[0]
            div = screen.view.divergence.index
            assert screen.selected_call == div  # opens on the first diverging call
            await settle(pilot, "n")
            assert screen.selected_call == div + 1
            await settle(pilot, "right", "right")
            assert screen.selected_call == div + 3
            await settle(pilot, "p")
            assert screen.selected_call == div + 2
            await settle(pilot, "d")
            assert screen.selected_call == div
            await settle(pilot, "H")  # no hit before the first divergence: it stays
            assert screen.selected_call == div
            await settle(pilot, "h")
            after = screen.selected_call
            assert after > div and screen.view.calls[after].rules
            await settle(pilot, "H")
            assert screen.selected_call == div
            diff = str(screen.query_one("#model-diff").border_title)
            assert "rm(file_name='previous_report.pdf')" in diff
            assert "no matching call" in str(screen.query_one("#ref-diff").border_title)
            await settle(pilot, "escape")
            assert isinstance(app.screen, ReplayScreen)
    run(go())


def test_a_scripted_answer_shows_in_place(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_replay(pilot)
            await settle(pilot, "down", "down", "enter")
            screen = app.screen
            assert screen.view.id == IDS[2]
            options = screen.query_one("#calls")
            prompts = [str(options.get_option_at_index(i).prompt)
                       for i in range(options.option_count)]
            i = next(k for k, p in enumerate(prompts) if "Shall I create" in p)
            assert "scripted user yes: Yes, please go ahead." in prompts[i + 1]
    run(go())


def test_scoring_a_run_in_the_background(workdir) -> None:
    import shutil

    shutil.rmtree(workdir / "runs" / "alpha" / "careful-score")

    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_replay(pilot, "alpha")
            assert not any(r.scored for r in screen.rows)
            await settle(pilot, "s")
            for _ in range(200):
                if app.scoring is None:
                    break
                await pilot.pause(0.1)
            await settle(pilot)
            assert all(r.official_valid for r in screen.rows)
    run(go())
    assert list((workdir / "cache").rglob("conversations.jsonl"))


# ---------------------------------------------------------------- leaderboard, help, palette


def test_leaderboard_ranks_and_compares(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "5")
            screen = app.screen
            assert isinstance(screen, LeaderboardScreen)
            ranking = screen.query_one("#lb-ranking", DataTable)
            assert [str(ranking.get_row_at(i)[0]) for i in range(2)] == ["alpha", "beta"]
            compare = screen.query_one("#lb-compare", DataTable)
            overall = [str(c) for c in compare.get_row_at(compare.row_count - 1)]
            assert overall[0] == "overall" and overall[6:8] == ["0", "1"]  # gained, lost
            await settle(pilot, "k")
            assert str(screen.query_one("#cmp-kind").value) == "safe"
            pairs = screen.query_one("#lb-pairs", DataTable)
            assert str(pairs.get_row_at(0)[2]) == IDS[0]
            pairs.focus()
            await settle(pilot, "enter")
            await settle(pilot)
            # defect 9: both runs side by side, named; Escape goes back to Compare
            from workbench.screens.pair import PairScreen

            pair = app.screen
            assert isinstance(pair, PairScreen) and pair.runs == ("alpha", "beta")
            assert [v.id for v in pair.views] == [IDS[0], IDS[0]]
            assert pair.views[0].verdict.valid and not pair.views[1].verdict.valid
            assert "B: beta" in screen_text(app)
            await settle(pilot, "tab", "enter")  # the B side in the stepper, then back
            assert isinstance(app.screen, ConversationScreen) and app.replay_run == "beta"
            await settle(pilot, "escape")
            assert app.screen is pair
            await settle(pilot, "escape")
            assert app.screen is screen and str(screen.query_one("#lb-tabs").active) == "compare"
    run(go())


def test_leaderboard_plot_states_its_settings(workdir, monkeypatch) -> None:
    """The Plot tab states the boundary, detector and safe rule as `careful leaderboard
    --plot`'s SVG does (settings_line), from the settings the tables' Reports carry, shown
    literally (a boundary name with markup and a control character)."""
    from careful_engine.core.safe_text import visible
    from careful_engine.present import leaderboard as present
    from careful_engine.present.report import settings_line
    from careful_engine.scoring import settings as scoring_settings

    real = scoring_settings.table_settings
    monkeypatch.setattr(scoring_settings, "table_settings",
                        lambda *a: {**real(*a), "boundary": "[b]odd[/b]\x1b"})
    made: list = []
    real_reports = present.leaderboard_reports
    monkeypatch.setattr(present, "leaderboard_reports",
                        lambda *a: made.append(real_reports(*a)) or made[-1])

    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(140, 30)) as pilot:
            await settle(pilot, "5", "t")
            screen = app.screen
            assert str(screen.query_one("#lb-tabs").active) == "plot"
            wanted = real(app.context.effects, app.context.settings.detector)
            assert all(r.settings == {**wanted, "boundary": "[b]odd[/b]\x1b"} for r in made[0])
            shown = str(screen.query_one("#lb-plot-settings").render())
            assert shown == visible(settings_line(made[0][0].settings))
            assert shown.startswith("scored with boundary [b]odd[/b]\\x1b, detector "
                                    f"{app.context.settings.detector}, safe rule: ")
            assert shown in screen_text(app)
    run(go())


def test_strict_is_not_compared_without_the_protocol(workdir) -> None:
    """As careful compare: strict success of runs generated without the confirmation
    protocol is not applicable, so the Compare tab pairs nothing (it showed 0.0 % for both)."""
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot, "5")
            screen = app.screen
            assert screen.query_one("#lb-compare", DataTable).row_count > 0  # bfcl: paired
            await settle(pilot, "k", "k")
            assert str(screen.query_one("#cmp-kind").value) == "strict"
            assert screen.query_one("#lb-compare", DataTable).row_count == 0
            assert screen.query_one("#lb-pairs", DataTable).row_count == 0
            note = str(screen.query_one("#cmp-note").render())
            assert "strict success is not applicable to alpha (no confirmation" in note
    run(go())


def test_help_lists_the_screens_keys(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_replay(pilot)
            await settle(pilot, "enter")
            await settle(pilot, "question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = screen_text(app)
            assert "Previous failing turn" in text and "diverging" in text  # hidden keys too
            await settle(pilot, "escape")
            assert isinstance(app.screen, ConversationScreen)
    run(go())


def test_command_palette_opens_a_conversation(workdir) -> None:
    async def go():
        app = app_for(workdir)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_replay(pilot)
            await settle(pilot, "ctrl+p")
            await settle(pilot, *"open: multi_turn_base_3")
            await settle(pilot, "enter")
            await settle(pilot)
            assert isinstance(app.screen, ConversationScreen) and app.screen.view.id == IDS[3]
    run(go())


# ---------------------------------------------------------------- memory


class _Cycle:
    """Garbage only a full collection frees (it refers to itself), with ``size`` objects."""

    def __init__(self, size: int) -> None:
        self.me = self
        self.items = [[] for _ in range(size)]


def test_what_dies_frozen_is_reclaimed(tmp_path: Path) -> None:
    """settle_memory freezes everything alive; what dies afterwards in a cycle (a closed
    conversation screen's widgets, once per opened conversation) was never collected. Once
    the frozen objects grow by RECLAIM_GROWTH, a settle with a collection unfreezes first,
    so what can leak stays a fraction of what is held (counted with weak references, no
    timing)."""
    import gc
    import weakref

    app = app_for(tmp_path)
    try:
        app.settle_memory(collect=False)  # the data held at start
        size = gc.get_freeze_count() // 8 + 1000  # a reclaim every two (RECLAIM_GROWTH 1.25)
        refs = []
        for _ in range(8):
            cycle = _Cycle(size)
            refs.append(weakref.ref(cycle))
            app.settle_memory()  # (as after opening a conversation: it is alive, frozen)
            del cycle  # (the screen closed)
        alive = sum(r() is not None for r in refs)
        assert alive <= 3, f"{alive} of 8 cycles that died frozen are still held"
    finally:
        gc.unfreeze()
