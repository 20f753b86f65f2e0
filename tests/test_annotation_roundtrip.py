"""What careful writes, careful reads back: reasons and names adjudication copies into a
boundary file, a round's declarations path and closer, and the exit code of the commands
that read rows of a database edited outside careful. Each test failed on the code before."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.names import check_reason
from careful_engine.annotation.signals import load_inputs
from careful_engine.annotation.store import Store
from careful_engine.effects import boundary
from tests.fakes import paper_round

_load()

EMOJI = "deletes \U0001F468\u200d\U0001F469 family photos"  # a zero-width joiner inside
KEPT = [EMOJI, "non\u00adrecoverable", "first\u2028second", "zero\u200bwidth", "mark\u200f",
        "bom\ufeffin", "line\nand\ttab"]
REFUSED = ["bell\x07", "esc\x1b[31m", "c1\x85end", "del\x7f", "override\u202eX",
           "isolate\u2066X", "private\ue000", "unassigned\U000e0080"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def _db(tmp_path: Path, reasons: dict[str, dict[str, tuple[bool, str]]], *,
        by: str = "lead") -> Path:
    path = tmp_path / "careful.db"
    inputs = load_inputs(paper_round.write_declarations(tmp_path / "effects.json"))
    with Store(path) as store:
        for a in reasons:
            store.add_annotator(a, "human")
        store.new_round("r", inputs.select(["rm", "cd", "ls"]), list(reasons), created_by=by)
        for a, labels in reasons.items():
            s = store.annotator_session("r", a, account=a)
            for fn, (destructive, why) in labels.items():
                s.label(fn, destructive, why)
            s.submit()
    return path


def test_reasons_and_authors_careful_accepts_give_a_boundary_its_loader_reads(tmp_path):
    """Reasons with an emoji's zero-width joiner, a soft hyphen, a line separator, and a
    decision's author holding a joiner: adjudicate wrote a file boundary.load refused, and
    --force then exited 2. The file loads, the text as written; a second write is version 2."""
    labels = {a: {"rm": (True, KEPT[0]), "cd": (True, KEPT[1]), "ls": (False, KEPT[2])}
              for a in ("B1", "B2")}
    db = _db(tmp_path, labels)
    out = tmp_path / "b.json"
    author = "Zoë \U0001F469\u200d\U0001F4BB"
    args = ["adjudicate", "-r", "r", "--db", str(db), "--out", str(out), "--author", author,
            "--decide", f"ls=yes:{KEPT[3]} {KEPT[4]}"]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    got = boundary.load(out)
    assert EMOJI in got.destructive["rm"] and KEPT[1] in got.destructive["cd"]
    assert got.destructive["ls"].startswith(f"{KEPT[3]} {KEPT[4]} (manual decision by {author})")
    again = invoke(*args, "--force")
    assert again.exit_code == 0, again.output
    assert boundary.load(out).version == 2


@pytest.mark.parametrize("text", KEPT + REFUSED)
def test_reasons_and_the_boundary_loader_follow_one_rule(text):
    """A reason careful stores is one its boundary loader reads, and the other way round."""
    doc = {"schema": boundary.SCHEMA, "name": "t",
           "destructive": [{"name": "rm", "reason": text}],
           "decisions": [{"function": "rm", "author": "x", "reason": text}]}
    try:
        check_reason(text)
        stored = True
    except AnnotationError:
        stored = False
    try:
        boundary.from_json(doc)
        read = True
    except boundary.BoundaryError:
        read = False
    assert stored == read == (text in KEPT), (stored, read)


def test_every_stock_boundary_loads():
    files = sorted(boundary.boundary_dir().glob("*.json"))
    assert files
    for path in files:
        assert boundary.load(path).destructive, path


def test_adjudicate_refuses_a_submitted_set_with_a_row_left_out(tmp_path):
    """B1's 'no' on ls edited to hold a bell character: its row was left out, the unanimous
    policy counted B2 alone, wrote ls as destructive, then exited 1. Nothing is written; the
    problem lines and why (exit 2)."""
    db = _db(tmp_path, {"B1": {"rm": (True, "deletes"), "cd": (True, "moves"),
                               "ls": (False, "reads")},
                        "B2": {"rm": (True, "deletes"), "cd": (True, "moves"),
                               "ls": (True, "paranoid")}})
    con = sqlite3.connect(db)
    con.execute("update labels set reason = reason || char(7) where annotator = 'B1' and "
                "function = 'ls'")
    con.commit()
    con.close()
    out = tmp_path / "b.json"
    got = invoke("adjudicate", "-r", "r", "-p", "unanimous", "--db", str(db), "--out", str(out))
    assert got.exit_code == 2, got.output
    assert not out.exists()
    text = " ".join(got.output.split())
    assert "[r/B1/ls]: the reason holds a control character U+0007" in text
    assert "[r/B1]: 1 label(s) left out" in text and "the labels of B1 are incomplete" in text
    # the other annotator alone, asked for, is adjudicated
    alone = invoke("adjudicate", "-r", "r", "-p", "unanimous", "-a", "B2", "--db", str(db),
                   "--out", str(out))
    assert out.exists() and alone.exit_code == 1, alone.output  # (the row still left out)


def test_round_new_stores_what_its_reader_reads(tmp_path):
    """A declarations file named with a zero-width space: round new committed a round that
    rounds() then left out and round() refused. It is read back; a name with an escape
    sequence is refused before anything is written; who closed the round (name and login)
    reads back too."""
    src = paper_round.write_declarations(tmp_path / "effects.json")
    odd = tmp_path / "effects\u200b copy.json"
    shutil.copy(src, odd)
    creator = "lead \U0001F468\u200d\U0001F469"
    with Store(tmp_path / "a.db") as store:
        store.add_annotator("B1", "human")
        store.add_annotator("B2", "human")
        store.new_round("r", load_inputs(odd).select(["rm", "cd", "ls"]), ["B1", "B2"],
                        created_by=creator)
        assert store.round("r").declarations_source == str(odd)
        assert [r.name for r in store.rounds()] == ["r"] and not store.problems
        bad = tmp_path / "effects\x1b[2J.json"
        shutil.copy(src, bad)
        with pytest.raises(AnnotationError, match="declarations file name"):
            store.new_round("r2", load_inputs(bad).select(["rm"]), ["B1"])
        assert not store.round_exists("r2")
        s = store.annotator_session("r", "B1", account="B1")
        for fn in ("rm", "cd", "ls"):
            s.label(fn, fn != "ls", "why")
        s.submit()
        store.close_round("r", by=creator, account="someone")
        assert store.round("r").closed_by == f"{creator} (login someone)"
        assert not store.problems


def test_round_commands_exit_1_when_rows_were_left_out(tmp_path):
    """An annotator row edited in with an escape sequence: round new and round add printed
    its problem line and exited 0. They exit 1 (the round made, the annotator added)."""
    decl = paper_round.write_declarations(tmp_path / "effects.json")
    db = tmp_path / "careful.db"
    with Store(db) as store:
        store.add_annotator("B1", "human")
    con = sqlite3.connect(db)
    con.execute("insert into annotators (name, kind, model, created, account) values "
                "(?, 'human', null, '2026-01-01T00:00:00+00:00', null)", ["X\x1b[31m"])
    con.commit()
    con.close()
    made = invoke("round", "new", "r", "-d", str(decl), "-f", "rm,cd", "-a", "B2",
                  "--by", "lead", "--db", str(db))
    assert made.exit_code == 1, made.output
    assert "problem:" in made.output and "round r" in " ".join(made.output.split())
    added = invoke("round", "add", "r", "-a", "B3", "--by", "lead", "--db", str(db))
    assert added.exit_code == 1, added.output
    assert "B3" in added.output
    with Store(db) as store:
        assert store.round_annotators("r") == ["B2", "B3"]
