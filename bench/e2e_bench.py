"""Benchmark: the user's comparison, as whole processes in one run.

1. ``careful score`` against ``bfcl evaluate`` (bfcl-eval's own CLI) on the same 600-conversation
   run (default ../shared/runs/xlam-2-8b-fc-r), copied into a temporary folder in the layout
   ``bfcl evaluate`` reads (``result/<model>/multi_turn/BFCL_v4_<category>_result.json``; V3 names
   renamed). ``careful score`` is timed with a cold reference cache (an empty cache folder), a
   warm one (the same folder again) and none (``CAREFUL_REFCACHE=off``), at its default
   ``--jobs`` (one worker per core) and ``--jobs 1``.
2. ``careful leaderboard`` over every run in ../shared/runs, ``--jobs 1`` against ``--jobs 2``
   (warm cache).

Wall time (and the peak resident memory of the process tree, from ``wait4``) of each process,
repeated ``--repeat`` times in alternation; the fastest of each is compared (median shown too).
On a shared or virtual machine the parallel wall figures follow the other processes' load:
``bench/pool_path.py`` gives the CPU critical path of one command and the wall it implies on
idle cores.

``bfcl evaluate`` needs more than careful's lean environment may hold (every vendor SDK its CLI
imports). If ``bfcl`` in this environment cannot start, the benchmark builds its own environment
under ``~/.cache/careful/bench-venv`` (``$CAREFUL_CACHE_DIR/bench-venv``): bfcl-eval installed
with ``--no-deps``, then its declared dependencies except the torch stack
(sentence-transformers, faiss-cpu, torch, transformers; only the memory_vector category uses
them), plus ``soundfile``, which qwen-agent imports without declaring; it checks that torch is
absent.

    python bench/e2e_bench.py [--run ../shared/runs/xlam-2-8b-fc-r] [--runs ../shared/runs]
                              [--repeat 3] [--skip-bfcl] [--skip-leaderboard]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
FC = "gpt-4o-2024-11-20-FC"
UNREGISTERED = {"openai_gpt-oss-120b": FC, "glyphh-ada-1.1": FC,
                "deepseek-ai_DeepSeek-R1-0528": FC}
TORCH_STACK = {"sentence-transformers", "faiss-cpu", "torch", "transformers"}
RESULT = re.compile(r"BFCL_v[34]_(multi_turn_[a-z_]+?)_result\.json$")


def _careful() -> list[str]:
    exe = Path(sys.executable).with_name("careful")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "careful_cli"]


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds (user + system, with waited-for children), peak RSS in MB of
    the process and its waited-for children, exit code)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        print(f"  ! {' '.join(cmd[:3])} ... exited {proc.returncode}: {err[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


# ---------------------------------------------------------------- bfcl's own environment
def _bfcl_works(python: Path) -> bool:
    probe = subprocess.run([str(python), "-c", "import bfcl_eval.__main__"],
                           capture_output=True, env={**os.environ, "BFCL_PROJECT_ROOT":
                                                     tempfile.gettempdir()}, timeout=300)
    return probe.returncode == 0


def _bench_venv() -> Path:
    root = Path(os.environ.get("CAREFUL_CACHE_DIR") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "careful")
    venv = root / "bench-venv"
    py = venv / "bin" / "python"
    if py.exists() and _bfcl_works(py):
        return py
    print(f"building {venv} for `bfcl evaluate` (bfcl-eval --no-deps, no torch stack) ...")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    version = metadata.version("bfcl-eval")
    deps = []
    for req in metadata.requires("bfcl-eval") or []:
        if "extra ==" in req:
            continue
        name = re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0]
        if name.lower() not in TORCH_STACK:
            deps.append(req.split(";")[0].strip())
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", f"bfcl-eval=={version}"], check=True)
    subprocess.run([*pip, *deps, "soundfile"], check=True)
    if subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode == 0:
        raise SystemExit(f"{venv} holds torch: the benchmark's environment must not")
    if not _bfcl_works(py):
        raise SystemExit(f"`bfcl` still does not start in {venv}")
    return py


def bfcl_python() -> Path:
    here = Path(sys.executable)
    return here if _bfcl_works(here) else _bench_venv()


# ---------------------------------------------------------------- the run in bfcl's layout
def bfcl_layout(run: Path, dest: Path) -> tuple[str, list[str]]:
    """Copy ``run``'s result files into ``dest/result/<model>/multi_turn/`` under V4 names;
    (model folder, categories)."""
    files = sorted(p for p in run.rglob("*_result.json") if RESULT.search(p.name))
    if not files:
        raise SystemExit(f"no multi-turn result files under {run}")
    model = (files[0].parent.parent.name if files[0].parent.name == "multi_turn"
             else files[0].parent.name)
    cats = []
    for f in files:
        cat = RESULT.search(f.name).group(1)
        out = dest / "result" / model / "multi_turn" / f"BFCL_v4_{cat}_result.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, out)
        cats.append(cat)
    return model, cats


def registry_name(model_dir: str) -> str:
    from careful_engine.core import bfcl

    key = bfcl.registry_key_for_dir(model_dir)
    if key not in bfcl.registry():
        raise SystemExit(f"{model_dir}: `bfcl evaluate` needs a model in its registry")
    return key


def _report(label: str, walls: list[float], cpus: list[float],
            rss: list[float]) -> tuple[float, float, float]:
    print(f"  {label:<42} wall best {min(walls):6.2f}s median {statistics.median(walls):6.2f}s"
          f"  CPU best {min(cpus):6.2f}s  peak RSS {max(rss):5.0f} MB")
    return min(walls), statistics.median(walls), min(cpus)


def compile_project() -> str:
    """Compile the project's modules where they are out of date, as pip does for an installed
    package: an editable install holds none, and under PYTHONDONTWRITEBYTECODE each careful
    process would otherwise compile them again (bfcl-eval's are compiled at its install)."""
    import compileall
    import importlib.util

    folders = [Path(spec.origin).parent for name in ("careful_engine", "careful_cli")
               if (spec := importlib.util.find_spec(name)) and spec.origin]
    ok = all(compileall.compile_dir(f, quiet=2) for f in folders)
    return f"bytecode of {', '.join(map(str, folders))}: " + ("up to date" if ok else
                                                               "could not be written")


def load_note() -> str:
    try:
        one, five, _ = os.getloadavg()
        return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=HERE.parent / "shared/runs/xlam-2-8b-fc-r")
    ap.add_argument("--runs", type=Path, default=HERE.parent / "shared/runs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-bfcl", action="store_true")
    ap.add_argument("--skip-leaderboard", action="store_true")
    args = ap.parse_args()
    print(compile_project())
    print(f"before: {load_note()}")
    tmp = Path(tempfile.mkdtemp(prefix="careful-e2e-"))
    base_env = {**os.environ, "PYTHONHASHSEED": "0"}
    cache = tmp / "cache"
    careful = _careful()
    try:
        model, cats = bfcl_layout(args.run, tmp / "bfcl")
        n = 200 * len(cats)
        print(f"\n1. {args.run.name}: {model}, {len(cats)} categories, {n} conversations")
        rows: dict[str, tuple[list[float], list[float], list[float]]] = {}

        def measure(label: str, cmd: list[str], env: dict[str, str], cwd: Path,
                    before=None) -> None:
            if before:
                before()
            wall, cpu, rss, _ = timed(cmd, env, cwd)
            rows.setdefault(label, ([], [], []))
            rows[label][0].append(wall)
            rows[label][1].append(cpu)
            rows[label][2].append(rss)

        score = [*careful, "score", str(tmp / "bfcl"), "-q", "-o", str(tmp / "out")]
        cenv = {**base_env, "CAREFUL_CACHE_DIR": str(cache)}
        plans = [
            ("careful score, cold cache (default jobs)", score, cenv,
             lambda: shutil.rmtree(cache, ignore_errors=True)),
            ("careful score, warm cache (default jobs)", score, cenv, None),
            ("careful score, warm cache, --jobs 1", [*score, "--jobs", "1"], cenv, None),
            ("careful score, no cache (default jobs)", score,
             {**cenv, "CAREFUL_REFCACHE": "off"}, None),
        ]
        if not args.skip_bfcl:
            py = bfcl_python()
            bfcl_cmd = [str(py.with_name("bfcl")), "evaluate", "--model", registry_name(model), "--test-category", ",".join(cats)]
            plans.append(("bfcl evaluate", bfcl_cmd,
                          {**base_env, "BFCL_PROJECT_ROOT": str(tmp / "bfcl")},
                          lambda: shutil.rmtree(tmp / "bfcl" / "score", ignore_errors=True)))
        for _ in range(args.repeat):
            for label, cmd, env, before in plans:
                measure(label, cmd, env, tmp, before)
        best = {label: _report(label, *rows[label]) for label, *_ in plans}
        if "bfcl evaluate" in best:
            b = best["bfcl evaluate"]
            for label, *_ in plans[:-1]:
                c = best[label]
                print(f"  ratio {label} / bfcl evaluate: wall {c[0] / b[0]:.2f}x "
                      f"(median {c[1] / b[1]:.2f}x; goal <= 0.2x), CPU {c[2] / b[2]:.2f}x")
        if not args.skip_leaderboard:
            runs = sorted(p for p in args.runs.iterdir() if p.is_dir())
            print(f"\n2. careful leaderboard over {len(runs)} runs in {args.runs} (warm cache)")
            lb = [*careful, "leaderboard", *map(str, runs), "-q", "-o", str(tmp / "lb")]
            for folder, key in UNREGISTERED.items():
                lb += ["--decoder", f"{folder}={key}"]
            timed(lb, cenv, tmp)  # warms the cache for every category
            rows.clear()
            for _ in range(args.repeat):
                measure("leaderboard --jobs 1", [*lb, "--jobs", "1"], cenv, tmp)
                measure("leaderboard --jobs 2", [*lb, "--jobs", "2"], cenv, tmp)
            s = _report("leaderboard --jobs 1", *rows["leaderboard --jobs 1"])
            p = _report("leaderboard --jobs 2", *rows["leaderboard --jobs 2"])
            print(f"  speed-up --jobs 2 over --jobs 1: {s[0] / p[0]:.2f}x "
                  f"(median {s[1] / p[1]:.2f}x; goal >= 1.7x); CPU --jobs 2 / --jobs 1: "
                  f"{p[2] / s[2]:.2f}x (what the workers repeat or pass back)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    spent = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\nCPU of every process this benchmark ran (RUSAGE_CHILDREN): user "
          f"{spent.ru_utime:.1f} s + system {spent.ru_stime:.1f} s")
    print(f"after: {load_note()}")


if __name__ == "__main__":
    main()
