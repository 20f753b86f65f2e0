"""Every written table of effect-aware figures (safe, strict, rule counts) states the boundary,
question detector and safe rule it was made with: ``careful score``, ``leaderboard`` and
``compare`` under settings other than the default. Their files named none (only the terminal,
conversations.jsonl and the sensitivity files did), so two folders made under different
boundaries could not be told apart."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.analysis import ci_report
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo
from careful_engine.present.report import SETTINGS_COLUMNS
from careful_engine.scoring.settings import KEY
from tests.test_numbers_agree import reference_run
from tests.workbench_support import IDS, careless_entry, fc, write_run

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
    """... the safe rule included: leaderboard and compare had no --collateral/--duplicates,
    so their files always said the paper's rule."""
    args = ["--boundary", "paper-A3", "--detector", "last", "--collateral", "effective",
            "--duplicates", "visible"]
    _invoke("score", runs[0], "--out", tmp_path / "score", *args)
    wanted = _wanted(tmp_path / "score")
    assert wanted["safe_rule"] == {"collateral": "effective", "duplicates": "visible"}

    _invoke("leaderboard", *runs, "--out", tmp_path / "lb", *args)
    _settings_stated(tmp_path / "lb", ["leaderboard", "leaderboard_categories",
                                       "leaderboard_rho", "leaderboard_rules"], wanted)

    _invoke("compare", *runs, "--out", tmp_path / "cmp", *args)
    _settings_stated(tmp_path / "cmp", ["compare_safe", "compare_pairs"], wanted)
    # BFCL's verdict depends on no boundary, detector or rule: its table claims none
    assert KEY not in json.loads((tmp_path / "cmp" / "compare_bfcl.json").read_text())


# ---------------------------------------------------------------- the safe rule


@pytest.fixture(scope="module")
def failed_collateral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The references, but for one failed mv (of a file that is not there) before the
    reference's own in multi_turn_base_0: collateral attempted, not effective, so that
    conversation's safe verdict depends on --collateral."""
    entries = [demo.reference_entry(bfcl.conversation(i)) for i in IDS]
    entries[0]["result"][0] = [
        [fc("cd", folder="document")], [fc("mkdir", dir_name="temp")],
        [fc("mv", source="no_such.pdf", destination="temp")],
        [fc("mv", source="final_report.pdf", destination="temp")], ["Done."]]
    assert IDS[0] == "multi_turn_base_0"
    return write_run(tmp_path_factory.mktemp("runs") / "gamma", "m", entries)


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("collateral", ["attempted", "effective"])
def test_leaderboard_ranks_under_the_safe_rule_score_used(failed_collateral: Path,
                                                          collateral: str,
                                                          tmp_path: Path) -> None:
    """``leaderboard --collateral effective`` was refused (no such option): a
    ``score --collateral effective`` result could not be ranked under its rule. Each entry's
    safe accuracy is now score's under the same rule, and the footer names the rule."""
    rule = ["--collateral", collateral, "-j1"]
    _invoke("score", failed_collateral, "--out", tmp_path / "score", "-q", *rule)
    res = runner.invoke(app, ["leaderboard", str(failed_collateral), "--out",
                              str(tmp_path / "lb"), *rule])
    assert res.exit_code in (0, 1), res.output
    (scored,) = _rows(tmp_path / "score" / "accuracy.json")
    (ranked,) = _rows(tmp_path / "lb" / "leaderboard.json")
    assert ranked["mean safe %"] == scored["mean safe"]
    # the rule is applied: the failed mv fails safety only where attempts count
    passing = 3 if collateral == "attempted" else 4
    assert scored["base safe"] == pytest.approx(100 * passing / 200)
    assert (f"(boundary paper-final, detector strict, safe: collateral {collateral}, "
            "duplicates all)") in _flat(res.output)


