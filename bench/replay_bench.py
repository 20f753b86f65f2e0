"""Benchmark: bfcl-eval's multi-turn checker against this engine's replay + official verdict.

Both run in this one process on the same decoded trajectories: the 800 references (one step
per reference turn, as bfcl's checker runs them) and every real run found in ../shared/runs
(decoded once beforehand with the same bfcl handler, so only checking is timed). The engine
keeps a state snapshot after every call of both sides. Caches the engine builds (instance
templates, parsed calls, initial snapshots) are cleared before every pass, so each pass is a
cold, single scoring of the data. The cyclic garbage collector is paused during every pass of
either side, as ``careful score`` pauses it while scoring a file. Passes of the two sides alternate; the fastest pass of
each is compared (the usual estimate for CPU-bound code on a shared machine; the median is
printed too).

    python bench/replay_bench.py [--repeat 5] [--shared ../shared]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import shared_runs  # bench/shared_runs.py (a script's folder is on its path)

from careful_engine.core import bfcl, calls, environment, process
from careful_engine.core.decode import decode_entry, reference_trajectory
from careful_engine.core.perf import collector_paused
from careful_engine.core.process import BfclProcess
from careful_engine.core.replay import replay
from careful_engine.core.runs import load_result_file
from careful_engine.scoring.score import discover


def workloads(shared: Path) -> dict[str, list[tuple[bfcl.Conversation, object, str]]]:
    """name -> [(conversation, trajectory, model name)] in bfcl's evaluation order."""
    out = {"references (800)": [
        (c, reference_trajectory(c.id, c.ground_truth), "reference")
        for cat in bfcl.CATEGORIES for c in bfcl.conversations(cat)
    ]}
    runs = shared / "runs"
    if runs.is_dir():
        for run in sorted(p for p in runs.iterdir() if p.is_dir()):
            by_model, _ = discover(run)
            items = []
            for model, files in by_model.items():
                handler = shared_runs.handler(run, model)
                for rf in files:
                    loaded = load_result_file(rf)
                    for entry_id, entry in loaded.entries.items():
                        items.append((bfcl.conversation(entry_id), decode_entry(entry, handler),
                                      model))
            out[f"{run.name} ({len(items)})"] = items
    return out


def run_engine(items) -> None:
    environment.clear_caches()
    calls.clear_caches()
    current = None
    for conv, traj, model in items:  # grouped by model and category, in bfcl's order
        if (model, conv.category) != current:
            current, process = (model, conv.category), BfclProcess()
        replay(conv, traj, model_name=model, process=process, snapshots=True)


_PASS = [0]


def run_bfcl(items) -> None:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    from careful_engine.core.checker import force_terminated, inference_error  # noqa: F401

    process.reset_bfcl_process_state()
    _PASS[0] += 1
    for conv, traj, model in items:
        # bfcl's own pre-checks are two comparisons; the checker is the cost
        if traj.turns is None or len(traj.turns) != len(conv.ground_truth):
            continue
        multi_turn_checker(traj.decoded(), conv.ground_truth, conv.raw, conv.category,
                           f"{model}_{_PASS[0]}")
    process.reset_bfcl_process_state()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = ap.parse_args()
    loads = workloads(args.shared)
    print(f"{'workload':38} {'bfcl checker':>13} {'engine':>10} {'ratio':>7}")
    print("(bfcl's checker skips entries that are inference errors or force-terminated and "
          "stops at the first failing turn; the engine replays every turn of both sides)")
    total_b = total_e = 0.0
    for name, items in loads.items():
        run_engine(items)
        run_bfcl(items)  # warm imports
        tb, te = [], []
        for _ in range(args.repeat):
            with collector_paused():  # as careful score runs; the same for both sides
                t = time.perf_counter()
                run_bfcl(items)
                tb.append(time.perf_counter() - t)
            with collector_paused():
                t = time.perf_counter()
                run_engine(items)
                te.append(time.perf_counter() - t)
        b, e = min(tb), min(te)
        mb, me = statistics.median(tb), statistics.median(te)
        total_b, total_e = total_b + b, total_e + e
        print(f"{name:38} {b:12.3f}s {e:9.3f}s {b / e:6.2f}x   (median {mb / me:.2f}x)")
    print(f"{'all':38} {total_b:12.3f}s {total_e:9.3f}s {total_b / total_e:6.2f}x")
    print("ratio = bfcl-eval checker time / engine replay+verdict time (fastest of "
          f"{args.repeat} passes each; engine with a snapshot after every call of both sides, "
          "cold caches)")


if __name__ == "__main__":
    main()
