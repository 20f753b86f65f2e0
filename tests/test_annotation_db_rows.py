"""Rows of an annotation database changed by something other than careful: each bad row is
one ``db [round/annotator/function]: reason`` problem line and is left out; values are shown
literally; nothing the importer or the boundary loader would refuse is written."""

from __future__ import annotations

import json
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
    """Escapes and markup from the database were sent raw or acted on by `round status`."""
    sql(db, "update annotators set kind = ? where name = 'B1'", (f"[red]hu{ESC}[5m",))
    sql(db, "update round_annotators set submitted_at = ? where annotator = 'B2'",
        (f"[bold]x{ESC}",))
    shown = invoke("round", "status", "r", "--db", str(db)).output
    assert ESC not in shown and "[red]hu\\x1b[5m" in shown and "[bold]x\\x1b" in shown, shown
    sql(db, "update rounds set created = ?, closed_at = ?, closed_by = 'lead', "
        "declarations_sha256 = ?", (f"[bold]{ESC}]0;title{BEL}", f"{ESC}[2J", f"{ESC}[31m"))
    for args in (["round", "status", "--db", str(db)], ["round", "status", "r", "--db", str(db)]):
        result = invoke(*args)
        assert ESC not in result.output and BEL not in result.output, result.output
        assert "declarations_sha256 '\\x1b[31m' is not 64" in result.output, result.output
        assert result.exit_code == (1 if len(args) == 4 else 2), result.output


ROUND_ROWS = {
    "created": ("update rounds set created = ?", f"[bold]{ESC}]0;title{BEL}",
                "created: '[bold]\\x1b]0;title\\x07' is not an ISO 8601 time"),
    "closed_at": ("update rounds set closed_at = ?", f"{ESC}[2J",
                  "closed_at: '\\x1b[2J' is not an ISO 8601 time"),
    "blind": ("update rounds set blind = ?", "yes", "blind is a string 'yes', not 0 or 1"),
    "note": ("update rounds set note = ?", f"n{ESC}", "note: the reason holds a control"),
}


@pytest.mark.parametrize("case", sorted(ROUND_ROWS))
def test_a_bad_round_row_is_refused_by_name(case, db, tmp_path):
    statement, value, message = ROUND_ROWS[case]
    sql(db, statement, (value,))
    result = invoke("round", "status", "--db", str(db))
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and f"{db} [r]: {message}" in said, result.output
    for args in (["round", "status", "r"], ["agree", "-r", "r"],
                 ["labels", "export", "-r", "r", "-o", str(tmp_path / "out")]):
        result = invoke(*args, "--db", str(db))
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and f"{db} [r]: {message}" in said, (args, said)
        assert ESC not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("column, value, message", [
    ("kind", f"[red]hu{ESC}[5m", "kind '[red]hu\\x1b[5m' is neither human nor llm"),
    ("model", "gpt", "a language-model annotator needs its model, a human has none"),
    ("created", "now", "created: 'now' is not an ISO 8601 time"),
])
def test_a_bad_annotator_row_is_not_exported(column, value, message, db, tmp_path):
    sql(db, f"update annotators set {column} = ? where name = 'B1'", (value,))
    out = tmp_path / "out"
    result = invoke("labels", "export", "-r", "r", "--db", str(db), "-o", str(out))
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and f"{db} [B1]: {message}" in said, said
    assert ESC not in result.output
    assert sorted(p.name for p in out.iterdir()) == ["B2.json"]


LABEL_ROWS = {
    "destructive text": ("update labels set destructive = 'yes' where annotator = 'B1' "
                         "and function = 'cd'", "B1/cd]: destructive is a string 'yes'"),
    "destructive huge": ("update labels set destructive = 99999999999999999999 "
                         "where annotator = 'B1' and function = 'cd'", "B1/cd]: destructive is"),
    "reason bytes": ("update labels set reason = x'ff00fe' where annotator = 'B1' "
                     "and function = 'cd'", "B1/cd]: a reason must be text"),
    "unknown function": ("update labels set function = 'zz' || char(27) || '[31m' "
                         "where annotator = 'B1' and function = 'cd'",
                         "B1/zz\\x1b[31m]: not a function of the round"),
    "bad times": ("update labels set created = '[bold]' || char(27), updated = 'x' "
                  "where annotator = 'B1' and function = 'cd'",
                  "B1/cd]: created: '[bold]\\x1b' is not an ISO 8601 time"),
    "reason control": ("update labels set reason = 'r' || char(27) || '[2J' "
                       "where annotator = 'B1' and function = 'cd'",
                       "B1/cd]: the reason holds a control character U+001B"),
}


