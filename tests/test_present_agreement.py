"""Agreement and the reveal log as both front ends show them (careful_engine.present.agreement):
one rounding rule, one set of columns, one reveal-log line, one fallback for a round without
writes, one default boundary name."""

from __future__ import annotations

import inspect
import math

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.signals import load_inputs
from careful_engine.annotation.store import Store
from careful_engine.present.agreement import (
    LOG_CHARS,
    PAIR_COLUMNS,
    agreement_tables,
    reveal_lines,
    statistic,
)
from tests.fakes import paper_round

_load()  # every command on `careful`


@pytest.fixture
def decl(tmp_path):
    return paper_round.write_declarations(tmp_path / "effects.json")


def closed_round(tmp_path, decl, functions, labels):
    """A round over ``functions`` labelled by alice and bob (``labels``: who -> yes set),
    both submitted; the store's path."""
    path = tmp_path / "careful.db"
    with Store(path) as store:
        store.new_round_with_roster("r", load_inputs(decl).select(functions), ["alice", "bob"],
                                    created_by="lead")
        for who, yes in labels.items():
            session = store.annotator_session("r", who, account=who)
            for fn in functions:
                session.label(fn, fn in yes, "because")
            session.submit()
    return path


def test_statistics_round_half_up_as_every_figure():
    """0.0625 is 0.063 (before: f"{x:.3f}" gave 0.062, rounding half to even)."""
    assert statistic(0.0625) == "0.063" and statistic(0.3125) == "0.313"
    assert statistic(math.nan) == statistic(None) == "–" and statistic(1.0) == "1.000"


def test_the_tables_of_a_report(tmp_path, decl):
    path = closed_round(tmp_path, decl, ["rm", "cd", "mv", "ls"],
                        {"alice": {"rm", "mv"}, "bob": {"rm"}})
    with Store(path) as store:
        report = store.adjudication_session("r", "lead").agreement("all")
    tables = agreement_tables(report)
    assert tables.title == "4 functions, 3/4 unanimous"
    assert tables.pairs == (("alice–bob", "3/4", "0.750", statistic(report.pairs[0].kappa)),)
    assert tables.pair_cells(("pair", "Cohen's κ")) == [("alice–bob", tables.pairs[0][3])]
    assert dict(tables.overall)["destructive labels"] == "alice 2, bob 1"
    result = CliRunner().invoke(app, ["agree", "-r", "r", "--db", str(path), "--subset", "all"],
                                env={"COLUMNS": "250", "USER": "lead"})
    assert result.exit_code == 0, result.output
    assert all(col in result.output for col in PAIR_COLUMNS)
    assert all(cell in result.output for cell in tables.pairs[0])


def test_reveal_lines():
    """The last overrides and other openings asked for, in time order, each part cut and its
    control characters escaped."""
    reveals = [{"who": "lead", "what": None, "override": f"why {i}",
                "created": f"2026-01-01T00:00:{i:02d}+00:00"} for i in range(30)]
    reveals += [{"who": "bob\x1b[2J", "what": "alice", "override": None,
                 "created": f"2026-01-01T00:01:{i:02d}+00:00"} for i in range(10)]
    reveals.append({"who": "x" * 1000, "what": None, "override": "y" * 10_000,
                    "created": "2026-01-01T00:02:00+00:00"})
    lines = reveal_lines(reveals, 20, 5)
    assert [line.override for line in lines] == [True] * 19 + [False] * 5 + [True]
    assert lines[0].text == "override by lead at 2026-01-01T00:00:11, all labels: why 11"
    assert lines[19].text == "opened by bob\\x1b[2J at 2026-01-01T00:01:05, alice"
    assert "(10,000 characters)" in lines[-1].text and len(lines[-1].text) < 3 * LOG_CHARS
    assert [line.text for line in reveal_lines(reveals, 2)] == [
        "override by lead at 2026-01-01T00:00:29, all labels: why 29", lines[-1].text]


def test_subsets_and_the_default_boundary_name(tmp_path, decl):
    """A round without writes falls back to all functions."""
    path = closed_round(tmp_path, decl, ["ls", "cat"], {"alice": {"ls"}, "bob": set()})
    with Store(path) as store:
        session = store.adjudication_session("r", "lead")
        assert not session.declares_writes()
        assert session.subsets("both") == session.subsets("writes") == ["all"]
        assert session.default_boundary_name("annotator:alice") == "r-annotator-alice"
    (tmp_path / "w").mkdir()
    path = closed_round(tmp_path / "w", decl, ["rm", "ls"], {"alice": {"rm"}, "bob": set()})
    with Store(path) as store:
        session = store.adjudication_session("r", "lead")
        assert session.subsets("both") == ["writes", "all"] and session.subsets("all") == ["all"]


def test_both_front_ends_call_them():
    from careful_cli import annotation as cli
    from workbench.screens import agreement as screen

    for module in (cli, screen):
        source = inspect.getsource(module)
        for name in ("agreement_tables", "reveal_lines", ".subsets(", "default_boundary_name"):
            assert name in source, (module.__name__, name)
        assert ":.3f" not in source and "replace(':', '-')" not in source
