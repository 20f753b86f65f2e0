"""Independent tasks in worker processes: results in task order, one progress stream, and a
failure confined to its own task.

``run_ordered(fn, tasks, jobs=N, shared=...)`` calls ``fn(task, shared, tick)`` for every task
and returns the results in the order of ``tasks`` whatever order the workers finish in; ``tick()``
reports one unit of progress (a conversation) to the parent, which passes it to ``on_tick``.
``shared`` (the loaded files, the effects) reaches each worker once: inherited by ``fork`` where
the platform has it (no copy), pickled once per worker elsewhere.

The start method (``mp_context``: a name or a multiprocessing context) defaults to ``fork``
when called on the main thread, and to ``forkserver`` (else ``spawn``) off it: forking a
process whose other threads hold locks (a Textual worker thread) is unsafe. ``cancel`` (a
``threading.Event`` or a callable) is checked between tasks and while waiting for workers;
once set, the workers are killed and :class:`Cancelled` is raised.

A task that raises gives a :class:`Failed` in its place; a worker that dies (killed, out of
memory) breaks the pool, and every task not finished then is run again alone in a fresh
one-worker pool, so that only the task that kills its worker fails. ``jobs <= 1`` runs the
same wrapping in this process, in order: a serial run computes exactly what a parallel one does.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue as queue_mod
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

Task = Callable[[Any, Any, Callable[[], None]], Any]
Cancel = threading.Event | Callable[[], bool] | None  # set (or true): stop as soon as possible
MpContext = str | BaseContext | None  # a start method ("fork", "spawn", "forkserver"), a context


class Cancelled(Exception):  # noqa: N818 - what the caller asked for, not an error
    """Raised by :func:`run_ordered` (and the scoring built on it) once ``cancel`` is set; the
    workers are gone by then."""


def cancelled(cancel: Cancel) -> bool:
    """Whether ``cancel`` (an Event, a callable or None) asks to stop."""
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())


def context(method: MpContext = None, preload: Sequence[str] = ()) -> BaseContext:
    """The multiprocessing context for ``method``: by default ``fork`` on the main thread (the
    workers inherit the parent's loaded state) and, off it, ``forkserver`` (else ``spawn``),
    since forking while other threads run is unsafe. ``preload``: modules a forkserver
    imports once, before it forks the workers (when this process starts it)."""
    if isinstance(method, BaseContext):
        return method
    methods = mp.get_all_start_methods()
    if method is None:
        if "fork" in methods and threading.current_thread() is threading.main_thread():
            method = "fork"
        else:
            method = "forkserver" if "forkserver" in methods else "spawn"
    ctx = mp.get_context(method)
    if preload and method == "forkserver":
        ctx.set_forkserver_preload(list(preload))
    return ctx


def inherits(ctx: BaseContext) -> bool:
    """Whether workers of ``ctx`` inherit the parent's memory (``fork``) rather than start
    fresh and receive ``shared`` pickled."""
    return ctx.get_start_method() == "fork"


@dataclass
class Failed:
    """A task that did not complete: why (one line, no traceback)."""

    reason: str


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_jobs(jobs: int | None) -> int:
    """``--jobs``: None or 0 means every core; negative is refused (ValueError)."""
    if jobs is None or jobs == 0:
        return default_jobs()
    if jobs < 0:
        raise ValueError(f"--jobs must be a positive number of worker processes, not {jobs}")
    return jobs


def _reason(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"[:500] if text else type(e).__name__


def guarded_reason(e: BaseException) -> str:
    """What a task that raised ``e`` gives as its :class:`Failed` reason."""
    return f"internal error: {_reason(e)}"


def _guarded(fn: Task, task: Any, shared: Any, tick: Callable[[], None]) -> Any:
    try:
        return fn(task, shared, tick)
    except Cancelled:
        raise
    except (Exception, RecursionError, MemoryError) as e:  # one task, not the run
        return Failed(guarded_reason(e))


# ------------------------------------------------------------------------- in the worker
_SHARED: Any = None
_TICKS: Any = None


def _init(shared: Any, ticks: Any, collect: bool = True) -> None:
    global _SHARED, _TICKS
    _SHARED, _TICKS = shared, ticks
    if collect:  # a forked worker inherits the parent's paused collector (see _pool_pass)
        gc.enable()


_UNSENT = [0, 0.0]  # ticks not sent to the parent yet, and when ticks were last sent
TICK_INTERVAL = 0.05  # seconds: progress reaches the parent 20 times a second at most


def _tick() -> None:
    _UNSENT[0] += 1
    now = time.monotonic()
    if now - _UNSENT[1] >= TICK_INTERVAL:
        _send_ticks(now)


def _send_ticks(now: float) -> None:
    if _UNSENT[0]:
        _TICKS.put(_UNSENT[0])  # one message for many conversations
        _UNSENT[0] = 0
    _UNSENT[1] = now


def _work(fn: Task, task: Any) -> Any:
    try:
        return _guarded(fn, task, _SHARED, _tick)
    finally:
        _send_ticks(time.monotonic())


# ------------------------------------------------------------------------- in the parent
def run_ordered(fn: Task, tasks: Sequence[Any], *, jobs: int = 1, shared: Any = None,
                on_tick: Callable[[], None] | None = None,
                on_done: Callable[[int, Any], None] | None = None,
                cost: Sequence[float] | None = None,
                meanwhile: Callable[[], None] | None = None,
                mp_context: MpContext = None, cancel: Cancel = None,
                in_process: bool = True) -> list[Any]:
    """``fn(task, shared, tick)`` for every task, in up to ``jobs`` worker processes; the
    results (or :class:`Failed`) in task order. ``on_done(index, result)`` sees each result
    as it arrives (in the parent). With ``cost`` (an estimate per task), workers take the
    costliest tasks first, which shortens the tail; the results keep the task order.
    ``meanwhile()`` is run once in the parent while the workers work (work the caller needs
    next, such as an import; not run when the tasks run in this process, and an exception in
    it is ignored: the caller meets it again where it does that work itself).
    ``mp_context`` and ``cancel``: see the module's docstring (``fn``, ``tasks`` and ``shared``
    must pickle where the context does not fork). ``in_process=False``: never run a task in
    this process, even one task or ``jobs=1`` (a pool of one worker then; for a caller whose
    own process must not replay, such as the workbench)."""
    tick = on_tick or (lambda: None)
    if not tasks or (in_process and (jobs <= 1 or len(tasks) <= 1)):
        if cancel is not None:  # checked at every conversation too: a file can take seconds
            inner = tick

            def tick() -> None:
                if cancelled(cancel):
                    raise Cancelled
                inner()
        out = []
        for i, task in enumerate(tasks):
            if cancelled(cancel):
                raise Cancelled
            out.append(_guarded(fn, task, shared, tick))
            if on_done:
                on_done(i, out[-1])
        return out
    results: dict[int, Any] = {}
    order = list(range(len(tasks)))
    if cost is not None:
        order.sort(key=lambda i: -cost[i])
    ctx = context(mp_context)
    broken = _pool_pass(ctx, fn, tasks, order, max(1, min(jobs, len(tasks))), shared, tick,
                        on_done, results, meanwhile, cancel)
    for i in broken:  # a worker died: each unfinished task alone, so only its killer fails
        if _pool_pass(ctx, fn, tasks, [i], 1, shared, tick, on_done, results, None, cancel):
            results[i] = Failed("worker process died (killed or out of memory)")
            if on_done:
                on_done(i, results[i])
    return [results[i] for i in range(len(tasks))]


def _pool_pass(ctx: BaseContext, fn: Task, tasks: Sequence[Any], indices: list[int],
               workers: int, shared: Any, tick: Callable[[], None],
               on_done: Callable[[int, Any], None] | None, results: dict[int, Any],
               meanwhile: Callable[[], None] | None = None,
               cancel: Cancel = None) -> list[int]:
    """Run ``indices`` in one pool; the indices left unfinished by a broken pool."""
    if cancelled(cancel):
        raise Cancelled
    ticks = ctx.Queue()

    def drain() -> None:
        while True:
            try:
                n = ticks.get_nowait()
            except (queue_mod.Empty, OSError, EOFError, ValueError):
                return
            for _ in range(n):
                tick()

    unfinished: list[int] = []
    # the heap the workers inherit (loaded files, bfcl's data) is frozen: the cyclic collector
    # does not walk (and so copy) every inherited page in each worker; it goes back to the
    # collector afterwards. In the parent the collector is paused while the pool runs: the
    # results arriving are many acyclic objects, whose unpickling made it walk every result
    # received so far again and again (unpickling 2,800 results: 0.45 s with it, 0.05 s
    # without). Not when called off the main thread: the caller's own threads (a UI) go on
    # making garbage meanwhile
    collect = gc.isenabled()
    pause = collect and threading.current_thread() is threading.main_thread()
    gc.freeze()
    if pause:
        gc.disable()
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init,
                                 initargs=(shared, ticks, collect)) as pool:
            futures: dict[Future, int] = {pool.submit(_work, fn, tasks[i]): i for i in indices}
            pending = set(futures)
            if meanwhile is not None:  # the workers are started (forked) by the first submit
                try:
                    meanwhile()
                except Exception:  # noqa: BLE001, S110 - see run_ordered
                    pass
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                if cancelled(cancel):
                    _stop(pool)
                    raise Cancelled
                drain()
                for f in sorted(done, key=futures.__getitem__):
                    i = futures[f]
                    try:
                        results[i] = f.result()
                    except BrokenProcessPool:
                        unfinished.append(i)
                        continue
                    except Exception as e:  # a result that could not be sent back
                        results[i] = Failed(f"internal error: {_reason(e)}")
                    if on_done:
                        on_done(i, results[i])
    finally:
        if pause:
            # what arrived while the collector was paused (the results, the modules imported
            # meanwhile: 125,000 objects after a leaderboard) goes straight to the oldest
            # generation, as the heap frozen above does: the caller keeps it, and a young
            # pass over it on the next allocation took 30 ms and found almost nothing
            gc.freeze()
        gc.unfreeze()
        if pause:
            gc.enable()
    drain()
    ticks.close()
    return sorted(unfinished)


STOP_WAIT = 5.0  # seconds a cancel waits for a worker to finish sending a result


def _stop(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (a cancelled run: nothing they compute is wanted).

    They are killed while this process holds their result pipe's write lock: a worker killed
    halfway through sending a result (one larger than the pipe's buffer) left half a message,
    on which the pool's manager thread then waited for ever, and with it this process's exit
    (``concurrent.futures`` joins that thread at exit). The lock is waited for at most
    :data:`STOP_WAIT` seconds (the manager thread keeps reading, so a send in progress ends)."""
    lock = getattr(getattr(pool, "_result_queue", None), "_wlock", None)
    held = lock is not None and lock.acquire(timeout=STOP_WAIT)
    try:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            try:
                proc.kill()
            except (OSError, ValueError, AttributeError):
                pass
    finally:
        if held:
            lock.release()
    pool.shutdown(wait=False, cancel_futures=True)