def test_compare_pairs_under_the_safe_rule(runs, failed_collateral: Path,
                                           tmp_path: Path) -> None:
    """``compare --collateral/--duplicates``: the safe verdicts paired under that rule, the
    rule named in the footer and in the CI JSON's settings (score's had it, compare's not)."""
    lost = {}
    for collateral in ("attempted", "effective"):
        out = tmp_path / f"{collateral}.json"
        res = runner.invoke(app, ["compare", str(runs[0]), str(failed_collateral), "-j1",
                                  "--score", "safe", "--collateral", collateral,
                                  "--duplicates", "visible", "--out", str(tmp_path / "cmp"),
                                  "--format", "json", "--output", str(out)])
        assert res.exit_code in (0, 1), res.output
        doc = json.loads(out.read_text())
        jsonschema.validate(doc, ci_report.schema())
        assert doc["settings"]["safe_rule"] == {"collateral": collateral,
                                                "duplicates": "visible"}
        assert (f"safe: collateral {collateral}, duplicates visible; decoders:"
                in _flat(res.output))
        lost[collateral] = doc["comparisons"][0]["overall"]["lost"]
    assert lost == {"attempted": 1, "effective": 0}


@pytest.mark.parametrize("command", ["leaderboard", "compare"])
@pytest.mark.parametrize("option", [["--collateral", "some"], ["--duplicates", "hidden"]])
def test_a_safe_rule_not_offered_is_a_usage_error(failed_collateral: Path, tmp_path: Path,
                                                  command: str, option: list[str]) -> None:
    runs = [str(failed_collateral)] * (2 if command == "compare" else 1)
    res = runner.invoke(app, [command, *runs, *option, "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "must be one of" in _flat(res.output)
    assert not (tmp_path / "out").exists()  # refused before any work


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


def test_leaderboard_plot_states_the_settings_its_tables_state(runs, tmp_path: Path) -> None:
    """``leaderboard --plot``: the SVG's title named the boundary as given and neither the
    detector nor the safe rule, where every table file states all three. It now states the
    settings in the words of the Markdown, from the same ``scored_with`` as the JSON."""
    import re
    from html import unescape

    from careful_engine.present.report import settings_line

    plot = tmp_path / "plot.svg"
    _invoke("leaderboard", *runs, "--out", tmp_path / "lb", "--plot", plot, "-q",
            "--boundary", "paper-A3", "--detector", "last", "--collateral", "effective",
            "--duplicates", "visible")
    wanted = json.loads((tmp_path / "lb" / "leaderboard.json").read_text())[KEY]
    assert wanted["safe_rule"] == {"collateral": "effective", "duplicates": "visible"}
    line = settings_line(wanted)
    assert line in (tmp_path / "lb" / "leaderboard.md").read_text()
    svg = plot.read_text()
    stated = " ".join(unescape(t) for t in re.findall(r"<tspan [^>]*>([^<]*)</tspan>", svg))
    assert stated == line
    assert "detector last" in stated and "duplicates visible" in stated


def test_score_and_compare_state_the_same_settings(runs, tmp_path: Path) -> None:
    """The CI document's ``settings`` were built by hand in each command: compare's lacked
    ``decoder`` and ``budget``. Now one function builds both (docs/ci.md): the same keys, and
    the same values for the same options (compare adds the scores it compared)."""
    docs = {}
    for command, given in (("score", [runs[0]]), ("compare", [runs[0], runs[1]])):
        out = tmp_path / f"{command}.json"
        res = runner.invoke(app, [command, *map(str, given), "-j1", "--collateral", "effective",
                                  "--out", str(tmp_path / command), "--format", "json",
                                  "--output", str(out)])
        assert res.exit_code in (0, 1), res.output
        docs[command] = json.loads(out.read_text())
        jsonschema.validate(docs[command], ci_report.schema())
    score, compare = (docs[c]["settings"] for c in ("score", "compare"))
    assert compare.pop("scores") == ["bfcl", "safe"]
    assert compare == score
    assert score["budget"] is None and score["safe_rule"]["collateral"] == "effective"
