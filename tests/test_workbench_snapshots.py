"""Snapshot tests (pytest-textual-snapshot) of every workbench screen at 80x24, the stepper
also at 120x40. Deterministic: fixed runs and database, paths shown relative to the working
folder, no clock on screen, no cursor blink. Refresh with ``pytest --snapshot-update``."""

from __future__ import annotations

import pytest

from tests.workbench_support import settings, settle
from workbench.app import WorkbenchApp

pytestmark = pytest.mark.usefixtures("no_blink")


def steps(*keys: str):
    """A ``run_before`` that presses ``keys`` one group at a time, settling in between."""

    async def run_before(pilot) -> None:
        for group in (*keys, ""):
            await settle(pilot, *(group.split(" ") if group else ()))
        pilot.app.clear_notifications()
        await pilot.pause()

    return run_before


def app(root) -> WorkbenchApp:
    return WorkbenchApp(settings(root))


def test_home(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps())


def test_label_setup(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("2"))


def test_label_function(snap_compare, workdir) -> None:
    # A1 labels cd, then stands on rm (a proposed candidate) with its example diff
    assert snap_compare(app(workdir), run_before=steps(
        "2", "tab A 1 enter", "y", "o n l y space h i d d e n space s t a t e enter",
        "right_square_bracket right_square_bracket right_square_bracket", "space"))


def test_agreement(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("3", "down"))


def test_replay_list(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("4", "r"))


def test_replay_failed_only(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("4", "r", "x"))


def test_conversation_stepper(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("4", "r", "enter"))


def test_conversation_turn_wide(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("4", "r", "down down", "enter", "up up"),
                        terminal_size=(120, 40))


def test_leaderboard(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("5"))


def test_leaderboard_compare(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("5", "k"))


def test_help(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("4", "r", "enter", "question_mark"))


def test_leaderboard_plot(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("5", "t"), terminal_size=(100, 30))


def test_home_problems(snap_compare, workdir) -> None:
    assert snap_compare(app(workdir), run_before=steps("", "down", "p"))  # the list loaded first


def test_compare_pair(snap_compare, workdir) -> None:
    """Compare drill-down: the changed conversation in A and B side by side."""
    before = steps("5", "k")

    async def run_before(pilot) -> None:
        await before(pilot)
        pilot.app.screen.query_one("#lb-pairs").focus()
        await steps("enter")(pilot)

    assert snap_compare(app(workdir), run_before=run_before, terminal_size=(120, 30))
