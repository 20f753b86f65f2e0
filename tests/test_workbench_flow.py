"""Pilot tests for the workbench's flow (issue 15): focus after every screen switch and keys
that reach the screen, drop-downs that open only when asked, remembered names and filters,
agreement and adjudication on some annotators, a new round with language-model annotators."""

from __future__ import annotations

import asyncio
import json

import pytest
from textual.widgets import Checkbox, DataTable, Input, Select

from careful_engine.annotation.store import Store
from tests.workbench_support import open_agreement, resign, settings, settle
from workbench.app import WorkbenchApp
from workbench.screens import (
    AgreementScreen,
    ConversationScreen,
    HelpScreen,
    HomeScreen,
    LabelScreen,
    LeaderboardScreen,
    ReplayScreen,
)

SCREENS = {"1": HomeScreen, "2": LabelScreen, "3": AgreementScreen, "4": ReplayScreen,
           "5": LeaderboardScreen}
MAIN = {"1": "runs", "2": "round-select", "3": "splits", "4": "conversations",
        "5": "lb-ranking"}


pytestmark = pytest.mark.usefixtures("no_blink")


def run(coro) -> None:
    asyncio.run(coro)


# ---------------------------------------------------------------- focus and keys (defect 8)


def test_every_switch_focuses_the_main_list_and_keys_reach_it(workdir) -> None:
    """After 1-5 in any order the new screen's main list has the focus, so the next digit
    switches again (before: Label's name field took "3" as text); Escape from the stepper
    and from labelling lands on the main list too."""

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            for key in "2345213":
                await settle(pilot, key)
                await pilot.pause(0.05)
                assert isinstance(app.screen, SCREENS[key]), key
                assert app.focused is not None and app.focused.id == MAIN[key], (key, app.focused)
            await settle(pilot, "2", "question_mark")  # a single key on Label's first view
            assert isinstance(app.screen, HelpScreen)
            await settle(pilot, "escape")
            assert app.focused.id == "round-select"  # back from a dialog: focus where it was
            await settle(pilot, "tab", *"A1", "enter", "escape")  # label, then back
            screen = app.screen
            assert isinstance(screen, LabelScreen) and screen.session is None
            assert app.focused.id == "round-select"
            await settle(pilot, "4", "enter")  # the stepper, then Escape back to the list
            for _ in range(100):
                if isinstance(app.screen, ConversationScreen):
                    break
                await pilot.pause(0.05)
            assert isinstance(app.screen, ConversationScreen)
            await settle(pilot, "escape")
            await pilot.pause(0.05)
            assert isinstance(app.screen, ReplayScreen)
            assert app.focused.id == "conversations"
    run(go())


def test_down_on_a_drop_down_moves_on_and_enter_opens_it(workdir) -> None:
    """Down on a focused drop-down never opens it (Textual's Select did); Enter does."""

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "4")
            run_select = app.screen.query_one("#run", Select)
            run_select.focus()
            await settle(pilot, "down")
            assert not run_select.expanded
            assert app.focused is not run_select
            run_select.focus()
            await settle(pilot, "enter")
            assert run_select.expanded
            await settle(pilot, "escape")
            assert not run_select.expanded
    run(go())


def test_focus_is_visible(workdir) -> None:
    """The focused table carries an accent bar the others do not (same width: nothing
    moves), and a focused drop-down is highlighted."""

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, "3")
            splits, pairs = (app.screen.query_one(f"#{i}", DataTable) for i in ("splits",
                                                                                 "pairs"))
            assert app.focused is splits
            focused, blurred = splits.styles.border_left, pairs.styles.border_left
            assert focused[0] not in ("", "none", "blank") and blurred[0] == "blank"
            round_select = app.screen.query_one("#agree-round", Select)
            before = round_select.query_one("SelectCurrent").styles.background
            round_select.focus()
            await settle(pilot)
            assert round_select.query_one("SelectCurrent").styles.background != before
    run(go())


# ---------------------------------------------------------------- remembered (build 7)


