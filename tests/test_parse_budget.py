"""A result file's parsed entries take at most the bytes a file is read into
(``runs.MAX_KEPT_BYTES``): the lines past it are problems, the rest is scored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import runs

BUDGET = 32 * 2**20
_load()
REASON = (f"line 3 and the lines after it would take the file's parsed entries past the "
          f"{BUDGET:,} bytes a file is read into; not read, counted as failed")


def _flood(tmp_path: Path) -> Path:
    """The reviewer's file, smaller: 30 entries each holding 60,000 empty lists under an
    unknown key (parsed, about 4 MB each; each estimated at about 15 MB), then a line repeating
    the first id and one with no id."""
    junk = "[" + ",".join(["[]"] * 60_000) + "]"
    lines = [f'{{"id": "multi_turn_base_{i}", "result": [], "junk": {junk}}}' for i in range(30)]
    lines += [lines[0], f'{{"result": [], "junk": {junk}}}']
    path = tmp_path / "run" / "m" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_file_past_the_budget_is_read_in_bounded_memory(tmp_path: Path, monkeypatch) -> None:
    """Read in a process of its own: its peak resident memory grows by less than the file's
    bytes, the budget and some slack (every entry kept would take about 120 MB more)."""
    path = _flood(tmp_path)
    probe = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from careful_engine.core import runs\n"
        f"runs.MAX_KEPT_BYTES = {BUDGET}\n"
        "runs.bfcl.conversations('multi_turn_base')  # (the dataset, read once)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "rf = runs.ResultFile(Path(sys.argv[1]), 'm', 'multi_turn_base', 4)\n"
        "kept = len(runs.load_result_file(rf).entries)\n"
        "print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    kept, grown_kb = map(int, done.stdout.split())
    assert kept == 2
    assert grown_kb * 1024 < path.stat().st_size + BUDGET + 16 * 2**20, grown_kb
    monkeypatch.setattr(runs, "MAX_KEPT_BYTES", BUDGET)
    loaded = runs.load_result_file(runs.ResultFile(path, "m", "multi_turn_base", 4))
    assert list(loaded.entries) == ["multi_turn_base_0", "multi_turn_base_1"]
    refused = [(p.line, p.id, p.message) for p in loaded.problems if p.line]
    assert refused == [(i + 1, f"multi_turn_base_{i}", REASON) for i in range(2, 30)]
    rest = [p.message for p in loaded.problems if p.line is None and p.id is None]
    assert rest == ["2 more lines from line 3 on (no new id of the category) not read: they "
                    f"would take the file's parsed entries past the {BUDGET:,} bytes a file is "
                    "read into"]
    missing = {p.id for p in loaded.problems if p.message.startswith("id missing")}
    assert missing == {f"multi_turn_base_{i}" for i in range(30, 200)}  # not the refused ones


def test_score_reports_the_lines_past_the_budget(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(runs, "MAX_KEPT_BYTES", BUDGET)
    _flood(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["score", str(tmp_path / "run"), "--decoder",
                                   "gpt-4o-2024-11-20-FC", "--out", str(out), "--jobs", "1"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    problems = (out / "problems.txt").read_text()
    assert f"BFCL_v4_multi_turn_base_result.json:3 [multi_turn_base_2]: {REASON}" in problems
    lines = {r["id"]: r for r in map(json.loads, (out / "conversations.jsonl")
                                     .read_text().splitlines())}
    assert len(lines) == 200
    assert lines["multi_turn_base_2"]["official_error_type"] == "careful:missing_entry"
    assert lines["multi_turn_base_0"]["official_error_type"] != "careful:missing_entry"


def test_the_shared_runs_are_read_whole(shared_runs: Path) -> None:
    """Every shared run file is far inside the budget: its entries are its lines, parsed."""
    files, _ = runs.find_result_files(shared_runs)
    assert files
    for rf in files:
        text = rf.path.read_text(errors="surrogateescape")
        assert sum(runs.parsed_bound(line) for _, line in runs.content_lines(text)) \
            < runs.MAX_KEPT_BYTES / 10
        loaded = runs.load_result_file(rf)
        parsed = [json.loads(line) for _, line in runs.content_lines(text)]
        assert list(loaded.entries.values()) == sorted(
            (e for e in parsed if e.get("id") in loaded.entries),
            key=lambda e: runs.bfcl.sort_key(e["id"]))
        assert len(loaded.entries) == len({e.get("id") for e in parsed} & set(loaded.entries))
        assert not any("bytes a file is read into" in p.message for p in loaded.problems)