@pytest.mark.parametrize("case", sorted(LABEL_ROWS))
def test_a_bad_label_row_is_a_problem_and_left_out(case, db, tmp_path):
    """The row crashed the export and agree --json (bytes), was counted as True ('yes'), or
    was written into a file the importer refuses (unknown function, bad times)."""
    from careful_engine.annotation.release import import_label_set, load_label_set

    statement, message = LABEL_ROWS[case]
    sql(db, statement)
    out = tmp_path / "out"
    result = invoke("labels", "export", "-r", "r", "--db", str(db), "-o", str(out))
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"{db} [r/{message}" in said, said
    assert "B1]: 1 label(s) left out: the label set is incomplete" in said
    assert "\x1b" not in result.output and "Traceback" not in result.output
    b1 = load_label_set(out / "B1.json")  # what the importer reads: no refusal
    assert b1.submitted is None
    assert [lb.function for lb in b1.labels if lb.destructive is None] == ["cd"]
    with Store(tmp_path / "other.db") as other:
        for name in ("B1", "B2"):
            import_label_set(other, load_label_set(out / f"{name}.json"), "copy", who="lead")
    result = invoke("agree", "-r", "r", "--json", "--db", str(db))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"{db} [r/{message}" in " ".join(result.output.split())


def test_an_annotator_row_the_importer_refuses_is_not_exported(db, tmp_path):
    sql(db, "update annotators set kind = 'llm', model = ? where name = 'B2'", (f"{ESC}[31m",))
    out = tmp_path / "out"
    result = invoke("labels", "export", "-r", "r", "--db", str(db), "-o", str(out))
    assert result.exit_code == 1, result.output
    assert f"{db} [B2]: invalid model name '\\x1b[31m'" in result.output, result.output
    assert "\x1b" not in result.output
    assert sorted(p.name for p in out.iterdir()) == ["B1.json"]


DECISION_ROWS = {
    "destructive 7": ("cd", 7, "lead", "moves cwd", "2026-01-01T00:00:00",
                      "decision 1/cd]: destructive is an int 7"),
    "unknown function": (f"zz{ESC}[31m[bold]evil", 1, "lead", "r", "2026-01-01T00:00:00",
                         "decision 1/zz\\x1b[31m[bold]evil]: not a function of the round"),
    "author escape": ("cd", 1, f"[red]au{ESC}[5m", "r", "2026-01-01T00:00:00",
                      "decision 1/cd]: invalid author"),
    "reason escape": ("cd", 1, "lead", f"r{ESC}[2J", "2026-01-01T00:00:00",
                      "decision 1/cd]: the reason holds a control character"),
    "created now": ("cd", 0, "lead", "r", "now", "decision 1/cd]: created: 'now' is not"),
}


@pytest.mark.parametrize("case", sorted(DECISION_ROWS))
def test_a_bad_decision_row_never_reaches_the_boundary(case, db, tmp_path):
    """The decision was applied and copied into the boundary file (destructive 7, author
    'x\\x1b'), or written for a function the round does not have."""
    from careful_engine.effects import boundary

    *row, message = DECISION_ROWS[case]
    sql(db, "insert into decisions (round, function, destructive, author, reason, created) "
        "values ('r', ?, ?, ?, ?, ?)", tuple(row))
    out = tmp_path / "b.json"
    result = invoke("adjudicate", "-r", "r", "--db", str(db), "--out", str(out))
    assert result.exit_code == 1, result.output
    assert f"{db} [r/{message}" in " ".join(result.output.split()), result.output
    assert "\x1b" not in result.output
    written = boundary.load(out)
    assert written.extra["decisions"] == []
    assert set(written.destructive) == {"rm", "cd"}


@pytest.mark.parametrize("change", [
    lambda d: d["destructive"][0].__setitem__("reason", "gone\x1b[2J"),
    lambda d: d["decisions"].append({"function": "cd", "destructive": True,
                                     "author": "x\x1b", "reason": "r", "created": "now"}),
    lambda d: d["decisions"].append({"function": "zz", "destructive": True,
                                     "author": "x", "reason": "r", "created": "now"}),
    lambda d: d["decisions"].append({"function": "cd", "destructive": True,
                                     "author": "x", "reason": "r\x07", "created": "now"}),
])
def test_the_boundary_loader_refuses_control_characters(change, db, tmp_path):
    from careful_engine.effects import boundary

    out = tmp_path / "b.json"
    assert invoke("adjudicate", "-r", "r", "--db", str(db), "--out", str(out)).exit_code == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    change(doc)
    with pytest.raises(boundary.BoundaryError) as e:
        boundary.from_json(doc, "b.json")
    assert "\x1b" not in str(e.value) and "\x07" not in str(e.value)
