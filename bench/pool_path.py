"""Benchmark aid: the CPU critical path of one ``careful`` command with worker processes.

On a shared or virtual machine the wall time of a parallel command says more about the other
processes than about the command; CPU seconds do not. This runs one ``careful`` command in
this process (``fork`` workers) and prints, in CPU seconds, what the parent spends before
the pool, during it and after, and what each worker spends, then the wall time the command
would take on two otherwise idle cores:

    before + max(busiest worker, (all workers + parent during) / 2) + after

(plus the interpreter's start, about 0.03 s). The command's own output is discarded.

    python bench/pool_path.py leaderboard ../shared/runs/*/ --decoder gpt-4o-2024-11-20-FC \
        -o /tmp/lb --jobs 2
    python bench/pool_path.py score ../shared/runs/xlam-2-8b-fc-r -o /tmp/s --jobs 2
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


_LOG: list[str] = []  # the file the workers append their CPU per task to
_WORK: list = []  # careful_engine.core.parallel's own _work


def _timed_work(fn, task):  # in a worker (module level: the pool sends it by name)
    c = time.process_time()
    try:
        return _WORK[0](fn, task)
    finally:
        with open(_LOG[0], "a") as f:
            f.write(f"{os.getpid()} {time.process_time() - c:.4f}\n")


def main() -> None:
    from e2e_bench import compile_project  # this folder: the script's own

    print(compile_project())  # as installed: no module compiled while timed
    start = _cpu()
    import careful_cli
    from careful_engine.core import parallel

    log = tempfile.NamedTemporaryFile("w", suffix=".pool", delete=False)  # noqa: SIM115
    log.close()
    marks: dict[str, float] = {}
    _LOG[:], _WORK[:] = [log.name], [parallel._work]
    run_ordered = parallel.run_ordered

    def timed_run(*a, **kw):
        marks.setdefault("pool", _cpu())
        try:
            return run_ordered(*a, **kw)
        finally:
            marks["pool_end"] = _cpu()

    parallel._work, parallel.run_ordered = _timed_work, timed_run
    sys.argv = ["careful", *sys.argv[1:]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            careful_cli.main()
        except SystemExit:
            pass
    end = _cpu()
    per: dict[str, float] = {}
    with open(log.name) as f:
        for line in f:
            pid, cpu = line.split()
            per[pid] = per.get(pid, 0.0) + float(cpu)
    os.unlink(log.name)
    if not per:
        print(f"no worker process ran: CPU {end - start:.2f} s (on an idle core, its wall)")
        return
    before, during = marks["pool"] - start, marks["pool_end"] - marks["pool"]
    after = end - marks["pool_end"]
    children = os.times().children_user + os.times().children_system
    phase = max(max(per.values(), default=0.0), (children + during) / 2)
    print(f"parent CPU: before the pool {before:.2f} s, during {during:.2f} s, after "
          f"{after:.2f} s; workers {children:.2f} s in all, per worker "
          f"{', '.join(f'{v:.2f}' for v in per.values())} s (tasks)")
    print(f"estimated wall on 2 idle cores: {before + phase + after:.2f} s "
          f"(parallel phase {phase:.2f} s); the serial run's CPU is its wall there")


if __name__ == "__main__":
    main()
