"""Every reader that keeps a file's lines keeps them within a parse budget
(``runs.MAX_KEPT_BYTES``, :class:`~careful_engine.core.runs.ParseBudget`): the lines past it are
one problem in the result reader's words, the lines before it are read."""

from __future__ import annotations

import json
from pathlib import Path

from careful_engine import browse
from careful_engine.analysis import bfcl_scores
from careful_engine.core import runs
from careful_engine.generation import files, results, spend


def _refused(line: int, limit: int) -> str:
    return (f"line {line} and the lines after it would take the file's parsed entries past the "
            f"{limit:,} bytes a file is read into; not read")


def _budget_for(monkeypatch, lines: list[str], kept: int) -> int:
    """A budget that holds the first ``kept`` lines and not one more."""
    limit = sum(runs.parsed_bound(x) for x in lines[:kept])
    monkeypatch.setattr(runs, "MAX_KEPT_BYTES", limit)
    return limit


def test_score_lines_past_the_budget_are_one_problem(tmp_path: Path, monkeypatch) -> None:
    lines = [json.dumps({"accuracy": 0.5, "correct_count": 1, "total_count": 4})]
    lines += [json.dumps({"id": f"multi_turn_base_{i}", "valid": False,
                          "error": {"error_type": "x", "error_message": ["m" * 50]}})
              for i in range(3)]
    path = tmp_path / "BFCL_v4_multi_turn_base_score.json"
    path.write_text("\n".join(lines) + "\n")
    limit = _budget_for(monkeypatch, lines, 3)
    read = bfcl_scores.read_score_lines(path)
    assert read.total == 4 and list(read.failed) == ["multi_turn_base_0", "multi_turn_base_1"]
    assert [str(p) for p in read.problems] == [
        f"{path}:4 [multi_turn_base_2]: {_refused(4, limit)}"]


def test_records_past_the_budget_are_one_problem(tmp_path: Path, monkeypatch) -> None:
    lines = [json.dumps({"request": f"r{i}", "status": "ok", "conservative_usd": 1.0})
             for i in range(4)]
    ledger = tmp_path / "spend.jsonl"
    ledger.write_text("\n".join(lines) + "\n")
    limit = _budget_for(monkeypatch, lines, 2)
    problems: list = []
    skipped: list = []
    assert [r["request"] for r in files.read_records(ledger, skipped, problems)] == ["r0", "r1"]
    assert not skipped
    assert [str(p) for p in problems] == [f"{ledger}:3: {_refused(3, limit)}"]
    summary = spend.ledger_summary(ledger)  # the ledger's reader passes it on
    assert summary.requests["answered"] == 2
    assert [str(p) for p in summary.problems] == [f"{ledger}:3: {_refused(3, limit)}"]


def test_result_entries_past_the_budget_are_not_sorted_away(tmp_path: Path,
                                                            monkeypatch) -> None:
    """The generation results reader says what it did not read; sorting a file it could not
    read whole leaves the file as it is (rewritten, its unread lines would be lost)."""
    writer = results.ResultWriter(tmp_path / "run", "m")
    path = results.result_path(tmp_path / "run", "m", "multi_turn_base")
    path.parent.mkdir(parents=True)
    lines = [json.dumps({"id": f"multi_turn_base_{i}", "result": []}) for i in (3, 2, 1)]
    path.write_text("\n".join(lines) + "\n")
    before = path.read_bytes()
    limit = _budget_for(monkeypatch, lines, 2)
    problems: list = []
    entries = results.read_entries(path, problems)
    assert [e["id"] for e in entries] == ["multi_turn_base_3", "multi_turn_base_2"]
    assert [str(p) for p in problems] == [
        f"{path}:3 [multi_turn_base_1]: {_refused(3, limit)}"]
    writer.sort("multi_turn_base")
    assert path.read_bytes() == before


def test_workbench_score_rows_past_the_budget_are_one_problem(tmp_path: Path, runs_template,
                                                              monkeypatch) -> None:
    (source,) = [p for p in (runs_template / "beta").rglob("conversations.jsonl")]
    lines = [x for x in source.read_text().split("\n") if x.strip()]
    model = json.loads(lines[0])["model"]
    assert len(lines) >= 3
    path = tmp_path / "conversations.jsonl"
    path.write_text("\n".join(lines) + "\n")
    everything = browse.read_scores(path, model, [])
    limit = _budget_for(monkeypatch, lines, 2)
    problems: list = []
    rows = browse.read_scores(path, model, problems)
    first, second, third = (json.loads(x)["id"] for x in lines[:3])
    assert list(rows) == [first, second] and len(everything) == len(lines)
    assert [str(p) for p in problems] == [f"{path}:3 [{third}]: {_refused(3, limit)}"]
