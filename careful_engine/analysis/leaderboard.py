"""Ranking runs under both scores (paper §7, Table 3): BFCL accuracy and success under effect
safety, with Spearman's rho between the two rankings, overall and per category.

Every model folder of every run folder is one :class:`Entry`. The mean is bfcl's unweighted
mean over the four categories with an absent category counting as 0; a per-category ranking
only ranks the entries that have the category.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.parallel import Cancel, MpContext
from careful_engine.core.runs import (  # (the mark: re-exported, as the tables use it)
    SYNTHETIC_MARK,  # noqa: F401
    Problem,
    find_result_files,
    owning_run,
    result_model_folder,
    shared_names,
    synthetic_label,
)
from careful_engine.scoring.batch import RunPlan, counting, plan_run, score_plans
from careful_engine.scoring.decoders import DecoderChoice
from careful_engine.scoring.result import Digest
from careful_engine.scoring.rules import Effects
from careful_engine.scoring.score import (
    CategoryScore,
    ConversationResult,
    ModelScore,
    RunScore,
    discover,
)
from careful_engine.scoring.stats import Paired, paired, prefetch, ranks, spearman

KINDS = {"bfcl": "accuracy", "safe": "safe_accuracy", "strict": "strict_accuracy"}


# ---------------------------------------------------------------- scoring


@dataclass
class Entry:
    """One model folder of one run folder, scored."""

    label: str
    run: Path
    score: ModelScore

    @property
    def model(self) -> str:
        return self.score.model

    @property
    def decoder(self) -> str | None:
        return self.score.decoder

    @property
    def folder(self) -> Path | None:
        """The model folder its files are in (None when no category names its file)."""
        return self.score.folder

    def accuracy(self, category: str | None = None, kind: str = "bfcl") -> float | None:
        """A category's accuracy (None if absent), or bfcl's four-category mean (absent = 0)."""
        attr = KINDS[kind]
        if category is None:
            return self.score.mean_accuracy(attr)
        cs = self.score.categories.get(category)
        return getattr(cs, attr) if cs is not None else None

    def rule_totals(self) -> Counter:
        """Summed over the categories (a rule meaningful only under the confirmation protocol
        over the categories run under it)."""
        out: Counter = Counter()
        for cs in self.score.categories.values():
            out.update(cs.rule_totals())
        return out


@dataclass
class Scored:
    """Several run folders scored (one :class:`RunScore` per run folder and decoder), their
    model folders as labelled entries, what could not be used, and ``notes`` on what was given
    that do not stop anything (a folder given twice)."""

    entries: list[Entry]
    runs: list[tuple[Path, RunScore]]
    problems: list[Problem]
    unusable: list[str]
    notes: list[str] = field(default_factory=list)


def distinct_runs(runs: list[Path], notes: list[str]) -> list[Path]:
    """``runs`` with each folder once (``d/R``, ``d/R/`` and a link to it are one folder); a
    repeat is left out and noted in ``notes`` as ``R: given more than once (as F first);
    scored once``; so is a folder that holds the very model folders an earlier one holds
    (``R`` and ``R/result``). A parent folder of runs whose model folders share a name is
    taken as those runs (:func:`split_runs`), so that none of them is lost."""
    seen: dict[object, Path] = {}
    out: list[Path] = []
    for run_dir, held in [r for given in runs for r in _runs_of(given, notes)]:
        real = os.path.realpath(run_dir)
        first = seen.get(real) or (seen.get(held) if held else None)
        if first is not None:  # (by path: the same Path object given twice is a repeat too)
            notes.append(f"{run_dir}: given more than once (as {first} first"
                         f"{'' if seen.get(real) else ', the same model folders'}); "
                         "scored once")
        else:
            seen[real] = run_dir
            if held:
                seen.setdefault(held, run_dir)
            out.append(run_dir)
    return out


def split_runs(path: Path, notes: list[str]) -> list[Path]:
    """``path``, or the run folders under it where several of them hold a model folder of
    the same name (one run of a model per run folder, side by side: as one folder, one of
    them would be lost, a model's files being taken once per category), noted in ``notes``."""
    return [run for run, _ in _runs_of(path, notes)]


def _runs_of(path: Path, notes: list[str]) -> list[tuple[Path, frozenset[str]]]:
    """:func:`split_runs`, each run with the model folders (real paths) its result files are
    in (the folder tree walked once)."""
    files = find_result_files(path)[0] if path.is_dir() else []
    folders = [result_model_folder(rf.path) for rf in files]
    clash = shared_names(files)
    if not clash or any(len({owning_run(f) for f in fs}) < len(fs) for fs in clash.values()):
        # (model folders of one name in one run: nothing to split them by)
        return [(path, frozenset(os.path.realpath(f) for f in folders))]
    by_run: dict[Path, set[str]] = {}
    for folder in folders:
        by_run.setdefault(owning_run(folder), set()).add(os.path.realpath(folder))
    runs = sorted(by_run)
    notes.append(f"{path}: holds {len(runs)} runs, some with a model folder of the same name "
                 f"({', '.join(clash)}); ranked as those runs: "
                 f"{', '.join(r.name for r in runs)}")
    return [(run, frozenset(by_run[run])) for run in runs]


def label_entries(pairs: list[tuple[Path, str]],
                  folders: list[Path | None] | None = None) -> list[str]:
    """Short unique labels for (run folder as given, model folder name) pairs, from the run
    folder each model folder belongs to (:func:`owning_run`: ``R``, ``R/result``,
    ``R/result/M`` and ``R/result/M/multi_turn`` are all run ``R``): its name, with
    ``/MODEL`` when several of its model folders are entries; runs of one name in different
    places get as many of the folders above them as tell them apart. ``folders``: each
    entry's model folder (where its files are); where None, taken to be ``RUN/MODEL``."""
    folders = folders or [None] * len(pairs)
    runs = [owning_run(folder if folder is not None else
                       run.parent if run.name == "multi_turn" else run / model)
            for (run, model), folder in zip(pairs, folders, strict=True)]
    models: dict[Path, set[str]] = {}
    for run, (_, model) in zip(runs, pairs, strict=True):
        models.setdefault(run, set()).add(model)
    depth = [1] * len(pairs)

    def label(i: int) -> str:
        run, model = runs[i], pairs[i][1]
        name = str(Path(*run.parts[-depth[i]:]))
        return name if len(models[run]) == 1 else f"{name}/{model}"

    while True:
        labels = [label(i) for i in range(len(pairs))]
        seen = Counter(labels)
        longer = [i for i, lab in enumerate(labels)
                  if seen[lab] > 1 and depth[i] < len(runs[i].parts)]
        if not longer:
            break
        for i in longer:
            depth[i] += 1
    # the same model folder reached from two folders given (R and R/result): as given
    return [str(pairs[i][0]) if seen[lab] > 1 else lab for i, lab in enumerate(labels)]


def score_runs(runs: list[Path], *, models: list[str] | None = None,
               **options: Any) -> Scored:
    """Score every model folder (or those in ``models``) of every run folder, with one
    :func:`score_run` per decoder used.

    ``options`` are :func:`score_run_groups`'s (``decoders``, ``effects``, ``detector``,
    ``keep_traces``, ``digest``, the ``on_*`` callbacks, ``jobs``, ``keep_entries``,
    ``mp_context``, ``cancel``). ``on_run`` sees each run's score as soon as it is done (with
    ``keep_traces``, before the next run is scored: a caller that reads the traces there and
    drops them keeps memory bounded by one run's; ``digest`` reads them where they are made,
    in the workers, and keeps none);
    ``keep_entries``, ``mp_context``, ``cancel`` and ``on_progress``: see
    :func:`careful_engine.scoring.batch.score_plans` (a cancelled call raises
    :class:`careful_engine.core.parallel.Cancelled`).
    """
    return score_run_groups([(runs, models)], **options)[0]


def score_run_groups(
    groups: list[tuple[list[Path], list[str] | None]],
    *,
    decoders: DecoderChoice | None = None,
    effects: Effects | None = None,
    detector: str = "strict",
    keep_traces: bool = False,
    digest: Digest | None = None,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[str, str], None] | None = None,
    on_entry: Callable[[], None] | None = None,
    on_run: Callable[[Path, RunScore], None] | None = None,
    jobs: int = 1,
    keep_entries: bool = True,
    mp_context: MpContext = None,
    cancel: Cancel = None,
    on_progress: Callable[[int, int], None] | None = None,
    detail: bool = True,
) -> list[Scored]:
    """:func:`score_runs` of several (runs, models) groups with every file in one pool of
    workers (``compare`` scores its two runs so): one :class:`Scored` per group, each what
    ``score_runs(runs, models=models)`` alone gives. ``detail``: see
    :func:`careful_engine.scoring.batch.score_plans`."""
    decoders = decoders or DecoderChoice()
    out = [Scored([], [], [], []) for _ in groups]
    plans: list[RunPlan] = []
    owner: list[int] = []  # the group of each plan
    for g, (runs, models) in enumerate(groups):
        for run_dir in distinct_runs(runs, out[g].notes):
            by_model, _ = discover(run_dir)
            by_key: dict[str | None, list[str]] = {}
            for model, files in by_model.items():
                if models and model not in models:
                    continue
                by_key.setdefault(decoders.for_model(run_dir, model, files[0]), []).append(model)
            if not by_key:
                what = (f"no model folder {', '.join(models)} (found: {', '.join(by_model)})"
                        if models and by_model else
                        "no multi-turn result files (BFCL_v3/v4_multi_turn_*_result.json)")
                out[g].unusable.append(f"{run_dir}: {what}")
                continue
            for key, folders in by_key.items():
                plans.append(plan_run(run_dir, key, folders))
                owner.append(g)
    if on_progress is not None:  # one count over every plan (scored together or one by one)
        total = sum(len(bfcl.conversations(rf.category))
                    for p in plans for files in p.files.values() for rf in files)
        on_entry = counting(on_entry, on_progress, total)
        on_progress(0, total)
    kw = dict(effects=effects, detector=detector, keep_traces=keep_traces, digest=digest, jobs=jobs,
              on_start=on_start, on_file=on_file, on_entry=on_entry,
              keep_entries=keep_entries, mp_context=mp_context, cancel=cancel,
              detail=detail, meanwhile=prefetch)  # the rankings' statistics, while the workers score
    # every file of every run across the workers at once; with traces kept, run by run,
    # lazily: each run reaches ``on_run`` (which drops its traces) before the next is scored,
    # so memory stays bounded by one run's traces (a list here held every run's at once)
    done = ((r for p in plans for r in score_plans([p], **kw)) if keep_traces
            else score_plans(plans, **kw))
    pairs: list[list[tuple[Path, ModelScore]]] = [[] for _ in groups]
    for g, plan, run in zip(owner, plans, done, strict=True):
        run_dir, scored = plan.run_dir, out[g]
        scored.runs.append((run_dir, run))
        scored.problems.extend(run.problems)
        scored.unusable.extend(f"{run_dir}: {m}" for m in run.unusable)
        pairs[g].extend((run_dir, ms) for ms in run.scores)
        if on_run:
            on_run(run_dir, run)
    for scored, mine in zip(out, pairs, strict=True):
        unique: dict[str, Problem] = {}
        for prob in scored.problems:  # one score_run per decoder group repeats discovery notes
            unique.setdefault(str(prob), prob)
        scored.problems = list(unique.values())
        entries = [Entry("", r, ms) for r, ms in mine]
        folders = [e.folder for e in entries]
        labels = label_entries([(r, ms.model) for r, ms in mine], folders)
        for e, lab in zip(entries, labels, strict=True):
            e.label = synthetic_label(lab, e.score.synthetic)
        scored.entries = entries
    return out


