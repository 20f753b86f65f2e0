"""Pilot tests for what a received annotation database or a long run folder name did to the
screens, each failing on the code before it: an override reason of a million characters
uncut on Agreement, a stored reason's newline raw in the Label screen's input, an annotator
name with control characters raw on Agreement, a long run name pushing every figure off
Home and the Leaderboard."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import DataTable, Input, OptionList

from careful_engine.annotation.store import Store
from tests.annotation_db import raw, rows
from tests.workbench_support import (
    open_agreement,
    resign,
    settings,
    settle,
    start_labelling,
)
from workbench.app import WorkbenchApp

pytestmark = pytest.mark.usefixtures("no_blink")

RAW = ("\x1b", "\x07", "\u202e", "\n", "\t")  # what must never reach the terminal as it is


def rendered(widget: Widget) -> str:
    """The characters the widget sends to the terminal, segment by segment."""
    strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "".join(seg.text for strip in strips for seg in strip)


def _execute(db: Path, sql: str, params: list) -> None:
    con = raw(db)
    try:
        con.execute("pragma foreign_keys=off")
        con.execute(sql, params)
        con.conn.commit()
    finally:
        con.conn.close()


def test_a_huge_override_reason_is_cut_in_the_reveal_log(workdir) -> None:
    """An override of r2 recorded with a reason of a million characters (a received
    database): the Agreement summary showed it whole (a 10 MB one never showed); it is cut
    in the middle, its length said, control characters escaped."""
    reason = "why\x1b[31m" + "x" * 1_000_000 + "\u202eend"
    _execute(workdir / "careful.db", "insert into reveals (round, who, what, override, created) "
             "values ('r2', 'lead', null, ?, '2026-01-01T00:00:00+00:00')", [reason])
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            screen = await open_agreement(pilot, "r2")
            summary = screen.query_one("#agree-summary").render()
            text = str(summary)
            assert "reveal log: 1 override" in text
            assert len(text) < 2_000, len(text)
            assert f"({len(reason):,} characters)" in text and "why\\x1b[31m" in text
            assert not any(c in text for c in RAW[:3])
            assert app._exception is None
    asyncio.run(go())


def test_a_stored_reason_shows_escaped_and_is_saved_unchanged(workdir) -> None:
    """A1's stored reason holds a newline and a tab (allowed): the Label screen put it in the
    one-line input raw, to the terminal as it is. It shows on one line (a newline or tab as a
    space: an edit saved escapes like \\x0a as text); Enter without an edit saves the stored
    reason, never its one-line form; an edit saves what was typed."""
    stored = "cannot undo:\nthe file\tis gone"
    with Store(workdir / "careful.db") as store:
        s = store.annotator_session("r1", "A1")
        first = s.functions()[0].name
        s.label(first, True, stored)
    app = WorkbenchApp(settings(workdir))

    def reason_of() -> str:
        return rows(workdir / "careful.db", "select reason from labels where round='r1' and "
                    "annotator='A1' and function=?", [first])[0]["reason"]

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await start_labelling(pilot, "A1")
            screen.select(first)
            await settle(pilot)
            box = screen.query_one("#reason", Input)
            assert box.value == "cannot undo: the file is gone"
            shown = rendered(box)
            assert not any(c in shown for c in RAW), repr(shown)
            box.focus()
            await settle(pilot, "enter")
            assert reason_of() == stored  # unedited: the stored reason as it was
            screen.select(first)
            screen.query_one("#functions", OptionList).focus()
            await settle(pilot, "y")  # the reason box, focused
            await settle(pilot, "end", *" now", "enter")
            assert reason_of() == "cannot undo: the file is gone now"
            assert app._exception is None
    asyncio.run(go())


BAD = "A3\x1b]0;title\x07\u202eX"


def test_a_roster_name_with_control_characters_is_left_out_and_noted(workdir) -> None:
    """An annotator name edited into r2's roster with an escape sequence and a bidi override:
    round_annotators returned it, and the Agreement summary printed it raw. It is left out,
    one problem line saying so (as a round row that is not careful's), and the screen shows
    no control character."""
    _execute(workdir / "careful.db", "insert into round_annotators (round, annotator, added, "
             "submitted_at) values ('r2', ?, '2026-01-01T00:00:00+00:00', "
             "'2026-01-01T00:00:00+00:00')", [BAD])  # submitted: r2 stays closed
    with Store(workdir / "careful.db") as store:
        assert store.round_annotators("r2") == ["A1", "A2"]
        assert len(store.problems) == 1 and "[r2/A3\\x1b]0;title" in store.problems[0]
        assert "invalid annotator name" in store.problems[0]
        assert not any(c in store.problems[0] for c in RAW)
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            screen = await open_agreement(pilot, "r2")
            assert screen.session is not None
            for wid in ("#agree-summary", "#adjudication", "#agree-mode"):
                text = rendered(screen.query_one(wid))
                assert not any(c in text for c in RAW[:3]), (wid, text)
            assert "A1" in str(screen.query_one("#agree-summary").render())
            await settle(pilot, "a")  # the Annotators dialog: the roster as it is now
            assert app.screen.query_one("#dialog-input", Input).value == "A1 A2"
            assert app._exception is None
    asyncio.run(go())


def test_a_long_run_name_is_cut_in_the_middle_on_home_and_the_leaderboard(workdir) -> None:
    """A run folder named with 250 characters: Home's and the Leaderboard's name column took
    its whole width, every figure off the screen. The name is cut in the middle (its start
    and end kept); the Leaderboard's v shows it whole."""
    name = "run-" + "x" * 240 + "-end"
    (workdir / "runs" / "beta").rename(workdir / "runs" / name)
    resign(workdir / "runs" / name)
    app = WorkbenchApp(settings(workdir, runs=[Path("runs/alpha"), Path("runs") / name]))

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            runs = app.screen.query_one("#runs", DataTable)
            cells = [str(runs.get_row_at(i)[0]) for i in range(runs.row_count)]
            cut = [c for c in cells if c.startswith("run-")]
            assert len(cut) == 1 and len(cut[0]) <= 64, cells  # of 248
            assert cut[0].endswith("-end") and "…" in cut[0]
            assert "✓" in rendered(runs)  # the scores column on view
            await settle(pilot, "5")
            ranking = app.screen.query_one("#lb-ranking", DataTable)
            names = [str(ranking.get_row_at(i)[0]) for i in range(ranking.row_count)]
            assert sorted(names) == sorted(["alpha", cut[0]]), names
            ranking.focus()
            ranking.move_cursor(row=names.index(cut[0]))
            await settle(pilot, "v")
            whole = "".join(str(line) for line in app.screen._lines)
            assert name in whole
            assert app._exception is None
    asyncio.run(go())


def test_home_shows_the_problems_of_its_latest_read(workdir) -> None:
    """A round row edited outside careful: Home kept the workbench store's every problem
    ever noted, notified them again on each refresh, and still showed them once the database
    was repaired. It shows those of its latest read and notifies a problem once."""
    db = workdir / "careful.db"
    _execute(db, "insert into rounds (name, created, created_by, declarations_source, "
             "declarations_sha256, blind, closed_at, note) values ('r9', "
             "'2026-01-01T00:00:00+00:00', 'lead', 'x.json', 'not a hash', 1, null, '')", [])
    app = WorkbenchApp(settings(workdir))
    said: list[str] = []
    notify = app.notify

    def record(message: str, **kw) -> None:
        said.append(message)
        notify(message, **kw)

    app.notify = record  # type: ignore[method-assign]

    def left_out() -> list[str]:
        return [m for m in said if "annotation database left out" in m]

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            home = app.screen
            text = str(home.query_one("#db").render())
            assert "1 row(s) of the database left out" in text and "[r9]" in text
            assert len(left_out()) == 1
            await settle(pilot, "r")
            assert "1 row(s) of the database left out" in str(home.query_one("#db").render())
            assert len(left_out()) == 1  # the same problem: not notified again
            _execute(db, "delete from rounds where name = 'r9'", [])
            await settle(pilot, "r")
            assert "left out" not in str(home.query_one("#db").render())
            assert len(left_out()) == 1
            assert app._exception is None
    asyncio.run(go())


def test_agreement_says_why_a_set_with_a_row_left_out_is_not_adjudicated(workdir) -> None:
    """A1's label on mv in r2 edited to hold a bell character: the row was left out and the
    policy counted A2 alone, so Boundary wrote a file from a partial vote. The screen says
    A1's labels are incomplete, and Boundary writes nothing, saying why."""
    _execute(workdir / "careful.db", "update labels set reason = reason || char(7) where "
             "round = 'r2' and annotator = 'A1' and function = 'mv'", [])
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            screen = await open_agreement(pilot, "r2")
            assert screen.session is not None
            shown = str(screen.query_one("#adjudication").render())
            assert "the labels of A1 are incomplete" in shown, shown
            assert screen.result is None
            await settle(pilot, "b")
            notes = [n.message for n in app._notifications]
            assert any("nothing to write" in m and "A1 are incomplete" in m for m in notes)
            assert not (workdir / "boundary").exists() or not any(
                (workdir / "boundary").iterdir())
            assert app._exception is None
    asyncio.run(go())
