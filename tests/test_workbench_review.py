"""Pilot tests for workbench defects found in review, each failing on the code before it: the
round chosen on Agreement, one reveal per opening, Replay's status after a failed rescore,
focus on the Leaderboard, its decoders note, Compare's captions and the decision dialog."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Select

from careful_engine.annotation.store import Store
from tests.workbench_support import open_agreement, open_replay, screen_text, settings, settle
from workbench.app import WorkbenchApp

pytestmark = pytest.mark.usefixtures("no_blink")


def _reveals(db, round_name: str) -> int:
    with Store(db) as store:
        return len(store.reveal_log(round_name))


def _summary(screen) -> str:
    return str(screen.query_one("#agree-summary").content)


@pytest.mark.parametrize("keys", [("o", "escape"), ("question_mark", "escape"), ("1", "3")])
def test_agreement_keeps_a_blind_round_chosen(workdir, keys) -> None:
    """Blind round r1 chosen (refused): a cancelled override, help or a visit elsewhere put
    the picker back on r2 with r2's figures (before: on_screen_resume listed the rounds again).
    The round stays chosen with its refusal, and the figures name their round."""
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(150, 50)) as pilot:
            await settle(pilot)
            screen = await open_agreement(pilot)
            assert _summary(screen).startswith("round r2 ·")
            screen.query_one("#agree-round", Select).value = "r1"
            await settle(pilot)
            assert screen.session is None and "round r1 is blind" in _summary(screen)
            await settle(pilot, *keys)
            assert app.screen is screen
            assert screen.query_one("#agree-round", Select).value == "r1"
            assert screen.session is None and "round r1 is blind" in _summary(screen)
            assert app._exception is None
    asyncio.run(go())


def test_one_visit_to_agreement_is_one_opening(workdir) -> None:
    """Each opening of a round is recorded in its reveal log (as `careful agree` records one):
    one visit wrote five (the rounds were listed on mount and twice on resume, each opening the
    round again); coming back, or picking the round on view again, opens nothing."""
    app = WorkbenchApp(settings(workdir))
    db = workdir / "careful.db"

    async def go():
        async with app.run_test(size=(150, 50)) as pilot:
            await settle(pilot)
            assert _reveals(db, "r2") == 0
            screen = await open_agreement(pilot)
            assert screen.session is not None and screen.session.round_name == "r2"
            assert _reveals(db, "r2") == 1
            await settle(pilot, "1", "3", "w", "p")
            assert _reveals(db, "r2") == 1
            screen.query_one("#agree-round", Select).value = "r1"
            await settle(pilot)
            screen.query_one("#agree-round", Select).value = "r2"
            await settle(pilot)
            assert _reveals(db, "r2") == 2  # a new choice: a new opening
            assert app._exception is None
    asyncio.run(go())


async def _scored(pilot) -> None:
    """Wait for background scoring to end."""
    for _ in range(60):
        await settle(pilot)
        if pilot.app.scoring is None:
            return
        await asyncio.sleep(0.25)
    raise AssertionError("scoring did not end")


def test_replay_after_a_failed_rescore(workdir) -> None:
    """Declarations that cannot be read: the automatic rescore of the run fails (one error);
    the status went on saying "scores being remade" (it was drawn while the app still
    scored, and not again), and every showing of the run rescored it, one error each.
    Now the status says the scores are not used, and only s rescores again."""
    bad = workdir / "bad.json"
    bad.write_text('{"not": "declarations"}')
    app = WorkbenchApp(settings(workdir, declarations=bad))

    said: list[str] = []  # (every toast, expired or not)
    notify = app.notify
    app.notify = lambda message, **kw: (said.append(str(message)), notify(message, **kw))[1]

    def failures() -> list[str]:
        return [m for m in said if m.startswith("scoring alpha: ")]

    async def go():
        async with app.run_test(size=(150, 50)) as pilot:
            await settle(pilot)
            screen = await open_replay(pilot, "alpha")
            await _scored(pilot)
            assert len(failures()) == 1
            status = str(screen.query_one("#replay-status").content)
            assert "being remade" not in status and "scores not used" in status, status
            await settle(pilot, "r")  # the other run, then alpha again
            await settle(pilot, "r")
            await _scored(pilot)
            assert screen.ref.label == "alpha"
            assert len(failures()) == 1  # (beta failed too, once)
            await settle(pilot, "s")  # asked: rescored (and failing again)
            await _scored(pilot)
            assert len(failures()) == 2
            assert "being remade" not in str(screen.query_one("#replay-status").content)
            assert app._exception is None
    asyncio.run(go())


def test_leaderboard_tab_and_kind_keep_the_focus(workdir) -> None:
    """t (next tab) and k (verdict kind) left nothing focused, so the keys reached no table;
    the shown tab's main table has the focus (README: after a switch, the main list)."""
    app = WorkbenchApp(settings(workdir))
    main = {"ranking": "lb-ranking", "plot": None, "categories": "lb-categories",
            "rules": "lb-rules", "compare": "lb-pairs"}

    async def go():
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot)
            await settle(pilot, "5")
            screen = app.screen
            assert app.focused is not None and app.focused.id == "lb-ranking"
            for key in ("t", "t", "t", "t", "t", "k", "t", "k"):
                await settle(pilot, key)
                tab = screen.query_one("#lb-tabs").active
                assert app.focused is not None, (key, tab)
                if main[tab] is not None:
                    assert app.focused.id == main[tab], (key, tab)
            assert app._exception is None
    asyncio.run(go())