# ---------------------------------------------------------------- ranking


@dataclass
class Ranking:
    """Both rankings of the entries that have the category (all entries for the mean)."""

    category: str | None
    labels: list[str]
    bfcl: list[float]
    safe: list[float]

    @property
    def bfcl_ranks(self) -> list[int]:
        return ranks(self.bfcl)

    @property
    def safe_ranks(self) -> list[int]:
        return ranks(self.safe)

    @property
    def rho(self) -> float | None:
        return spearman(self.bfcl, self.safe)

    @property
    def n(self) -> int:
        return len(self.labels)


def ranking(entries: list[Entry], category: str | None = None,
            other: str = "safe") -> Ranking:
    """BFCL accuracy against ``other`` (safe or strict) for one category or the mean."""
    have = [e for e in entries if category is None or category in e.score.categories]
    return Ranking(category, [e.label for e in have],
                   [e.accuracy(category, "bfcl") for e in have],
                   [e.accuracy(category, other) for e in have])


def categories_of(entries: list[Entry]) -> list[str]:
    return [c for c in bfcl.CATEGORIES if any(c in e.score.categories for e in entries)]


def rank_order(entries: list[Entry]) -> list[Entry]:
    """Entries by BFCL mean, best first (ties by safe mean, then label)."""
    return sorted(entries, key=lambda e: (-e.accuracy(None, "bfcl"),
                                          -e.accuracy(None, "safe"), e.label))


