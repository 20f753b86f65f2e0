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

Where the parent does not need the files' entries afterwards (``keep_entries=False``: the
leaderboard) and there are many files per worker, the parent loads nothing: each file is one
task, given to the workers longest first, and a worker loads, decodes and scores it and sends
back only its results and problems (the parent's serial work before the pool is then only
finding the files). Workers that are not forked (``spawn``/``forkserver``: called off the main
thread) load the files they score themselves in either case; nothing they need comes from the
parent's memory.
"""

from __future__ import annotations

import math
import multiprocessing.util as mp_util
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
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
    decoder_key,
    load_result_file,
    needs_decoder,
)
from careful_engine.scoring.decoders import DecoderChoice
from careful_engine.scoring.result import Digest
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


def plan_run(run_dir: Path, decoder: str | None | DecoderChoice = None,
             models: list[str] | None = None) -> RunPlan:
    """The files of a run folder (nothing loaded yet) and each model folder's decoder key:
    ``decoder`` (a key, or ``--decoder``'s choice, :meth:`DecoderChoice.for_model`), else the
    folder's ``careful_run.json``, else its registry key."""
    by_model, problems = discover(run_dir, models)
    keys: dict[str, str | None] = {}
    unusable: dict[str, str] = {}
    for m, files in by_model.items():
        try:
            chosen = (decoder.for_model(run_dir, m, files[0])
                      if isinstance(decoder, DecoderChoice) else decoder)
            keys[m] = decoder_key(m, files[0], chosen)
        except DecoderUnavailable as e:  # its files are still loaded, for their problems
            keys[m], unusable[m] = None, str(e)
    return RunPlan(run_dir, by_model, problems, keys, unusable)


@dataclass
class _Job:
    """What every worker shares (inherited, not copied, where processes fork; pickled once
    per worker elsewhere, then without ``loaded`` and ``handlers``: the worker loads the files
    and builds the decoders itself from ``sources``)."""

    sources: list[tuple[ResultFile, str | None]]  # each file and its folder's decoder key
    loaded: list[LoadedFile] | None
    handlers: list[Any] | None
    effects: Any
    detector: str
    budget: Budget | None
    keep_traces: bool
    detail: bool = True  # False: results without_detail()
    digest: Digest | None = None  # see score_file: run where each conversation is replayed


@dataclass
class _Own:
    """A file a worker loaded and scored itself (``keep_entries=False``): what the parent
    needs of it, without its entries."""

    problems: list[Problem]  # from loading
    lines: dict[str, int]
    needed: bool
    decoder_error: str | None
    part: _Part | None = field(default=None)  # None: not scored (unreadable, no decoder)
    failed: str | None = None  # scoring it raised (as a part's Failed says)
    sha256: str | None = None  # of the bytes loaded


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


_OWN_FILES: OrderedDict[int, tuple[LoadedFile, Any]] = OrderedDict()  # a worker's own loads
_OWN_MAX = 3  # files a worker keeps loaded at once (memory stays bounded)


def _file_of(job: _Job, index: int) -> tuple[LoadedFile, Any]:
    """The loaded file and its decoder: the parent's (inherited by fork), else loaded here
    (the few most recent kept, as parts of one file tend to follow each other)."""
    if job.loaded is not None and job.handlers is not None:
        return job.loaded[index], job.handlers[index]
    if index in _OWN_FILES:
        _OWN_FILES.move_to_end(index)
        return _OWN_FILES[index]
    lf, _, handler, error = _open(*job.sources[index])
    if error:  # the parent built this decoder: it can only fail here if the file changed
        raise RuntimeError(error)
    got = (lf, handler)
    _OWN_FILES[index] = got
    while len(_OWN_FILES) > _OWN_MAX:
        _OWN_FILES.popitem(last=False)
    return got


def _detailed(results: list[ConversationResult], job: _Job) -> list[ConversationResult]:
    """``results`` as the caller asked for them (with their detail or without)."""
    return results if job.detail else [r.without_detail() for r in results]


def _score_task(task: Task, job: _Job, tick: Callable[[], None]) -> _Part:
    index, only = task
    lf, handler = _file_of(job, index)
    known = len(lf.problems)
    try:
        cs = score_file(lf, handler, keep_traces=job.keep_traces, on_entry=tick,
                        effects=job.effects, detector=job.detector, budget=job.budget,
                        only=only,
                        digest=job.digest)
        return _Part(_detailed(cs.results, job), lf.problems[known:])
    finally:
        del lf.problems[known:]  # the parent adds them back once, merged in order


def _load_and_score(index: int, job: _Job, tick: Callable[[], None]) -> _Own:
    """One whole file loaded, decoded and scored in this process; no entries sent back."""
    rf, key = job.sources[index]
    lf, needed, handler, error = _open(rf, key)
    own = _Own(list(lf.problems), lf.lines, needed, error, sha256=lf.sha256)
    if error is None:
        try:
            cs = score_file(lf, handler, keep_traces=job.keep_traces, on_entry=tick,
                            effects=job.effects, detector=job.detector, budget=job.budget,
                            digest=job.digest)
        except parallel.Cancelled:
            raise
        except (Exception, RecursionError, MemoryError) as e:  # this file, not the run
            own.failed = parallel.guarded_reason(e)
            return own
        own.part = _Part(_detailed(cs.results, job), lf.problems[len(own.problems):])
        return own
    for _ in bfcl.conversations(rf.category):  # nothing is scored
        tick()
    return own


def _own_in_worker(i: int, job: _Job, tick: Callable[[], None]) -> _Own:
    """:func:`_load_and_score` in a worker (see :func:`_task_in_worker` for the cache)."""
    _flush_at_exit()
    return _load_and_score(i, job, tick)


def _score_here(task: Task, job: _Job, tick: Callable[[], None]) -> _Part:
    """A file scored in this process; the references it recorded written at once, for
    every later process."""
    try:
        return _score_task(task, job, tick)
    finally:
        refcache.flush()


_FLUSH_AT_EXIT: list[int] = []  # the worker process that will write its records on exit


def _flush_at_exit() -> None:
    """A worker writes the references it recorded once, when it exits (multiprocessing runs
    the finalizer; writing after every part re-read and re-wrote the category's cache file
    each time)."""
    if _FLUSH_AT_EXIT != [os.getpid()]:
        _FLUSH_AT_EXIT[:] = [os.getpid()]
        mp_util.Finalize(None, refcache.flush, exitpriority=10)


def _task_in_worker(i: int, shared: tuple[list[Task], _Job], tick: Callable[[], None]) -> _Part:
    """A part scored in a worker."""
    _flush_at_exit()
    tasks, job = shared
    return _score_task(tasks[i], job, tick)


def _load(plans: list[RunPlan], tasks: list[tuple[int, str, ResultFile]]) -> list[_File]:
    """Every file loaded, with its decoder built if it has steps to decode."""
    out = []
    for n, m, rf in tasks:
        lf, needed, handler, error = _open(rf, plans[n].keys[m])
        out.append(_File(lf, len(lf.problems), needed, handler, error))
    return out


def _open(rf: ResultFile, key: str | None) -> tuple[LoadedFile, bool, Any, str | None]:
    """A result file loaded, and its decoder built if it has steps to decode: (the file,
    whether it needs a decoder, the decoder, why it has none). The reason is None when it has
    one or needs none, "" when the file is unreadable or its folder names no decoder (both
    reported already: the file is not scored), else why bfcl could not build it."""
    lf = load_result_file(rf)
    if lf.unreadable or key is None:
        return lf, False, None, ""
    if not needs_decoder(lf):
        return lf, False, None, None
    try:
        return lf, True, bfcl.handler(key), None
    except (bfcl.UnknownModel, RuntimeError) as e:
        return lf, True, None, e.args[0] if e.args else str(e)


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


_PRELOAD = ("careful_engine.scoring.batch",)  # what a forkserver imports once for its workers
OWN_LOADS_PER_WORKER = 3  # files per worker from which workers load whole files themselves


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
    keep_entries: bool = True,
    mp_context: parallel.MpContext = None,
    cancel: parallel.Cancel = None,
    on_progress: Callable[[int, int], None] | None = None,
    in_process: bool = True,
    detail: bool = True,
    digest: Digest | None = None,
) -> list[RunScore]:
    """Load and score every file of ``plans`` with up to ``jobs`` worker processes; one
    :class:`RunScore` per plan, in order (the same result for any ``jobs`` and start method).

    ``meanwhile``: work the parent does while the workers score (see parallel.run_ordered).
    ``keep_entries=False``: the caller does not need the files' entries (``RunScore.files``
    then holds each :class:`LoadedFile` with no entries), which lets workers load whole files
    themselves when there are many. ``mp_context``: the start method or context of the
    workers (default: fork on the main thread, forkserver off it). ``cancel``: an Event or
    callable, checked between parts and while waiting; once set, the workers are killed and
    :class:`careful_engine.core.parallel.Cancelled` raised. ``on_progress(done, total)``:
    conversations scored so far (in the calling thread), alongside ``on_start``/``on_entry``.
    ``in_process=False``: no conversation is replayed in this process, even with ``jobs=1``
    (see :func:`careful_engine.core.parallel.run_ordered`). ``detail=False``: the results
    are :meth:`~careful_engine.scoring.result.ConversationResult.without_detail` (ranking
    and pairing runs read none of the rest; workers send back a fifth of the bytes).
    ``digest``: see :func:`careful_engine.scoring.score.score_file` (called in the process that
    replays each conversation; an analysis that needs the traces reads them there).
    """
    named = [(n, m, rf) for n, p in enumerate(plans) for m, files in p.files.items()
             for rf in files]
    total = sum(len(bfcl.conversations(rf.category)) for *_, rf in named)
    if on_progress is not None:
        on_entry = counting(on_entry, on_progress, total)
        on_progress(0, total)
    if on_start:
        on_start(total)
    jobs = max(1, jobs)
    sources = [(rf, plans[n].keys[m]) for n, m, rf in named]
    if not keep_entries and jobs > 1 and len(named) >= OWN_LOADS_PER_WORKER * jobs:
        files = _score_own(named, sources, jobs, effects, detector, keep_traces, budget,
                           on_file, on_entry, meanwhile, mp_context, cancel, detail, digest)
        return [_assemble(n, plan, named, files) for n, plan in enumerate(plans)]
    files = _load(plans, named)
    for f in files:
        if not f.scorable and on_entry:
            for _ in bfcl.conversations(f.loaded.file.category):  # nothing is scored
                on_entry()
    tasks = _split(files, jobs)
    serial = in_process and (jobs <= 1 or len(tasks) <= 1)
    ctx = None if serial else parallel.context(mp_context, _PRELOAD)
    inherit = serial or parallel.inherits(ctx)
    if not serial and inherit:
        _warm(files)
    job = _Job(sources, [f.loaded for f in files] if inherit else None,
               [f.handler for f in files] if inherit else None, effects, detector,
               budget, keep_traces, detail, digest)

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
                                 meanwhile=meanwhile, mp_context=ctx, cancel=cancel,
                                 in_process=in_process)
    _merge(files, tasks, parts, job, cancel, None if serial else ctx)
    return [_assemble(n, plan, named, files) for n, plan in enumerate(plans)]


