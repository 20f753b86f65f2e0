"""Benchmark: one conversation grown to many calls, with a state snapshot after every call.

Growth cases (the model side of one GorillaFileSystem conversation, call by call through
``Environment.execute``, which snapshots after every call):

* ``mkdir``: 20,000 ``mkdir`` calls in one directory;
* ``cp``: a directory copied and moved into itself 92 times (each copy shares the children,
  so the tree, as bfcl's walks and comparisons see it, doubles every time);
* ``echo``: 100 ``echo`` calls writing 990 KB each to one file.

For each it prints, per 1,000 calls (per 10 for the small cases), the seconds those calls
took and the process's resident memory after them; a case stops at its end, when the engine
stops it (its budget), or at this benchmark's own limits (``--max-seconds``, ``--max-mb``,
which keep the old engine from taking the machine down).

``--scored`` also scores each case's conversation end to end (decode, replay both sides,
bfcl's verdict, the effect rules and blame) in a fresh process, as ``careful score`` does,
and prints its time and peak memory (for the 20,000 ``mkdir`` calls the issue's goal is at
most 5 s and 300 MB). The time covers the whole file's scoring; the peak is the scoring
process's high-water mark (VmHWM), loading included.

    python bench/snapshot_bench.py [--calls 20000] [--scored]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONV = "multi_turn_base_1"  # GorillaFileSystem only


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def cases(n_mkdir: int) -> dict[str, tuple[list[tuple[str, dict]], int]]:
    """name -> (calls as (function, arguments), report every)."""
    cp = [("mkdir", {"dir_name": "a"}), ("cd", {"folder": "a"}), ("touch", {"file_name": "f"}),
          ("cd", {"folder": ".."})]
    for i in range(92):
        cp += [("cp", {"source": "a", "destination": f"t{i}"}),
               ("mv", {"source": f"t{i}", "destination": "a"})]
    big = "x" * 990_000
    echo = [("touch", {"file_name": "big"})] + [
        ("echo", {"content": f"{i}{big}", "file_name": "big"}) for i in range(100)]
    return {"mkdir": ([("mkdir", {"dir_name": f"d{i}"}) for i in range(n_mkdir)], 1000),
            "cp": (cp, 2), "echo": (echo, 10)}


def text(name: str, args: dict) -> str:
    return f"{name}({','.join(f'{k}={v!r}' for k, v in args.items())})"


def grow(name: str, calls: list[tuple[str, dict]], every: int, max_s: float,
         max_mb: float) -> None:
    from careful_engine.core import bfcl
    from careful_engine.core.environment import Environment

    env = Environment.for_conversation(bfcl.conversation(CONV), "model", model_name=f"b{name}")
    keep = []  # the records hold every snapshot, as a replay's trace does
    print(f"\n{name}: {len(calls)} calls (rss at start {rss_mb():.0f} MB)")
    print(f"{'calls':>7} {'s/chunk':>9} {'total s':>8} {'rss MB':>8}")
    start = chunk = time.perf_counter()
    stop = None
    for i, (fn, args) in enumerate(calls, 1):
        try:
            keep.append(env.execute(text(fn, args)))
        except Exception as e:  # the engine's budget, or the old engine's own failure
            stop = f"stopped by the engine at call {i}: {type(e).__name__}: {str(e)[:120]}"
            break
        if i % every == 0 or i == len(calls):
            now = time.perf_counter()
            print(f"{i:7d} {now - chunk:9.3f} {now - start:8.2f} {rss_mb():8.0f}", flush=True)
            chunk = now
            if now - start > max_s or rss_mb() > max_mb:
                stop = f"stopped by this benchmark's limits at call {i}"
                break
    print(f"  {stop or 'done'}; {len(keep)} calls kept, {time.perf_counter() - start:.2f} s")
    del keep, env
    gc.collect()


SCORED = """
import json, sys, time
from pathlib import Path
from careful_engine.core import bfcl
from careful_engine.core.runs import ResultFile, load_result_file
from careful_engine.scoring.score import load_effects, score_file
path = Path(sys.argv[1])
effects = load_effects()
handler = bfcl.handler("claude-sonnet-4-5-20250929-FC")
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
loaded = load_result_file(ResultFile(path, "bench", "multi_turn_base", 4))
base = hwm()
t = time.perf_counter()
cs = score_file(loaded, handler, effects=effects)
took = time.perf_counter() - t
r = next(r for r in cs.results if r.id == sys.argv[2])
print(json.dumps({"seconds": took, "peak_mb": hwm(), "peak_before_mb": base,
                  "verdict": r.verdict.error_type, "calls": r.calls}))
"""


def scored(name: str, calls: list[tuple[str, dict]]) -> None:
    from careful_engine.core import bfcl
    from careful_engine.demo import reference as demo

    conv = bfcl.conversation(CONV)
    entry = demo.reference_entry(conv)
    entry["result"][0] = [[{fn: json.dumps(args)} for fn, args in calls]] + entry["result"][0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "BFCL_v4_multi_turn_base_result.json"
        path.write_text(json.dumps(entry) + "\n")
        out = subprocess.run([sys.executable, "-c", SCORED, str(path), CONV], capture_output=True,
                             text=True, timeout=900)
    if out.returncode:
        print(out.stderr[-2000:])
        return
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"scored end to end, {name} ({len(calls)} calls in one conversation, fresh process): "
          f"{res['seconds']:.2f} s, peak RSS {res['peak_mb']:.0f} MB "
          f"({res['peak_before_mb']:.0f} MB before scoring); verdict {res['verdict']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000, help="mkdir calls")
    ap.add_argument("--only", choices=["mkdir", "cp", "echo"], action="append")
    ap.add_argument("--max-seconds", type=float, default=300, help="per growth case")
    ap.add_argument("--max-mb", type=float, default=3000, help="resident memory limit")
    ap.add_argument("--scored", action="store_true", help="also score end to end")
    args = ap.parse_args()
    for name, (calls, every) in cases(args.calls).items():
        if args.only and name not in args.only:
            continue
        grow(name, calls, every, args.max_seconds, args.max_mb)
    if args.scored:
        print()
        for name, (calls, _every) in cases(args.calls).items():
            if not args.only or name in args.only:
                scored(name, calls)
    print(f"\npeak RSS of this process: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