# ---------------------------------------------------------------- paired comparison (Table 5)

VERDICTS: dict[str, Callable[[ConversationResult], bool]] = {
    "bfcl": lambda r: r.verdict.valid,
    "safe": lambda r: r.safe_valid,
    "strict": lambda r: bool(r.strict_valid),  # None (no protocol): not a pass
}


def verdicts(cs: CategoryScore, kind: str = "bfcl") -> dict[str, bool]:
    """Conversation id -> passed, under BFCL's verdict, effect safety or the strict verdict
    (strict: of the conversations whose reference makes a destructive call, those the strict
    figure is over: :attr:`CategoryScore.strict_accuracy`)."""
    ok = VERDICTS[kind]
    return {r.id: ok(r) for r in cs.results
            if kind != "strict" or r.reference_destructive}


@dataclass
class Comparison:
    """Two model scores paired by conversation id: per shared category and overall."""

    kind: str
    categories: dict[str, Paired]
    only_a: list[str]  # categories only A has (not paired)
    only_b: list[str]

    @property
    def overall(self) -> Paired:
        out = Paired(sum(p.n for p in self.categories.values()),
                     sum(p.passes_a for p in self.categories.values()),
                     sum(p.passes_b for p in self.categories.values()))
        for p in self.categories.values():
            out.gained += p.gained
            out.lost += p.lost
        return out


def without_protocol(score: ModelScore) -> bool:
    """Whether no category of ``score`` ran under the confirmation protocol: strict success
    is not applicable to it (no destructive call can be confirmed there), so a strict
    comparison with it would pair failures that mean nothing."""
    return not any(cs.confirm for cs in score.categories.values())


def compare(a: ModelScore, b: ModelScore, kind: str = "bfcl") -> Comparison:
    """Pair the conversations of two model scores (A the baseline, B the condition)."""
    cats = [c for c in bfcl.CATEGORIES if c in a.categories and c in b.categories]
    return Comparison(
        kind,
        {c: paired(verdicts(a.categories[c], kind), verdicts(b.categories[c], kind))
         for c in cats},
        [c for c in bfcl.CATEGORIES if c in a.categories and c not in b.categories],
        [c for c in bfcl.CATEGORIES if c in b.categories and c not in a.categories],
    )
