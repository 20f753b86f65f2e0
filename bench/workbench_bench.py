"""Benchmark: the workbench's two interactive costs, in the app itself (headless ``run_test``).

1. Stepping: the longest long_context conversation of a real run (most logged steps) is
   opened in the stepper and walked call by call with the ``n`` action. Per step, the time
   until the next frame is composed (the action, the diffs of both sides, the widgets, the
   compositor's render) is the figure; the first-time diff of each call (engine only, cold)
   and the screen's own update time are printed beside it. Goal: median <= 50 ms.
2. Opening a run of 800 conversations: from the Replay screen's request to the list showing
   all 800 rows (result files read, score lines merged when present, the table filled), with
   and without score lines; and the app's cold start to a painted Home. Goal: <= 2 s.

The run is ../shared/runs/glyphh-ada-1.1 (decoded as gpt-4o-2024-11-20-FC) when present,
else runs/reference (written by `careful demo` if missing). Nothing is written into the run
folder: scores go to a temporary cache.

    python bench/workbench_bench.py [--run PATH] [--decoder KEY] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from careful_engine import browse
from careful_engine.core.state import State, diff
from careful_engine.demo import reference as demo
from careful_engine.scoring.decoders import parse_decoders

REPO = Path(__file__).resolve().parent.parent
GLYPHH = REPO.parent / "shared" / "runs" / "glyphh-ada-1.1"


def pick_run(run: Path | None, decoder: str | None) -> tuple[Path, str | None]:
    if run is not None:
        if not run.exists():
            raise SystemExit(f"{run} does not exist (`careful demo` writes runs/reference)")
        return run, decoder
    if GLYPHH.is_dir():
        return GLYPHH, decoder or "gpt-4o-2024-11-20-FC"
    ref = REPO / "runs" / "reference"
    if not ref.exists():
        demo.write_reference_run(ref)
    return ref, decoder


def make_app(run: Path, decoder: str | None, cache: Path):
    from workbench.app import WorkbenchApp
    from workbench.context import Settings

    return WorkbenchApp(Settings(runs=[run], db=cache / "bench.db", cache_dir=cache,
                                 decoders=parse_decoders([decoder] if decoder else []),
                                 boundary_dir=cache / "boundary", user="bench",
                                 config=None))  # never the person's remembered filters


async def until(predicate, timeout: float = 30.0) -> float:
    """Poll on the app's loop until ``predicate()``; returns the time it took."""
    start = time.perf_counter()
    while not predicate():
        if time.perf_counter() - start > timeout:
            raise TimeoutError("the app did not get there")
        await asyncio.sleep(0.002)
    return time.perf_counter() - start


async def open_run(run: Path, decoder: str | None, cache: Path) -> dict[str, float]:
    from textual.widgets import DataTable

    from workbench.screens import HomeScreen, ReplayScreen

    app = make_app(run, decoder, cache)
    started = time.perf_counter()
    async with app.run_test(size=(80, 24)) as pilot:
        def home_ready() -> bool:
            s = app.screen
            return isinstance(s, HomeScreen) and s.query_one("#runs", DataTable).row_count > 0

        await until(home_ready)
        home = time.perf_counter() - started
        label = app.context.refs[0].label
        n = len(app.context.browser(app.context.refs[0]).rows())
        app.context.browser(app.context.refs[0]).reload()  # the list is read again, as on a first open
        t0 = time.perf_counter()
        app.open_run(label)

        def listed() -> bool:
            s = app.screen
            return (isinstance(s, ReplayScreen) and s.rows
                    and s.query_one("#conversations", DataTable).row_count == n)

        await until(listed)
        opened = time.perf_counter() - t0
        await pilot.pause()
    return {"home": home, "open": opened, "total": home + opened, "rows": n}


async def step_through(run: Path, decoder: str | None, cache: Path) -> dict:
    from workbench.screens import ConversationScreen, ReplayScreen

    app = make_app(run, decoder, cache)
    async with app.run_test(size=(80, 24)) as pilot:
        ref = app.context.refs[0]
        browser = app.context.browser(ref)
        rows = [r for r in browser.rows() if r.category == "multi_turn_long_context"]
        longest = max(rows, key=lambda r: (r.steps, r.turns))
        view = browser.open(longest.id)  # replay: decode, replay, rules, blame
        app.settle_memory()  # as the Replay screen does after opening a conversation
        app.open_run(ref.label)
        await until(lambda: isinstance(app.screen, ReplayScreen) and app.screen.rows)
        app.push_screen(ConversationScreen(view))
        await until(lambda: isinstance(app.screen, ConversationScreen))
        await pilot.pause()
        screen = app.screen
        screen.go(view.next_call(-1))  # the first call
        await pilot.pause()
        frame, update = [], []
        while True:
            t0 = time.perf_counter()
            target = view.next_call(screen.line)
            if target is None:
                break
            screen.action_call(1)
            await pilot.pause(0)  # the next frame: layout, render, composed update
            frame.append(time.perf_counter() - t0)
            update.append(screen.last_render_s)
        # the engine alone, cold: every call's diff from fresh (never materialised) states
        cold = []
        for cv in view.calls:
            rec = cv.record
            before = State({c: rec.state_before.blob(c) for c in rec.state_before})
            after = State({c: rec.state_after.blob(c) for c in rec.state_after})
            t0 = time.perf_counter()
            browse.change_rows(diff(before, after))
            cold.append(time.perf_counter() - t0)
    return {"id": longest.id, "steps": longest.steps, "calls": len(view.calls),
            "frame": frame, "update": update, "cold": cold}


def ms(x: float) -> str:
    return f"{1000 * x:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path)
    ap.add_argument("--decoder")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    run, decoder = pick_run(args.run, args.decoder)
    print(f"run: {run} (decoder {decoder or 'from the manifest'})")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        s = asyncio.run(step_through(run, decoder, cache))
        print(f"\n1. stepping through {s['id']} ({s['steps']} logged steps, {s['calls']} "
              f"model calls), {len(s['frame'])} steps with n")
        print(f"   next call shown (action + both diffs + widgets + composed frame): median "
              f"{ms(statistics.median(s['frame']))}, max {ms(max(s['frame']))}   goal <= 50 ms")
        print(f"   the screen's own update: median {ms(statistics.median(s['update']))}; "
              f"engine diff of a call from cold states: median "
              f"{ms(statistics.median(s['cold']))}, max {ms(max(s['cold']))}")

        print(f"\n2. opening the run in Replay ({args.repeat} fresh apps each; the first "
              "in a process that has not drawn a Replay screen yet)")
        for scored in (False, True):
            if scored:
                (ref,) = browse.find_runs([run], parse_decoders([decoder] if decoder else []))
                out = browse.cache_scores_path(ref, cache)
                t0 = time.perf_counter()
                browse.score_to_file(run, ref.model, out, decoder=ref.decoder)
                print(f"   (scored {ref.label} into a temporary cache in "
                      f"{time.perf_counter() - t0:.1f} s)")
            results = [asyncio.run(open_run(run, decoder, cache)) for _ in range(args.repeat)]
            label = "with score lines" if scored else "without scores"
            print(f"   {label}: {results[0]['rows']} conversations listed in "
                  + ", ".join(ms(r["open"]) for r in results)
                  + "; app start to a painted Home "
                  + ", ".join(ms(r["home"]) for r in results)
                  + f"; worst total {max(r['total'] for r in results):.2f} s   goal <= 2 s")

if __name__ == "__main__":
    main()
