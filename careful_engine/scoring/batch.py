"""Scoring many result files together: find each run's files, load them, score their
conversations in worker processes (:mod:`careful_engine.core.parallel`), then assemble the runs
in input order.

The parent loads every file and builds the decoders the files need (bfcl's data, the decoders
and the reference cache are ready before the workers fork, so they share them instead of each
setting them up). Workers score with :func:`careful_engine.scoring.score.score_file` exactly as a
serial run does. A file is split by conversation, so that two workers stay busy on a run of few
files: bfcl evaluates a file in one process whose shared simulator state carries over from one
conversation to the next (careful_engine.core.process), so the conversations that can read or
change that state (:func:`careful_engine.core.refcache.depends_on_process`) stay together, in
order, in one part; every other conversation is independent of what ran before it and is scored
in parts of its own. The parent merges the parts in bfcl's order. When an entry of an
independent part could not be scored (the serial run restarts the process state after such an
entry), the whole file is scored again in one piece, so the result never depends on the split.

The parent then applies the folder's rules as :func:`careful_engine.scoring.score.score_run`
always has: a folder one of whose files needs a decoder that cannot be had is unusable as a
whole (its other files are dropped), and problems are listed in the serial order (discovery,
loading, scoring). A file whose scoring fails (or kills its worker) becomes one problem line for
that file; the rest is scored.
"""

from __future__ import annotations

import math
import multiprocessing.util as mp_util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl, parallel, refcache
from careful_engine.core.budget import Budget
from careful_engine.core.process import shared_objects
from careful_engine.core.runs import (
    DecoderUnavailable,
    LoadedFile,
    Problem,
    ResultFile,
    load_result_file,
    manifest_decoder,
    needs_decoder,
)
from careful_engine.scoring.score import (
    CategoryScore,
    ConversationResult,
    ModelScore,
    RunScore,
    discover,
    score_file,
)


@dataclass
class RunPlan:
    """One run folder: per model folder its result files and the decoder key it would use."""

    run_dir: Path
    files: dict[str, list[ResultFile]]
    problems: list[Problem]  # found while discovering the files
    keys: dict[str, str | None]  # None: the folder cannot be scored (see ``unusable``)
    unusable: dict[str, str]


def plan_run(run_dir: Path, decoder: str | None | Callable[[str], str | None] = None,
             models: list[str] | None = None) -> RunPlan:
    """The files of a run folder (nothing loaded yet) and each model folder's decoder key:
    ``decoder`` (a key, or a function of the model folder's name), else the folder's
    ``careful_run.json``, else its registry key."""
    by_model, problems = discover(run_dir)
    if models:
        by_model = {m: v for m, v in by_model.items() if m in set(models)}
    keys: dict[str, str | None] = {}
    unusable: dict[str, str] = {}
    for m, files in by_model.items():
        try:
            chosen = decoder(m) if callable(decoder) else decoder
            keys[m] = chosen or manifest_decoder(files[0]) or bfcl.registry_key_for_dir(m)
        except DecoderUnavailable as e:  # its files are still loaded, for their problems
            keys[m], unusable[m] = None, str(e)
    return RunPlan(run_dir, by_model, problems, keys, unusable)


@dataclass
class _Job:
    """What every worker shares (inherited, not copied, where processes fork)."""

    loaded: list[LoadedFile]
    handlers: list[Any]
    effects: Any
    detector: str
    budget: Budget | None
    keep_traces: bool


@dataclass
class _File:
    """One file in the parent: loaded, with its decoder (or why it has none)."""

    loaded: LoadedFile
    known: int  # problems up to here came from loading it
    needed: bool = False  # it has steps to decode
    handler: Any = None
    decoder_error: str | None = None
    score: CategoryScore | None = None
    failed: str | None = None  # why it could not be scored (a worker's error)

    @property
    def scorable(self) -> bool:
        return self.decoder_error is None and self.failed is None


@dataclass
class _Part:
    """What scoring some conversations of a file gives back: their results and the entries it
    could not score (in bfcl's order)."""

    results: list[ConversationResult]
    problems: list[Problem]


Task = tuple[int, frozenset[str] | None]  # (file index, its conversations; None: all of them)


def _score_task(task: Task, job: _Job, tick: Callable[[], None]) -> _Part:
    index, only = task
    lf = job.loaded[index]
    known = len(lf.problems)
    cs = score_file(lf, job.handlers[index], keep_traces=job.keep_traces, on_entry=tick,
                    effects=job.effects, detector=job.detector, budget=job.budget, only=only)
    problems = lf.problems[known:]
    del lf.problems[known:]  # the parent adds them back once, merged in order
    return _Part(cs.results, problems)


