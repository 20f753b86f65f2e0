"""Rows of an annotation database changed by something other than careful: each bad row is
one ``db [round/annotator/function]: reason`` problem line and is left out; values are shown
literally; nothing the importer or the boundary loader would refuse is written."""

from __future__ import annotations

import sqlite3

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.signals import load_inputs
from careful_engine.annotation.store import Store
from tests.fakes import paper_round

_load()
WIDE = {"COLUMNS": "250"}
ESC, BEL = "\x1b", "\x07"
FUNCTIONS = ["rm", "cd", "ls"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env=WIDE)


@pytest.fixture
def db(tmp_path):
    """A closed round r of rm, cd, ls labelled and submitted by B1 and B2."""
    path = tmp_path / "ann.db"
    inputs = load_inputs(paper_round.write_declarations(tmp_path / "effects.json"))
    with Store(path) as store:
        for a in ("B1", "B2"):
            store.add_annotator(a, "human")
        store.new_round("r", inputs.select(FUNCTIONS), ["B1", "B2"], created_by="lead")
        for a in ("B1", "B2"):
            session = store.annotator_session("r", a, account=a)
            session.label("rm", True, "deletes a file")
            session.label("cd", True, "moves cwd")
            session.label("ls", False, "reads only")
            session.submit()
    return path


def sql(path, statement: str, params: tuple = ()) -> None:
    conn = sqlite3.connect(str(path))
    with conn:
        conn.execute(statement, params)
    conn.close()


def test_round_status_shows_database_values_literally(db):
    sql(db, "update rounds set created = ?, closed_at = ?, closed_by = 'lead', "
        "declarations_sha256 = ?", (f"[bold]{ESC}]0;title{BEL}", f"{ESC}[2J", f"{ESC}[31m"))
    sql(db, "update annotators set kind = ? where name = 'B1'", (f"[red]hu{ESC}[5m",))
    sql(db, "update round_annotators set submitted_at = ? where annotator = 'B2'",
        (f"[bold]x{ESC}",))
    for args in (["round", "status", "--db", str(db)], ["round", "status", "r", "--db", str(db)]):
        result = invoke(*args)
        assert ESC not in result.output and BEL not in result.output, result.output
    listed = invoke("round", "status", "--db", str(db)).output
    assert "[bold]" in listed  # the markup is shown, not acted on
    shown = invoke("round", "status", "r", "--db", str(db)).output
    assert "[red]hu" in shown and "[bold]x" in shown, shown