def counting(on_entry: Callable[[], None] | None, on_progress: Callable[[int, int], None],
              total: int) -> Callable[[], None]:
    """``on_entry`` that also reports (conversations done, ``total``) to ``on_progress``."""
    done = [0]

    def entry() -> None:
        done[0] += 1
        if on_entry:
            on_entry()
        on_progress(done[0], total)
    return entry


def _score_own(named: list, sources: list[tuple[ResultFile, str | None]], jobs: int,
               effects: Any, detector: str, keep_traces: bool, budget: Budget | None,
               on_file: Callable[[str, str], None] | None,
               on_entry: Callable[[], None] | None, meanwhile: Callable[[], None] | None,
               mp_context: parallel.MpContext, cancel: parallel.Cancel,
               detail: bool = True, digest: Digest | None = None) -> list[_File]:
    """Every file one task, loaded and scored by a worker, the largest first; the parent
    loads nothing (``keep_entries=False`` with many files per worker)."""
    ctx = parallel.context(mp_context, _PRELOAD)
    if parallel.inherits(ctx):  # set up once here rather than in each worker (the decoders
        # are built by the workers that need one, as a serial run builds only those)
        shared_objects()
        refcache.preload(sorted({rf.category for rf, _ in sources}))
    job = _Job(sources, None, None, effects, detector, budget, keep_traces, detail, digest)

    def done(i: int, result: Any) -> None:
        if on_file:
            on_file(named[i][1], named[i][2].category)
        if on_entry and isinstance(result, parallel.Failed):
            for _ in bfcl.conversations(named[i][2].category):
                on_entry()  # nothing was scored

    cost = [_file_cost(rf) for rf, _ in sources]  # the costliest first: a short tail
    owns = parallel.run_ordered(_own_in_worker, list(range(len(named))), jobs=jobs, shared=job,
                                on_tick=on_entry, on_done=done, cost=cost,
                                meanwhile=meanwhile, mp_context=ctx, cancel=cancel)
    files = []
    for (rf, _), own in zip(sources, owns, strict=True):
        if isinstance(own, parallel.Failed):  # as the parent's own load would report it
            lf = LoadedFile(rf)
            f = _File(lf, 0, failed=own.reason)
            files.append(f)
            continue
        lf = LoadedFile(rf, lines=own.lines, problems=list(own.problems), sha256=own.sha256)
        f = _File(lf, len(own.problems), own.needed, None, own.decoder_error, failed=own.failed)
        if own.part is not None:
            _merge_file(f, [((-1, None), own.part)])
        files.append(f)
    return files