def _score_here(task: Task, job: _Job, tick: Callable[[], None]) -> _Part:
    """A file scored in this process; the references it recorded written at once, for
    every later process."""
    try:
        return _score_task(task, job, tick)
    finally:
        refcache.flush()


_FLUSH_AT_EXIT: list[int] = []  # the worker process that will write its records on exit


def _task_in_worker(i: int, shared: tuple[list[Task], _Job], tick: Callable[[], None]) -> _Part:
    """A part scored in a worker, which writes the references it recorded once, when it
    exits (multiprocessing runs the finalizer; writing after every part re-read and
    re-wrote the category's cache file each time)."""
    if _FLUSH_AT_EXIT != [os.getpid()]:
        _FLUSH_AT_EXIT[:] = [os.getpid()]
        mp_util.Finalize(None, refcache.flush, exitpriority=10)
    tasks, job = shared
    return _score_task(tasks[i], job, tick)


def _load(plans: list[RunPlan], tasks: list[tuple[int, str, ResultFile]]) -> list[_File]:
    """Every file loaded, with its decoder built if it has steps to decode."""
    out = []
    for n, m, rf in tasks:
        lf = load_result_file(rf)
        f = _File(lf, len(lf.problems))
        key = plans[n].keys[m]
        if not lf.unreadable and key is not None:
            f.needed = needs_decoder(lf)
            if f.needed:
                try:
                    f.handler = bfcl.handler(key)
                except (bfcl.UnknownModel, RuntimeError) as e:
                    f.decoder_error = e.args[0] if e.args else str(e)
        else:
            f.decoder_error = ""  # reported, not scored
        out.append(f)
    return out


def _split(files: list[_File], jobs: int) -> list[Task]:
    """The parts to score: per file, the conversations that share bfcl's process state in one
    part, the others in parts of about an eighth of a worker's share (whole files when
    serial)."""
    todo = [i for i, f in enumerate(files) if f.scorable]
    if jobs <= 1:
        return [(i, None) for i in todo]
    convs = {i: bfcl.conversations(files[i].loaded.file.category) for i in todo}
    free = {i: [c.id for c in cs if not refcache.depends_on_process(c)]
            for i, cs in convs.items()}
    size = max(8, math.ceil(sum(map(len, free.values())) / (jobs * 8)))
    tasks: list[Task] = []
    for i in todo:
        shared = frozenset(c.id for c in convs[i] if refcache.depends_on_process(c))
        if shared:
            tasks.append((i, shared))
        tasks.extend((i, frozenset(free[i][k:k + size])) for k in range(0, len(free[i]), size))
    return tasks


def _cost(files: list[_File], task: Task) -> float:
    """A guess at what scoring a part costs: its conversations, long context counting
    double."""
    index, only = task
    category = files[index].loaded.file.category
    n = len(only) if only is not None else len(bfcl.conversations(category))
    return n * (2 if bfcl.is_long_context(category) else 1)


def _warm(files: list[_File]) -> None:
    """What every worker would otherwise set up for itself: bfcl's simulator classes and the
    pristine copies of their shared objects, and the reference cache of the categories."""
    shared_objects()
    refcache.preload(sorted({f.loaded.file.category for f in files if f.scorable}))


def score_plans(
    plans: list[RunPlan],
    *,
    effects: Any = None,
    detector: str = "strict",
    keep_traces: bool = False,
    budget: Budget | None = None,
    jobs: int = 1,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[str, str], None] | None = None,
    on_entry: Callable[[], None] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> list[RunScore]:
    """Load and score every file of ``plans`` with up to ``jobs`` worker processes; one
    :class:`RunScore` per plan, in order (the same result for any ``jobs``). ``meanwhile``:
    work the parent does while the workers score (see parallel.run_ordered)."""
    named = [(n, m, rf) for n, p in enumerate(plans) for m, files in p.files.items()
             for rf in files]
    if on_start:
        on_start(sum(len(bfcl.conversations(rf.category)) for *_, rf in named))
    files = _load(plans, named)
    for f in files:
        if not f.scorable and on_entry:
            for _ in bfcl.conversations(f.loaded.file.category):  # nothing is scored
                on_entry()
    tasks = _split(files, jobs)
    serial = jobs <= 1 or len(tasks) <= 1
    if not serial:
        _warm(files)
    job = _Job([f.loaded for f in files], [f.handler for f in files], effects, detector,
               budget, keep_traces)

    def label(i: int) -> None:
        if on_file:
            on_file(named[tasks[i][0]][1], named[tasks[i][0]][2].category)

    def task_fn(i: int, shared: tuple[list[Task], _Job], tick: Callable[[], None]) -> _Part:
        label(i)
        return _score_here(shared[0][i], shared[1], tick)

    def done(i: int, result: Any) -> None:
        if not serial:
            label(i)
        if on_entry and isinstance(result, parallel.Failed):
            for _ in tasks[i][1] or bfcl.conversations(files[tasks[i][0]].loaded.file.category):
                on_entry()  # nothing was scored

    parts = parallel.run_ordered(task_fn if serial else _task_in_worker,
                                 list(range(len(tasks))), jobs=jobs, shared=(tasks, job),
                                 on_tick=on_entry, on_done=done,
                                 cost=None if serial else [_cost(files, t) for t in tasks],
                                 meanwhile=meanwhile)
    _merge(files, tasks, parts, job)
    return [_assemble(n, plan, named, files) for n, plan in enumerate(plans)]