def test_the_annotator_name_is_remembered_across_restarts(workdir) -> None:
    """Once someone has labelled as A1, the next session's Label screen has A1 in the name
    field: Tab, Enter resumes (a settings file in the config folder given to the app)."""
    config = workdir / "config" / "workbench.json"

    async def first():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2", "tab", *"A1", "enter")
            assert app.screen.session.annotator == "A1"

    async def second():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2")
            assert app.screen.query_one("#annotator", Input).value == "A1"
            await settle(pilot, "tab", "enter")
            assert app.screen.session is not None and app.screen.session.annotator == "A1"

    run(first())
    assert json.loads(config.read_text())["annotator"] == "A1"
    run(second())


def test_a_hostile_settings_file_is_not_trusted(workdir) -> None:
    """A broken file, a bad name or a link in place of the file: defaults, no crash, and the
    write never follows the link."""
    from workbench.remember import Remembered

    config = workdir / "config" / "workbench.json"
    config.parent.mkdir()
    config.write_text('{"annotator": "A1\\u001b[2J", "filters": {"alpha": {"rule": 5, '
                      '"failed_only": "yes", "category": "' + "x" * 500 + '"}}}')
    loaded = Remembered.load(config)
    assert loaded.annotator == ""
    assert loaded.filters == {"alpha": {"category": None, "failed_only": False,
                                        "error_type": None, "rule": None}}
    config.write_text("{not json")
    assert Remembered.load(config).problem
    config.write_text("[" * 100_000)  # nested too deeply for json: a RecursionError
    assert "nested too deeply" in Remembered.load(config).problem
    target = workdir / "elsewhere.json"
    target.write_text("{}")
    config.unlink()
    config.symlink_to(target)
    planted = Remembered.load(config)
    planted.remember_annotator("A2")
    assert target.read_text() == "{}" and "not written" in planted.problem


def test_a_settings_file_swapped_for_a_fifo_is_never_waited_on(workdir, monkeypatch) -> None:
    """The settings file is checked on the descriptor it is read from: a FIFO put in its place
    after any check by name (Path.is_file says True here, as it did before the swap) is
    refused at once with the defaults, not waited on; a file over the size cap too."""
    import os
    import threading
    from pathlib import Path

    from workbench.remember import MAX_BYTES, Remembered

    config = workdir / "config" / "workbench.json"
    config.parent.mkdir()
    os.mkfifo(config)
    monkeypatch.setattr(Path, "is_file", lambda self: True)
    got: list[Remembered] = []
    reader = threading.Thread(target=lambda: got.append(Remembered.load(config)), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # blocked in open(): let it go before failing
        fd = os.open(config, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        reader.join(5)
    assert got and not reader.is_alive(), "the reader waited on the FIFO"
    assert got[0].problem.endswith("not a file: defaults used") and got[0].annotator == ""
    config.unlink()
    config.write_text('{"annotator": "A1"}' + " " * MAX_BYTES)
    big = Remembered.load(config)
    assert big.annotator == "" and "not read" in big.problem and "more than" in big.problem


def test_filters_survive_switching_run_screen_and_restart(workdir) -> None:
    """Failed-only set on alpha stays on when switching to beta (before: reset); each run's
    filters come back after a screen switch and after a restart."""

    def state(screen: ReplayScreen) -> tuple:
        return (screen.ref.label, screen.query_one("#failed", Checkbox).value,
                screen.filter.failed_only, screen.filter.error_type,
                sorted({r.id for r in screen.shown_rows}))

    async def first():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "4")
            screen = app.screen
            assert screen.ref.label == "alpha"
            await settle(pilot, "x")  # failed only on alpha
            assert state(screen)[1:3] == (True, True)
            await settle(pilot, "r")  # beta: the filter stays
            beta = state(screen)
            assert beta[0] == "beta" and beta[1:3] == (True, True)
            assert beta[4] and all(not r.official_valid for r in screen.shown_rows)
            await settle(pilot, "e")  # beta only: an error type
            beta = state(screen)
            assert beta[3] is not None
            await settle(pilot, "1", "4")
            assert state(screen) == beta
            await settle(pilot, "r")  # alpha: its own filters
            assert state(screen)[:4] == ("alpha", True, True, None)
            return beta

    async def second(beta: tuple):
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "4")
            screen = app.screen
            assert state(screen)[:4] == ("alpha", True, True, None)
            await settle(pilot, "r")
            assert state(screen) == beta

    beta = asyncio.run(first())
    run(second(beta))


