"""Every written table of effect-aware figures (safe, strict, rule counts) states the boundary,
question detector and safe rule it was made with: ``careful score``, ``leaderboard`` and
``compare`` under settings other than the default. Their files named none (only the terminal,
conversations.jsonl and the sensitivity files did), so two folders made under different
boundaries could not be told apart."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.present.report import SETTINGS_COLUMNS
from careful_engine.scoring.settings import KEY
from tests.test_numbers_agree import reference_run
from tests.workbench_support import IDS, careless_entry, write_run

_load()
runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run of the references and a careless one under the confirmation protocol (its
    collateral rm and its scripted-user answer: rule counts, strict and confirmation)."""
    root = tmp_path_factory.mktemp("runs")
    return (reference_run(root / "alpha", IDS),
            write_run(root / "beta", "m", [careless_entry(i) for i in IDS]))


def _invoke(*args: str) -> None:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code in (0, 1), res.output  # 1: the category's other ids are missing


def _settings_stated(out: Path, names: list[str], wanted: dict) -> None:
    """Each table ``names`` in ``out`` states ``wanted`` (a ``scored_with`` less the decoder):
    the JSON as ``scored_with``, the CSV in its settings columns on every row, the Markdown in
    a line."""
    rule = wanted["safe_rule"]
    cells = [wanted["boundary"], wanted["detector"],
             f"collateral {rule['collateral']}, duplicates {rule['duplicates']}"]
    for name in names:
        assert json.loads((out / f"{name}.json").read_text())[KEY] == wanted, name
        rows = list(csv.DictReader((out / f"{name}.csv").read_text().splitlines()))
        assert rows, name
        assert all([r[c] for c in SETTINGS_COLUMNS] == cells for r in rows), name
        assert (f"scored with boundary {cells[0]}, detector {cells[1]}, safe rule: {cells[2]}"
                in (out / f"{name}.md").read_text()), name


def _wanted(score_out: Path) -> dict:
    """What conversations.jsonl says the run was scored with, less the decoder."""
    line = json.loads((score_out / "conversations.jsonl").read_text().splitlines()[0])
    assert line[KEY]["boundary"] != "paper-final" and line[KEY]["detector"] != "strict"
    return {k: v for k, v in line[KEY].items() if k != "decoder"}


def test_score_tables_state_their_settings(runs, tmp_path: Path) -> None:
    out = tmp_path / "score"
    _invoke("score", runs[1], "--out", out, "--boundary", "paper-A1", "--detector", "loose",
            "--collateral", "effective")
    wanted = _wanted(out)
    assert wanted["safe_rule"] == {"collateral": "effective", "duplicates": "all"}
    _settings_stated(out, ["accuracy", "rules", "confirmation"], wanted)

    # without the effect rules nothing depends on a setting, and no table claims one
    plain = tmp_path / "plain"
    _invoke("score", runs[1], "--out", plain, "--no-effects")
    assert KEY not in json.loads((plain / "accuracy.json").read_text())
    header = (plain / "accuracy.csv").read_text().splitlines()[0].split(",")
    assert not set(SETTINGS_COLUMNS) & set(header)


def test_leaderboard_and_compare_tables_state_their_settings(runs, tmp_path: Path) -> None:
    args = ["--boundary", "paper-A3", "--detector", "last"]
    _invoke("score", runs[0], "--out", tmp_path / "score", *args)
    wanted = _wanted(tmp_path / "score")

    _invoke("leaderboard", *runs, "--out", tmp_path / "lb", *args)
    _settings_stated(tmp_path / "lb", ["leaderboard", "leaderboard_categories",
                                       "leaderboard_rho", "leaderboard_rules"], wanted)

    _invoke("compare", *runs, "--out", tmp_path / "cmp", *args)
    _settings_stated(tmp_path / "cmp", ["compare_safe", "compare_pairs"], wanted)
    # BFCL's verdict depends on no boundary, detector or rule: its table claims none
    assert KEY not in json.loads((tmp_path / "cmp" / "compare_bfcl.json").read_text())


def test_compare_files_say_which_run_is_a_and_which_b(runs, tmp_path: Path) -> None:
    """A CSV has no title, where the Markdown and JSON say ``A = …, B = …``: every row of
    compare's CSVs names runs A and B (columns ``run A``, ``run B`` before the settings), the
    JSON as ``context``; swapping the runs swaps them."""
    for order in (runs, runs[::-1]):
        out = tmp_path / order[0].name
        _invoke("compare", *order, "--out", out, "-j1")
        names = ["compare_bfcl", "compare_safe", "compare_pairs"]
        for name in names:
            doc = json.loads((out / f"{name}.json").read_text())
            a, b = doc["context"]["run A"], doc["context"]["run B"]
            assert f"A = {a}, B = {b}" in doc["title"], name
            assert order[0].name in a and order[1].name in b, (name, a, b)
            lines = (out / f"{name}.csv").read_text().splitlines()
            header = next(csv.reader(lines[:1]))
            assert header.index("run B") == header.index("run A") + 1, name
            assert not set(SETTINGS_COLUMNS) & set(header[:header.index("run A")]), name
            rows = list(csv.DictReader(lines))
            assert rows and all((r["run A"], r["run B"]) == (a, b) for r in rows), name