def _merge(files: list[_File], tasks: list[Task], parts: list[Any], job: _Job) -> None:
    """Each file's parts as one score, in bfcl's order, as the serial run gives it."""
    mine: dict[int, list[tuple[Task, Any]]] = {}
    for task, part in zip(tasks, parts, strict=True):
        mine.setdefault(task[0], []).append((task, part))
    for index, got in mine.items():
        f = files[index]
        failed = [p for _, p in got if isinstance(p, parallel.Failed)]
        if failed:
            f.failed = failed[0].reason
            continue
        if any(p.problems for t, p in got if t[1] is not None and not _shares(t, f)):
            # an independent entry could not be scored: the serial run restarted bfcl's
            # process state there, which the shared part did not see; score it whole
            whole = parallel.run_ordered(_score_here, [(index, None)], jobs=1, shared=job)[0]
            if isinstance(whole, parallel.Failed):
                f.failed = whole.reason
                continue
            got = [((index, None), whole)]
        rf = f.loaded.file
        order = {c.id: k for k, c in enumerate(sorted(bfcl.conversations(rf.category),
                                                      key=lambda c: bfcl.sort_key(c.id)))}
        results = sorted((r for _, p in got for r in p.results), key=lambda r: order[r.id])
        problems = sorted((q for _, p in got for q in p.problems),
                          key=lambda q: order.get(q.id, -1))
        if any(r.confirm for r in results):  # the file is a confirm run: missing entries too
            for r in results:
                r.confirm = True
        f.loaded.problems.extend(problems)
        f.score = CategoryScore(rf.model, rf.category, results, rf, list(f.loaded.problems))


def _shares(task: Task, f: _File) -> bool:
    """Whether a part holds the conversations that share bfcl's process state."""
    return any(refcache.depends_on_process(bfcl.conversation(i)) for i in task[1] or ())


def _assemble(n: int, plan: RunPlan, named: list, files: list[_File]) -> RunScore:
    """One run's score from its files' results, as a serial score_run builds it."""
    mine = [(m, rf, f) for (k, m, rf), f in zip(named, files, strict=True) if k == n]
    run = RunScore([], [], list(plan.problems), [])
    for _, _, f in mine:  # what loading found, every file of every folder first
        run.problems.extend(f.loaded.problems[:f.known])
    unusable = {}
    for m, _, f in mine:
        if f.decoder_error and m not in unusable:
            unusable[m] = f"model folder {m!r}: {f.decoder_error}"
    for m in plan.files:
        outs = [(rf, f) for mm, rf, f in mine if mm == m and not f.loaded.unreadable]
        if not outs:
            continue  # no readable file: its problems say why
        if m in plan.unusable:
            run.unusable.append(plan.unusable[m])
            continue
        if m in unusable:
            run.unusable.append(unusable[m])
            continue
        needed = any(f.needed for _, f in outs)
        ms = ModelScore(m, plan.keys[m] if needed else None)
        for rf, f in outs:
            if f.failed is not None or f.score is None:
                run.problems.append(Problem(str(rf.path), f"not scored: {f.failed}"))
                continue
            run.problems.extend(f.loaded.problems[f.known:])  # entries it could not score
            ms.categories[rf.category] = f.score
            run.files.append((f.loaded, f.score))
        if ms.categories:
            run.scores.append(ms)
        else:
            run.unusable.append(f"model folder {m!r}: no file could be scored")
    return run
