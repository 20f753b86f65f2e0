"""Scoring many result files together: plan each run (load, choose decoders), score every file
in worker processes (:mod:`careful_engine.parallel`), then assemble the runs in input order.

A file is scored by :func:`careful_engine.scoring.score_file` exactly as in a serial run, in a
fresh bfcl process state of its own, so the order in which workers finish changes nothing. A
file whose scoring fails (or kills its worker) becomes one problem line for that file; the rest
is scored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import bfcl, parallel, refcache
from .budget import Budget
from .runs import LoadedFile, Problem
from .scoring import (
    CategoryScore,
    DecoderUnavailable,
    ModelScore,
    RunScore,
    folder_decoder,
    load_run,
    score_file,
)


@dataclass
class RunPlan:
    """One run folder, loaded: per model folder its files and decoder key (None: nothing to
    decode), or why it cannot be scored."""

    run_dir: Path
    loaded: dict[str, list[LoadedFile]]
    problems: list[Problem]
    keys: dict[str, str | None] = field(default_factory=dict)
    decoders: dict[str, str | None] = field(default_factory=dict)  # shown in the ModelScore
    unusable: dict[str, str] = field(default_factory=dict)


def plan_run(run_dir: Path, decoder: str | None = None,
             models: list[str] | None = None) -> RunPlan:
    loaded, problems = load_run(run_dir, models)
    plan = RunPlan(run_dir, loaded, problems)
    for model_dir, files in loaded.items():
        try:
            key, handler = folder_decoder(model_dir, files, decoder)
        except DecoderUnavailable as e:
            plan.unusable[model_dir] = str(e)
            continue
        plan.keys[model_dir] = key if handler is not None else None
        plan.decoders[model_dir] = key if handler is not None else None
    return plan


@dataclass
class _Job:
    """What every worker shares (inherited, not copied, where processes fork)."""

    files: list[LoadedFile]
    keys: list[str | None]
    effects: Any
    detector: str
    budget: Budget | None
    keep_traces: bool


def _score_task(index: int, job: _Job, tick: Callable[[], None]) -> CategoryScore:
    key = job.keys[index]
    handler = bfcl.handler(key) if key is not None else None
    try:
        return score_file(job.files[index], handler, keep_traces=job.keep_traces,
                          on_entry=tick, effects=job.effects, detector=job.detector,
                          budget=job.budget)
    finally:
        refcache.flush()  # the references this file recorded, for every later process


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
    """Score every usable file of ``plans`` with up to ``jobs`` worker processes; one
    :class:`RunScore` per plan, in order (the same result for any ``jobs``)."""
    if on_start:
        on_start(sum(len(bfcl.conversations(lf.file.category))
                     for p in plans for fs in p.loaded.values() for lf in fs))
    tasks: list[tuple[int, str, LoadedFile]] = []
    for n, plan in enumerate(plans):
        for model_dir, files in plan.loaded.items():
            if model_dir in plan.unusable:
                if on_entry:
                    for lf in files:
                        for _ in bfcl.conversations(lf.file.category):
                            on_entry()
                continue
            tasks.extend((n, model_dir, lf) for lf in files)
    job = _Job([lf for *_, lf in tasks], [plans[n].keys[m] for n, m, _ in tasks], effects,
               detector, budget, keep_traces)
    serial = jobs <= 1 or len(tasks) <= 1
    if serial and on_file:
        def task_fn(i: int, shared: _Job, tick: Callable[[], None]) -> CategoryScore:
            on_file(tasks[i][1], tasks[i][2].file.category)
            return _score_task(i, shared, tick)
    else:
        task_fn = _score_task

    def done(i: int, _: Any) -> None:
        if not serial and on_file:
            on_file(tasks[i][1], tasks[i][2].file.category)

    known = [len(lf.problems) for *_, lf in tasks]  # score_file adds the entries it cannot score
    results = parallel.run_ordered(task_fn, list(range(len(tasks))), jobs=jobs, shared=job,
                                   on_tick=on_entry, on_done=done)
    out = [RunScore([], [], p.problems, []) for p in plans]
    per_model: dict[tuple[int, str], ModelScore] = {}
    for i, ((n, model_dir, lf), result) in enumerate(zip(tasks, results, strict=True)):
        ms = per_model.get((n, model_dir))
        if ms is None:
            ms = per_model[(n, model_dir)] = ModelScore(model_dir, plans[n].decoders[model_dir])
        if isinstance(result, parallel.Failed):
            out[n].problems.append(Problem(str(lf.file.path), f"not scored: {result.reason}"))
            continue
        added = result.problems[known[i]:]
        if len(lf.problems) == known[i]:  # scored in a worker: its copy was added to
            lf.problems.extend(added)
        out[n].problems.extend(added)
        ms.categories[lf.file.category] = result
        out[n].files.append((lf, result))
    for n, plan in enumerate(plans):
        for model_dir in plan.loaded:
            if model_dir in plan.unusable:
                out[n].unusable.append(plan.unusable[model_dir])
                continue
            ms = per_model.get((n, model_dir))
            if ms is not None and ms.categories:
                out[n].scores.append(ms)
            elif ms is not None:
                out[n].unusable.append(f"model folder {model_dir!r}: no file could be scored")
    return out