# ---------------------------------------------------------------- the roster (build 3)


def test_agreement_and_adjudication_on_some_annotators(workdir) -> None:
    """`a` on Agreement counts only the named annotators, as `careful agree -a A1` and
    `careful adjudicate -a A1` do; a name off the roster is refused; empty counts all."""
    with Store(workdir / "careful.db") as store:
        session = store.adjudication_session("r2", "tester")
        want_any = sorted(session.adjudicate("any", annotators=["A1"]).destructive)
        want_all = sorted(session.adjudicate("any").destructive)
    assert want_any != want_all

    async def go():
        app = WorkbenchApp(settings(workdir))
        shown: list[str] = []
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await open_agreement(pilot)
            assert str(screen.query_one("#agree-round", Select).value) == "r2"
            assert sorted(screen.result.destructive) == want_all
            app.notify = lambda message, **kw: shown.append(str(message))  # type: ignore
            await settle(pilot, "a")
            dialog = app.screen.query_one("#dialog-input", Input)
            dialog.value = ""
            await settle(pilot, *"A9", "enter")
            assert any("not annotators of round r2" in m for m in shown), shown
            assert screen.chosen is None
            await settle(pilot, "a")
            app.screen.query_one("#dialog-input", Input).value = ""
            await settle(pilot, *"A1", "enter")
            assert screen.chosen == ["A1"]
            assert sorted(screen.result.destructive) == want_any
            assert screen.query_one("#pairs", DataTable).row_count == 0  # one annotator
            assert "only A1" in str(screen.query_one("#agree-mode").render())
            await settle(pilot, "a")
            app.screen.query_one("#dialog-input", Input).value = ""
            await settle(pilot, "enter")
            assert screen.chosen is None and sorted(screen.result.destructive) == want_all
    run(go())


def test_a_new_round_with_language_model_annotators_over_all_functions(workdir) -> None:
    """The new-round dialog takes LLM annotators as NAME=MODEL (as `round new --llm`) and the
    scope; a malformed pair is refused in the dialog."""

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2", "ctrl+n", *"alice", "tab", *"g4", "enter")
            assert app.screen.query_one("#round-llms", Input).value == "g4"  # refused
            app.screen.query_one("#round-llms", Input).value = "g4=gpt-4o-2024-11-20"
            await settle(pilot, "tab", "enter", "down", "enter")  # scope: every function
            assert str(app.screen.query_one("#round-scope", Select).value) == "all"
            app.screen.query_one("#round-llms", Input).focus()
            await settle(pilot, "enter")
            assert isinstance(app.screen, LabelScreen)
    run(go())
    with Store(workdir / "careful.db") as store:
        assert store.round_annotators("r3") == ["alice", "g4"]
        assert store.annotator("g4").kind == "llm" and store.annotator("g4").model == \
            "gpt-4o-2024-11-20"
        assert len(store.round_functions("r3")) > 49  # every function, not only the writes


# ---------------------------------------------------------------- problems in view (build 6)