def test_leaderboard_decoders_are_those_used(workdir) -> None:
    """A run of inference errors only decodes nothing: `careful leaderboard` names no decoder
    for it; the workbench named the one it would have used (ModelScore was built from the
    resolved decoder). The run's score and the Decoders note now say what scoring used."""
    from careful_engine import browse
    from careful_engine.scoring.score import load_effects, score_run
    from tests.workbench_support import IDS, write_run

    errors = write_run(workdir / "runs" / "errors", "failing", [
        {"id": i, "result": f"Error during inference: down {i}"} for i in IDS])
    browse.score_to_file(errors, "failing", errors / browse.SCORE_DIR / browse.SCORES_NAME,
                         decoder=None)
    scored = score_run(errors, effects=load_effects()).scores[0]
    assert scored.decoder is None  # as the CLI scores it
    (ref,) = browse.find_runs([errors])
    assert ref.decoder  # (one resolved, never used)
    app = WorkbenchApp(settings(workdir, runs=[Path("runs/alpha"), Path("runs/errors")]))

    async def go():
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot)
            await settle(pilot, "5")
            screen = app.screen
            entries = {e.label: e for e in screen.entries}
            assert set(entries) == {"alpha", "errors"}, screen.unscored
            assert entries["errors"].decoder is None
            note = str(screen.query_one("#lb-ranking-note").content)
            assert f"alpha: {entries['alpha'].decoder}" in note
            assert "errors:" not in note.partition("Decoders:")[2], note
            assert app._exception is None
    asyncio.run(go())


def test_compare_note_is_careful_compares_caption(workdir) -> None:
    """Compare showed one generic note whatever was paired; `careful compare` says what the
    figures are over: the p-value's test, n paired under strict, and the categories not paired
    (here miss_func, only in B). The note is the engine's caption for the comparison shown."""
    import json

    from careful_engine import browse
    from careful_engine.analysis.leaderboard import compare
    from careful_engine.core import bfcl
    from careful_engine.demo import reference as demo
    from careful_engine.present.compare import compare_report
    from tests.workbench_support import IDS, write_run

    gamma = write_run(workdir / "runs" / "gamma", "wider",
                      [demo.reference_entry(bfcl.conversation(i)) for i in IDS])
    extra = "multi_turn_miss_func_0"
    (gamma / "wider" / "multi_turn" / "BFCL_v4_multi_turn_miss_func_result.json").write_text(
        json.dumps(demo.reference_entry(bfcl.conversation(extra))) + "\n")
    browse.score_to_file(gamma, "wider", gamma / browse.SCORE_DIR / browse.SCORES_NAME,
                         decoder=None)
    app = WorkbenchApp(settings(workdir, runs=[Path("runs/alpha"), Path("runs/gamma")]))

    async def go():
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot)
            await settle(pilot, "5")
            screen = app.screen
            entries = {e.label: e.score for e in screen.entries}
            assert set(entries) == {"alpha", "gamma"}, screen.unscored
            for kind in ("bfcl", "safe"):
                assert str(screen.query_one("#cmp-kind").value) == kind
                caption = compare_report(compare(entries["alpha"], entries["gamma"], kind),
                                         "alpha", "gamma").caption
                note = str(screen.query_one("#cmp-note").content)
                assert note.startswith(caption) and "not paired (only in B): " in note, note
                assert "Enter on a changed conversation" in note
                await settle(pilot, "k")
            assert app._exception is None
    asyncio.run(go())


def test_decision_dialog_says_a_reason_is_required_and_can_change_the_choice(workdir) -> None:
    """After y the reason field had the focus, so n was typed into it and the choice could not
    be changed; Enter with no reason did nothing and said nothing. Enter now says a reason is
    required; Up leaves the field so that n chooses again."""
    from textual.widgets import Input

    from workbench.screens.dialogs import DecisionDialog

    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(150, 50)) as pilot:
            await settle(pilot)
            screen = await open_agreement(pilot, "r2")
            function = screen.split_names[screen.query_one("#splits").cursor_row]
            await settle(pilot, "d", "y", "enter")
            dialog = app.screen
            assert isinstance(dialog, DecisionDialog)  # not recorded: no reason
            assert "a reason is required" in screen_text(app)
            await settle(pilot, *"ok", "up", "n")
            assert dialog.choice is False
            assert dialog.query_one("#dialog-input", Input).value == "ok"  # kept as typed
            await settle(pilot, *" after all", "enter")
            assert app.screen is screen
            (decision,) = [d for d in screen.session.decisions() if d.function == function]
            assert decision.destructive is False and decision.reason == "ok after all"
            assert app._exception is None
    asyncio.run(go())
