"""Hostile result files: every command that reads them, and every bfcl decoder, under the guard.

Each payload of tests/guard.py's corpus (imports, builtins, dunder chains, attribute chains,
BinOp/Call/Lambda/comprehension payloads in arguments, size bombs, payloads split across
steps) is written into a result entry in its format, in a model folder whose registered
decoder reads that format. The commands run in this process under the audit-hook guard: any
exec/compile of model text, process, import from model text, file open outside the test folder
or non-loopback connection fails the test, even if the engine swallowed the hook's exception,
and so does the canary file appearing.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.core.decode import decode_entry, decode_step
from careful_engine.core.trajectory import Outcome

from .guard import FORMATS, guarded, hostile_payloads, new_canary, result_entry

_load()
runner = CliRunner()

FOLDERS = {  # format -> a model folder whose registered decoder reads it
    "prompting": "Qwen_Qwen3-8B",
    "fc": "claude-sonnet-4-5-20250929-FC",
    "qwen_fc_text": "Qwen_Qwen3-8B-FC",
    "llama_3_1_text": "meta-llama_Llama-3.1-8B-Instruct-FC",
}
COMMANDS = {  # command -> its invocations on the hostile run
    "score": lambda run, out: [["score", str(run), "--out", str(out)]],
    "audit decode": lambda run, out: [["audit", "decode", str(run), "--out", str(out)]],
    "leaderboard": lambda run, out: [["leaderboard", str(run), "--out", str(out)]],
    "provenance": lambda run, out: [["provenance", str(run), "--out", str(out / "p.json")]],
    "sensitivity": lambda run, out: [["sensitivity", str(run), "--out", str(out)]],
    "declare": lambda run, out: [["declare", "--runs", str(run), "--out",
                                  str(out / "effects.json"), "-q"]],
    "compare": lambda run, out: [["compare", str(run), str(run), "--model-a", m, "--model-b", m,
                                  "--out", str(out / m)] for m in FOLDERS.values()],
}


def _write_run(root: Path, canary: Path) -> Counter:
    """One model folder per format; payload i in the i-th conversation (all categories), plus
    entries whose turns are the payload text itself (bfcl iterates a string turn)."""
    counts: Counter = Counter()
    convs = [c for cat in bfcl.CATEGORIES for c in bfcl.conversations(cat)]
    for fmt, folder in FOLDERS.items():
        payloads = hostile_payloads(canary, (fmt,))
        by_cat: dict[str, list[str]] = {}
        for conv, p in zip(convs, payloads, strict=False):
            entry = result_entry(conv.id, p, len(conv.ground_truth))
            by_cat.setdefault(conv.category, []).append(json.dumps(entry))
            counts[fmt] += 1
        for conv, p in zip(convs[len(payloads):], payloads[:20], strict=False):
            text = p.steps[0] if isinstance(p.steps[0], str) else json.dumps(p.steps[0])
            entry = {"id": conv.id, "result": [text] + [[] for _ in conv.ground_truth[1:]]}
            by_cat.setdefault(conv.category, []).append(json.dumps(entry))
            counts[fmt + " (turn as a string)"] += 1
        for cat, lines in by_cat.items():
            path = root / folder / "multi_turn" / f"BFCL_v4_{cat}_result.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
    return counts


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Counter]:
    root = tmp_path_factory.mktemp("hostile")
    canary = new_canary()
    counts = _write_run(root / "run", canary)
    return root / "run", canary, counts


@pytest.mark.parametrize("command", list(COMMANDS))
def test_commands_run_no_model_text(command: str, hostile_run, tmp_path: Path) -> None:
    run, canary, counts = hostile_run
    out = tmp_path / "out"
    with guarded(tmp_path, canary=canary, read=(run,)):
        results = [runner.invoke(app, args) for args in COMMANDS[command](run, out)]
    for res in results:
        assert res.exit_code in (0, 1), res.output[-2000:]
        assert "Traceback" not in res.output
    print(f"\n{command}: " + ", ".join(f"{n} {fmt}" for fmt, n in counts.items()))
    assert all(counts[f] >= 100 for f in ("prompting", "fc"))


def test_the_issue_example_creates_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run" / "Qwen_Qwen3-8B"
    target = new_canary()
    line = {"id": "multi_turn_base_0",
            "result": [[f"[cd(folder=__import__('os').system('touch {target}')+1)]"]]}
    run.mkdir(parents=True)
    (run / "BFCL_v4_multi_turn_base_result.json").write_text(json.dumps(line) + "\n")
    with guarded(tmp_path, canary=target):
        res = runner.invoke(app, ["score", str(tmp_path / "run"), "--out", str(tmp_path / "o")])
    assert res.exit_code in (0, 1) and "Traceback" not in res.output
    step = decode_entry(line, bfcl.handler("Qwen/Qwen3-8B")).turns[0][0]
    assert step.outcome is Outcome.DECODE_ERROR
    assert "refused: Call `__import__('os')" in (step.error or "")


def test_every_decode_implementation_refuses_every_payload(tmp_path: Path) -> None:
    """All payloads, in all formats, through one handler of every distinct decoder."""
    reps: dict[tuple, str] = {}
    for key, entry in bfcl.registry().items():
        cls = type(bfcl.handler(key))
        reps.setdefault((cls.decode_execute, entry.is_fc_model), key)
    canary = new_canary()
    payloads = hostile_payloads(canary, FORMATS)
    outcomes: Counter = Counter()
    with guarded(tmp_path, canary=canary):
        for key in reps.values():
            h = bfcl.handler(key)
            for p in payloads:
                for step in p.steps:
                    outcomes[decode_step(h, step).outcome.value] += 1
    print(f"\n{len(reps)} decode implementations x {len(payloads)} payloads: {dict(outcomes)}")
    assert len(reps) >= 30 and sum(outcomes.values()) >= 30 * len(payloads)