def _file_cost(rf: ResultFile) -> float:
    """A guess at what loading and scoring a whole file costs, in seconds of one core: a
    share for its category's conversations and one for its size. Measured on the shared runs
    (warm cache): a 0.14 MB file 0.10-0.13 s, a 2.1-3.0 MB one 0.15-0.21 s, but a 0.14 MB
    long-context file 0.36-0.40 s (its replay carries the large long-context states), so long
    context costs 3.5 times a category's share: it is scored first, not last, and the two
    workers end together."""
    try:
        size = rf.path.stat().st_size
    except OSError:
        size = 0
    return (0.35 if bfcl.is_long_context(rf.category) else 0.1) + 0.04 * size / 2**20


def _merge(files: list[_File], tasks: list[Task], parts: list[Any], job: _Job,
           cancel: parallel.Cancel = None, ctx: Any = None) -> None:
    """Each file's parts as one score, in bfcl's order, as the serial run gives it (a file
    scored again whole: in a worker of ``ctx`` when given, else here)."""
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
            whole = parallel.run_ordered(_score_here, [(index, None)], jobs=1,
                                         shared=_whole_job(job, f) if ctx is None
                                         or job.loaded is not None else job, cancel=cancel,
                                         mp_context=ctx, in_process=ctx is None)[0]
            if isinstance(whole, parallel.Failed):
                f.failed = whole.reason
                continue
            got = [((index, None), whole)]
        _merge_file(f, got)


def _whole_job(job: _Job, f: _File) -> _Job:
    """``job`` with the parent's loaded files, to score one of them here."""
    if job.loaded is not None:
        return job
    mine = [src[0] is f.loaded.file for src in job.sources]
    return replace(job, loaded=[f.loaded if m else None for m in mine],
                   handlers=[f.handler if m else None for m in mine])


def _merge_file(f: _File, got: list[tuple[Task, _Part]]) -> None:
    """A file's score from its parts' results and problems, in bfcl's order."""
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
