"""Benchmark: full effect-aware scoring of a real 200-conversation run against bfcl-eval's
multi-turn checker alone on the same run.

The engine's side does everything: decode every step with the bfcl handler, replay both sides
with a snapshot after every call, bfcl's verdict, every rule and the blame of failed
conversations. bfcl's side is only ``multi_turn_checker`` on trajectories decoded beforehand
(decoding is not timed for it). The cyclic garbage collector is paused during every pass of
either side, as ``careful score`` pauses it. Caches are cleared before every engine pass. Passes
alternate; the fastest of each is compared (the medians too, and the median and quartiles of
the ratios of each round's passes, which a machine whose speed drifts disturbs less).

The reference cache (careful_engine.core.refcache) is measured four ways, each pass alike:
``off`` (every reference replayed live), ``cold`` (an empty cache folder: references are
replayed live, recorded and written during the pass), ``disk`` (warm on disk, loaded and decoded
during the pass, as a new ``careful score`` process does) and ``warm`` (held in this process, as
for the second run of a leaderboard). ``cold`` has a folder of its own, emptied before each of
its passes; ``disk`` and ``warm`` share one that the warm-up passes fill as runs do (TwitterAPI's
guarded references are recorded the second time they are replayed).

    python bench/scoring_bench.py [--run ../shared/runs/xlam-2-8b-fc-r] [--category multi_turn_base]
                                  [--modes off,cold,disk,warm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import shared_runs  # bench/shared_runs.py (a script's folder is on its path)

from careful_engine.core import bfcl, calls, decode, environment, process, refcache
from careful_engine.core.decode import decode_entry
from careful_engine.core.perf import collector_paused
from careful_engine.core.process import BfclProcess
from careful_engine.core.replay import replay
from careful_engine.core.runs import load_result_file
from careful_engine.scoring.blame import blame
from careful_engine.scoring.rules import evaluate
from careful_engine.scoring.score import discover, load_effects


def main() -> None:
    here = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=here / "shared/runs/xlam-2-8b-fc-r")
    ap.add_argument("--category", default="multi_turn_base")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--modes", default="off,cold,disk,warm")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="careful-scoring-bench-"))
    by_model, _ = discover(args.run)
    rf = next((f for files in by_model.values() for f in files if f.category == args.category),
              None)
    if rf is None:
        raise SystemExit(f"{args.run}: no {args.category} result file (see --run, --category)")
    model = rf.model
    loaded = load_result_file(rf)
    handler = shared_runs.handler(args.run, model)
    effects = load_effects()
    entries = list(loaded.entries.values())
    pre = [(bfcl.conversation(e["id"]), decode_entry(e, handler)) for e in entries]

    def prepare(mode: str) -> None:
        """The reference cache as the mode says, before a timed pass."""
        os.environ["CAREFUL_REFCACHE"] = "off" if mode == "off" else "on"
        os.environ["CAREFUL_CACHE_DIR"] = str(tmp / ("cold" if mode == "cold" else "cache"))
        if mode == "cold":
            shutil.rmtree(tmp / "cold", ignore_errors=True)
        if mode in ("cold", "disk"):
            refcache.clear_memory()
        if mode == "warm":  # held and decoded, whichever mode ran before (cold leaves it undecoded)
            refcache.preload([args.category])

    def engine() -> None:
        environment.clear_caches()
        calls.clear_caches()
        decode.clear_caches()  # (the decodes of repeated step texts, kept per handler)
        process = BfclProcess()
        for e in entries:
            conv = bfcl.conversation(e["id"])
            trace = replay(conv, decode_entry(e, handler), model_name=model, process=process)
            evaluate(trace, effects)
            if not trace.verdict.valid:
                blame(trace, effects)
        refcache.flush()  # what was recorded (cold), as careful score writes it

    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    n = [0]

    def checker() -> None:
        process.reset_bfcl_process_state()
        n[0] += 1
        for conv, traj in pre:
            if traj.turns is None or len(traj.turns) != len(conv.ground_truth):
                continue
            multi_turn_checker(traj.decoded(), conv.ground_truth, conv.raw, conv.category,
                               f"{model}_{n[0]}")
        process.reset_bfcl_process_state()

    for mode in modes:  # warm-up of both sides
        prepare(mode)
        engine()
    for _ in range(2):  # the shared folder as two runs leave it
        prepare("disk")
        engine()
    checker()
    tb: list[tuple[float, float]] = []  # (wall, CPU) per pass
    te: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}

    def timed(fn) -> tuple[float, float]:
        with collector_paused():  # as careful score runs; the same for both sides
            w, c = time.perf_counter(), time.process_time()
            fn()
            return time.perf_counter() - w, time.process_time() - c

    for _ in range(args.repeat):
        tb.append(timed(checker))
        for mode in modes:
            prepare(mode)
            te[mode].append(timed(engine))
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = "load unknown"
    print(f"run {args.run.name} / {model} / {args.category}: {len(entries)} conversations "
          f"({load}; CPU time is this process's, less disturbed by other load than wall)")
    for k, clock in enumerate(("wall", "CPU")):
        b = min(t[k] for t in tb)
        bm = statistics.median(t[k] for t in tb)
        print(f"[{clock}] bfcl-eval checker alone (pre-decoded): {b:.3f}s")
        for mode in modes:
            e = min(t[k] for t in te[mode])
            em = statistics.median(t[k] for t in te[mode])
            # each pass against the checker pass of its own round (a drifting machine slows
            # both alike): the median of those ratios, and their quartiles
            q = statistics.quantiles([c[k] / t[k] for c, t in zip(tb, te[mode], strict=True)],
                                     n=4) if args.repeat > 1 else [b / e] * 3
            print(f"[{clock}] engine, reference cache {mode:<4} (decode + replay + verdict + "
                  f"rules + blame): {e:.3f}s  ratio checker / full scoring {b / e:.2f}x "
                  f"(median {bm / em:.2f}x; per round {q[1]:.2f}x, quartiles {q[0]:.2f}-"
                  f"{q[2]:.2f}x; {args.repeat} passes)")


if __name__ == "__main__":
    main()
