"""Scoring many result files together: find each run's files, load and score every file in
worker processes (:mod:`careful_engine.core.parallel`), then assemble the runs in input order.

A worker loads its file, takes the decoder of its model folder if the file has anything to
decode (:func:`careful_engine.core.runs.needs_decoder`), and scores it with
:func:`careful_engine.scoring.score.score_file` exactly as a serial run does, in a fresh bfcl process
state of its own, so the order in which workers finish changes nothing. The parent then applies
the folder's rules as :func:`careful_engine.scoring.score.score_run` always has: a folder one of whose
files needs a decoder that cannot be had is unusable as a whole (its other files are dropped),
and problems are listed in the serial order (discovery, loading, scoring). A file whose scoring
fails (or kills its worker) becomes one problem line for that file; the rest is scored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl, parallel, refcache
from careful_engine.core.budget import Budget
from careful_engine.core.runs import (
    DecoderUnavailable,
    LoadedFile,
    Problem,
    ResultFile,
    load_result_file,
    manifest_decoder,
    needs_decoder,
)
from careful_engine.scoring.score import CategoryScore, ModelScore, RunScore, discover, score_file


@dataclass
class RunPlan:
    """One run folder: per model folder its result files and the decoder key it would use."""

    run_dir: Path
    files: dict[str, list[ResultFile]]
    problems: list[Problem]  # found while discovering the files
    keys: dict[str, str | None]  # None: the folder cannot be scored (see ``unusable``)
    unusable: dict[str, str]


def plan_run(run_dir: Path, decoder: str | None = None,
             models: list[str] | None = None) -> RunPlan:
    """The files of a run folder (nothing loaded yet) and each model folder's decoder key:
    ``decoder``, else the folder's ``careful_run.json``, else its registry key."""
    by_model, problems = discover(run_dir)
    if models:
        by_model = {m: v for m, v in by_model.items() if m in set(models)}
    keys: dict[str, str | None] = {}
    unusable: dict[str, str] = {}
    for m, files in by_model.items():
        try:
            keys[m] = decoder or manifest_decoder(files[0]) or bfcl.registry_key_for_dir(m)
        except DecoderUnavailable as e:  # its files are still loaded, for their problems
            keys[m], unusable[m] = None, str(e)
    return RunPlan(run_dir, by_model, problems, keys, unusable)


@dataclass
class _Job:
    """What every worker shares (inherited, not copied, where processes fork)."""

    files: list[ResultFile]
    keys: list[str | None]
    effects: Any
    detector: str
    budget: Budget | None
    keep_traces: bool


@dataclass
class _Scored:
    """One file, loaded and scored: ``score`` None when it needed a decoder that could not be
    had (``decoder_error``); ``loaded`` problems up to ``known`` came from loading it."""

    loaded: LoadedFile
    known: int
    needed: bool
    score: CategoryScore | None = None
    decoder_error: str | None = None


def _score_task(index: int, job: _Job, tick: Callable[[], None]) -> _Scored:
    lf = load_result_file(job.files[index])
    known = len(lf.problems)
    if lf.unreadable or job.keys[index] is None:  # reported, not scored
        return _Scored(lf, known, False)
    needed = needs_decoder(lf)
    handler = None
    if needed:
        try:
            handler = bfcl.handler(job.keys[index])
        except (bfcl.UnknownModel, RuntimeError) as e:
            return _Scored(lf, known, True, None, e.args[0] if e.args else str(e))
    try:
        cs = score_file(lf, handler, keep_traces=job.keep_traces, on_entry=tick,
                        effects=job.effects, detector=job.detector, budget=job.budget)
    finally:
        refcache.flush()  # the references this file recorded, for every later process
    return _Scored(lf, known, needed, cs)


def _cost(rf: ResultFile) -> float:
    """A guess at what scoring a file costs: its size, long context counting double."""
    try:
        size = rf.path.stat().st_size
    except OSError:
        size = 0
    return size * (2 if bfcl.is_long_context(rf.category) else 1)


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
) -> list[RunScore]:
    """Load and score every file of ``plans`` with up to ``jobs`` worker processes; one
    :class:`RunScore` per plan, in order (the same result for any ``jobs``)."""
    tasks = [(n, m, rf) for n, p in enumerate(plans) for m, files in p.files.items()
             for rf in files]
    if on_start:
        on_start(sum(len(bfcl.conversations(rf.category)) for *_, rf in tasks))
    job = _Job([rf for *_, rf in tasks], [plans[n].keys[m] for n, m, _ in tasks], effects,
               detector, budget, keep_traces)
    serial = jobs <= 1 or len(tasks) <= 1

    def task_fn(i: int, shared: _Job, tick: Callable[[], None]) -> _Scored:
        if on_file:
            on_file(tasks[i][1], tasks[i][2].category)
        return _score_task(i, shared, tick)

    def done(i: int, result: Any) -> None:
        if not serial and on_file:
            on_file(tasks[i][1], tasks[i][2].category)
        if on_entry and (not isinstance(result, _Scored) or result.score is None):
            for _ in bfcl.conversations(tasks[i][2].category):  # nothing was scored
                on_entry()

    results = parallel.run_ordered(task_fn if serial else _score_task,
                                   list(range(len(tasks))), jobs=jobs, shared=job,
                                   on_tick=on_entry, on_done=done,
                                   cost=None if serial else [_cost(rf) for *_, rf in tasks])
    return [_assemble(n, plan, tasks, results) for n, plan in enumerate(plans)]


def _assemble(n: int, plan: RunPlan, tasks: list, results: list) -> RunScore:
    """One run's score from its files' results, as a serial score_run builds it."""
    mine = [(m, rf, r) for (k, m, rf), r in zip(tasks, results, strict=True) if k == n]
    run = RunScore([], [], list(plan.problems), [])
    for _, _, r in mine:  # what loading found, every file of every folder first
        if isinstance(r, _Scored):
            run.problems.extend(r.loaded.problems[:r.known])
    unusable = {}
    for m, _, r in mine:
        if isinstance(r, _Scored) and r.decoder_error is not None and m not in unusable:
            unusable[m] = f"model folder {m!r}: {r.decoder_error}"
    for m in plan.files:
        outs = [(rf, r) for mm, rf, r in mine if mm == m
                and not (isinstance(r, _Scored) and r.loaded.unreadable)]
        if not outs:
            continue  # no readable file: its problems say why
        if m in plan.unusable:
            run.unusable.append(plan.unusable[m])
            continue
        if m in unusable:
            run.unusable.append(unusable[m])
            continue
        needed = any(isinstance(r, _Scored) and r.needed for _, r in outs)
        ms = ModelScore(m, plan.keys[m] if needed else None)
        for rf, r in outs:
            if isinstance(r, parallel.Failed):
                run.problems.append(Problem(str(rf.path), f"not scored: {r.reason}"))
                continue
            run.problems.extend(r.loaded.problems[r.known:])  # entries it could not score
            ms.categories[rf.category] = r.score
            run.files.append((r.loaded, r.score))
        if ms.categories:
            run.scores.append(ms)
        else:
            run.unusable.append(f"model folder {m!r}: no file could be scored")
    return run