def test_home_shows_the_problems_of_a_corrupted_real_run(shared_runs, tmp_path) -> None:
    """A copy of xLAM's real run with two broken result lines and a score file with a broken
    line, and a second copy whose score file is a folder: Home counts each run's problems,
    marks the scores stale or unreadable, p lists `file:line [id]: reason`, and Replay's
    status names the score file's problem (before: a folder there was passed over: "–")."""
    import shutil

    from workbench.context import Settings
    from workbench.screens.problems import LinesScreen

    src = shared_runs / "xlam-2-8b-fc-r" / "result"
    broken, folder = tmp_path / "xlam", tmp_path / "xlam-folder"
    shutil.copytree(src, broken / "result")
    shutil.copytree(src, folder / "result")
    base = next(broken.rglob("*multi_turn_base_result.json"))
    lines = base.read_text(encoding="utf-8").splitlines(True)
    lines[6] = '{"id": "multi_turn_base_6", "result": [[\x1b[31m\n'
    lines[9] = "[1, 2]\n"
    base.write_text("".join(lines), encoding="utf-8")
    (broken / "careful-score").mkdir()
    (broken / "careful-score" / "conversations.jsonl").write_bytes(
        b'{"id": "multi_turn_base_0", "model": "Salesforce_Llama-xLAM-2-8b-fc-r"}\n\xff{\n')
    resign(broken)  # broken as this install wrote it (an unsigned one is not read at all)
    (folder / "careful-score" / "conversations.jsonl").mkdir(parents=True)
    app = WorkbenchApp(Settings(runs=[broken, folder], db=tmp_path / "c.db",
                                cache_dir=tmp_path / "cache", user="tester",
                                config=tmp_path / "config.json"))

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            home = app.screen
            found = home.problems
            assert any(p.endswith("base_result.json:7 [multi_turn_base_6]: line is not JSON "
                                  "(Expecting value)") for p in found["xlam"]), found["xlam"]
            assert any(p.endswith("base_result.json:10: entry is a list, not an object")
                       for p in found["xlam"])
            assert any(p.endswith("conversations.jsonl:2: not a JSON line")
                       for p in found["xlam"])
            # a line with an id and a model and nothing else is not a score line
            assert any(p.endswith("conversations.jsonl:1 [multi_turn_base_0]: not a score line "
                                  "(category: not a string); left out")
                       for p in found["xlam"]), [p for p in found["xlam"] if "jsonl" in p]
            assert found["xlam-folder"] == [
                f"{folder / 'careful-score' / 'conversations.jsonl'}: cannot read: not a "
                "regular file (a folder)"]
            table = home.query_one("#runs", DataTable)
            rows = {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)]
                    for i in range(table.row_count)}
            assert rows["xlam"][3:5] == ["–", str(len(found["xlam"]))]  # no score line left
            assert rows["xlam-folder"][3:5] == ["unreadable", "1"]
            await settle(pilot, "p")
            assert isinstance(app.screen, LinesScreen)
            assert "\x1b" not in app.export_screenshot()
            await settle(pilot, "escape")
            assert app.focused is table
            await settle(pilot, "down")
            assert table.cursor_row == 1
            await settle(pilot, "enter")
            for _ in range(100):
                if isinstance(app.screen, ReplayScreen) and app.screen.rows:
                    break
                await pilot.pause(0.05)
            status = str(app.screen.query_one("#replay-status").render())
            assert "score file problems: 1 (cannot read: not a regular file" in status
    run(go())


def test_agreement_on_a_round_without_writes_says_all(workdir) -> None:
    """A round of reads only: the figures are over all functions, and the mode line says so
    (it said 'writes' over figures for all functions, and w changed nothing visible)."""
    from careful_engine.annotation.signals import load_inputs

    with Store(workdir / "careful.db") as store:
        store.new_round("reads", load_inputs().select(["cat", "ls", "pwd"]), ["A1", "A2"],
                        created_by="lead")
        for who in ("A1", "A2"):
            session = store.annotator_session("reads", who)
            for f in session.functions():
                session.label(f.name, False, "")
            session.submit()

    async def go():
        app = WorkbenchApp(settings(workdir))
        shown: list[str] = []
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await open_agreement(pilot, "reads")
            mode = str(screen.query_one("#agree-mode").render())
            assert mode.startswith("all · all annotators"), mode
            app.notify = lambda message, **kw: shown.append(str(message))  # type: ignore
            await settle(pilot, "w")
            assert str(screen.query_one("#agree-mode").render()).startswith("all · ")
            assert any("declare no writes" in m for m in shown), shown
    asyncio.run(go())
