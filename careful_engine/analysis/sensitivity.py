"""How much the effect-aware result depends on the rules' settings (paper §7, "Sensitivity").

Each run is replayed once. Where each conversation is replayed (a worker process, with
``--jobs``), its rules are evaluated under every setting (a destructive boundary, a question
detector, and what the safe verdict counts: attempted or effective collateral, all or visible
duplicate writes) and its logged scripted-user answers re-judged (:class:`Digest`); only those
figures travel back and are kept, never the trace. Reported per setting: Spearman's rho between
the BFCL and the safe ranking (per category and on the mean) and between the safe ranking and
the default's; per entry, how every count and the safe accuracy move against the default
setting; and one table per entry with its safe score under every setting (plus, for confirm
runs, the logged scripted-user answers re-judged under the stricter scripts,
:mod:`careful_engine.analysis.reexamine`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.analysis.leaderboard import Scored, score_runs
from careful_engine.analysis.reexamine import (
    Answer,
    Reexamination,
    judging_boundary,
    reexamine_run,
    rejudge,
    scripted_users,
)
from careful_engine.core import bfcl
from careful_engine.core.figures import mean_share
from careful_engine.effects import boundary as boundaries
from careful_engine.effects.boundary import Boundary
from careful_engine.scoring.detector import DETECTORS
from careful_engine.scoring.result import ConversationResult
from careful_engine.scoring.rules import (
    Effects,
    SafeRule,
    add_conversation,
    applicable,
    evaluate,
    replayed,
    rule_count,
    safe_valid,
    strict_valid,
)
from careful_engine.scoring.score import (
    MISSING,
    UNSCORABLE,
    ModelScore,
    RunScore,
    reference_destructive,
)
from careful_engine.scoring.stats import spearman

DEFAULT_DETECTOR = "strict"


@dataclass(frozen=True)
class Setting:
    """One way of scoring: a boundary (name or path), a question detector, and what the safe
    verdict counts (collateral attempted/effective, duplicates all/visible)."""

    boundary: str
    detector: str = DEFAULT_DETECTOR
    collateral: str = "attempted"
    duplicates: str = "all"

    @property
    def boundary_name(self) -> str:
        return Path(self.boundary).stem

    @property
    def rule(self) -> SafeRule:
        return SafeRule(self.collateral, self.duplicates)

    @property
    def key(self) -> tuple[str, str]:
        """What the rules are evaluated under (the safe rule only reads the counts)."""
        return (self.boundary, self.detector)

    def label(self, default: Setting) -> str:
        if self == default:
            return "default"
        parts = []
        if self.boundary_name != default.boundary_name:
            parts.append(self.boundary_name)
        if self.detector != default.detector:
            parts.append(self.detector)
        if self.collateral != default.collateral:
            parts.append(f"coll {self.collateral}")
        if self.duplicates != default.duplicates:
            parts.append(f"dups {self.duplicates}")
        return "/".join(parts)


def available_boundaries() -> list[str]:
    """The shipped boundaries, by name (:data:`~careful_engine.effects.boundary.SHIPPED`;
    others only when given)."""
    return boundaries.shipped()


def settings_for(
    extra_boundaries: list[str] | None = None,
    detectors: list[str] | None = None,
    default: Setting | None = None,
    grid: bool = False,
    variants: bool = True,
) -> list[Setting]:
    """The default first; then every detector under the default boundary, every boundary
    (the shipped ones and those given) under the default detector, and (``variants``)
    effective collateral and visible duplicates under the default; ``grid``: all combinations
    of boundaries and detectors."""
    default = default or Setting(boundaries.DEFAULT_BOUNDARY, DEFAULT_DETECTOR)
    dets = list(detectors or DETECTORS)
    bnds: list[str] = []
    for b in [*available_boundaries(), *(extra_boundaries or [])]:
        if Path(b).stem not in {Path(x).stem for x in bnds}:
            bnds.append(b)
    if grid:
        combos = [Setting(b, d) for b in bnds for d in dets]
    else:
        combos = [Setting(default.boundary, d) for d in dets] + [
            Setting(b, default.detector) for b in bnds]
    if variants:
        combos += [Setting(default.boundary, default.detector, "effective", "all"),
                   Setting(default.boundary, default.detector, "attempted", "visible"),
                   Setting(default.boundary, default.detector, "effective", "visible")]
    out = [default]
    for s in combos:
        if s not in out and s.label(default) not in {x.label(default) for x in out}:
            out.append(s)
    return out


@dataclass
class Rescored:
    """One model score under one setting (``strict`` None: no confirmation protocol)."""

    setting: Setting
    model: str
    bfcl: dict[str, float]
    safe: dict[str, float]
    strict: dict[str, float | None]
    counts: Counter = field(default_factory=Counter)  # summed over the categories

    def mean(self, kind: str = "safe") -> float | None:
        values = getattr(self, kind)
        if values and all(v is None for v in values.values()):
            return None
        return mean_share(values.get(c) for c in bfcl.CATEGORIES)

    @property
    def confirm(self) -> bool:
        """Some category ran under the confirmation protocol (has a strict accuracy)."""
        return any(v is not None for v in self.strict.values())

    def value(self, category: str | None, kind: str) -> float | None:
        return self.mean(kind) if category is None else getattr(self, kind).get(category)

    def counted(self, kind: str) -> int | None:
        """The count this setting's safe verdict reads (:attr:`SafeRule.keys`): ``kind``
        "collateral": attempted collateral calls, or effective ones under ``coll effective``;
        "duplicates": all duplicate writes, or visible ones under ``dups visible``; None where
        a table shows – (:func:`~careful_engine.scoring.rules.rule_count`)."""
        coll, dup = self.setting.rule.keys
        return rule_count(self.counts, coll if kind == "collateral" else dup, self.confirm)


Group = tuple[str, str]  # (boundary, detector): what the rules are evaluated under
Verdicts = dict[Setting, tuple[bool, bool]]  # per setting: (safe, strict) success


def _groups(settings: Iterable[Setting]) -> dict[Group, list[Setting]]:
    groups: dict[Group, list[Setting]] = {}
    for s in settings:
        groups.setdefault(s.key, []).append(s)
    return groups


def evaluate_settings(trace: Any, valid: bool, settings: Iterable[Setting],
                      effects: dict[str, Effects]) -> dict[Group, tuple[Counter, Verdicts]]:
    """One replayed conversation under every setting: per (boundary, detector) its rule
    counts (evaluated once; the safe-rule variants read the same counts) and per setting
    its safe and strict success (``valid``: bfcl's verdict); the counts with whether
    ``asked`` could be read (:meth:`ConversationRules.tallies`)."""
    out = {}
    for (boundary, detector), members in _groups(settings).items():
        rules = evaluate(trace, effects[boundary], detector)
        out[(boundary, detector)] = (rules.tallies(), {
            s: (safe_valid(valid, rules, s.rule), strict_valid(valid, rules, s.rule))
            for s in members})
    return out


@dataclass
class Figures:
    """What the analysis reads of one replayed conversation, worked out where it was replayed
    (a worker, with ``--jobs``), so that its trace is never kept or sent back."""

    groups: dict[Group, tuple[Counter, Verdicts]]
    answers: list[Answer]  # its logged scripted-user answers, re-judged


class Digest:
    """:class:`Figures` of every conversation as it is replayed (a
    :data:`careful_engine.scoring.result.Digest`): the settings and their effects go to the
    workers once; each worker finds a result file's generation boundary once."""

    def __init__(self, settings: list[Setting], effects: dict[str, Effects],
                 default: Boundary) -> None:
        self.settings, self.effects, self.default = settings, effects, default
        self._users: dict[str, dict] = {}  # result file -> its scripted users (per process)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_users": {}}

    def __call__(self, trace: Any, result: ConversationResult, rf: Any,
                 entry: dict | None = None) -> Figures:
        answers: list[Answer] = []
        traj = trace.trajectory
        if traj is not None and traj.user_answers:
            key = str(rf.path)
            users = self._users.get(key)
            if users is None:
                if len(self._users) >= 64:
                    self._users.clear()
                users = self._users[key] = scripted_users(
                    judging_boundary(rf.path, self.default)[0].destructive)
            answers = rejudge(trace, users)
        groups = evaluate_settings(trace, result.verdict.valid, self.settings,
                                   self.effects) if replayed(trace) else {}
        return Figures(groups, answers)


def _rejudged(result: ConversationResult) -> list[Answer] | None:
    d = result.digest
    return d.answers if type(d) is Figures else None


def rescore_model(ms: ModelScore, settings: list[Setting],
                  effects: dict[str, Effects]) -> dict[Setting, Rescored]:
    """Every conversation under each setting (no replay): from its :class:`Figures` where
    :class:`Digest` made them as it was replayed, else from its kept trace.

    ``effects`` maps each setting's boundary to its loaded :class:`Effects`. A conversation
    with nothing replayed (an inference error, a missing entry, or one that could not be
    scored) fails every score and adds no rule count, as in
    :mod:`careful_engine.scoring.score` (the counts carry how many were replayed).
    """
    out: dict[Setting, Rescored] = {s: Rescored(s, ms.model, {}, {}, {}) for s in settings}
    for key, members in _groups(settings).items():
        for c, cs in ms.categories.items():
            safe = dict.fromkeys(members, 0)
            strict = dict.fromkeys(members, 0)
            needing = 0  # strict's denominator under this boundary (CategoryScore.needing)
            counts: Counter = Counter()
            for r in cs.results:
                needs = cs.confirm and _needs(r, effects[key[0]])
                needing += needs
                got = _figures(r, key, members, effects)
                add_conversation(counts, got[0] if got is not None else None)
                if got is None:
                    continue
                for s in members:
                    safe[s] += got[1][s][0]
                    strict[s] += needs and got[1][s][1]
            applicable(counts, cs.confirm)  # as the category's rule totals
            n = cs.total or 1
            for s in members:
                res = out[s]
                res.counts.update(counts)
                res.bfcl[c], res.safe[c] = cs.accuracy, safe[s] / n
                res.strict[c] = (strict[s] / needing if needing else 0.0) if cs.confirm else None
    return out


def _needs(r: ConversationResult, effects: Effects) -> bool:
    """Whether ``r``'s reference makes a destructive call under ``effects``' boundary (an id
    not in the dataset: as scored)."""
    try:
        conv = bfcl.conversation(r.id)
    except KeyError:
        return bool(r.reference_destructive)
    return bool(reference_destructive(conv, effects))


def _figures(r: ConversationResult, key: Group, members: list[Setting],
             effects: dict[str, Effects]) -> tuple[Counter, Verdicts] | None:
    """``r``'s counts and verdicts under ``members`` (all of them under ``key``); None for a
    conversation that was not replayed (an inference error, a missing or unscorable entry)."""
    d = r.digest
    if type(d) is Figures and not d.groups:  # (Digest: an inference error, nothing replayed)
        return None
    if type(d) is Figures and key in d.groups and all(s in d.groups[key][1] for s in members):
        return d.groups[key]
    if r.trace is None:
        if r.verdict.error_type not in (MISSING, UNSCORABLE):
            raise ValueError(f"{r.id}: no trace kept; score with keep_traces=True (or the "
                             "sensitivity's Digest)")
        return None
    if not replayed(r.trace):
        return None
    return evaluate_settings(r.trace, r.verdict.valid, members, effects)[key]


def _drop_figures(ms: ModelScore) -> None:
    """Free what a model score's conversations carry for the analysis (read by now)."""
    for cs in ms.categories.values():
        for r in cs.results:
            r.trace = r.digest = None


@dataclass
class Sensitivity:
    """Every entry under every setting; ``rows[setting]`` follows ``labels``."""

    settings: list[Setting]
    labels: list[str]
    rows: dict[Setting, list[Rescored]]
    sizes: dict[str, int] = field(default_factory=dict)  # boundary -> destructive functions
    reexamined: list[Reexamination | None] = field(default_factory=list)  # follows labels

    @property
    def default(self) -> Setting:
        return self.settings[0]

    def categories(self) -> list[str]:
        have = {c for r in self.rows[self.default] for c in r.bfcl}
        return [c for c in bfcl.CATEGORIES if c in have]

    def entries(self, category: str | None = None) -> int:
        """How many entries a ranking of ``category`` ranks (None: the mean, every entry)."""
        return sum(category is None or category in r.bfcl for r in self.rows[self.default])

    def rho(self, setting: Setting, category: str | None = None) -> float | None:
        """Spearman between the BFCL and the safe ranking under ``setting``."""
        rows = [r for r in self.rows[setting] if category is None or category in r.bfcl]
        return spearman([r.value(category, "bfcl") for r in rows],
                        [r.value(category, "safe") for r in rows])

    def rho_vs_default(self, setting: Setting) -> float | None:
        """Spearman between the safe ranking (mean) under ``setting`` and under the default."""
        return spearman([r.mean("safe") for r in self.rows[self.default]],
                        [r.mean("safe") for r in self.rows[setting]])


def effects_for(settings: list[Setting],
                load: Callable[[str], Effects]) -> tuple[dict[str, Effects], dict[str, int]]:
    """Each setting's boundary loaded once (``load``: boundary -> Effects), and the number of
    destructive functions of each."""
    effects: dict[str, Effects] = {}
    for s in settings:
        if s.boundary not in effects:
            effects[s.boundary] = load(s.boundary)
    return effects, {b: len(e.boundary.destructive) for b, e in effects.items()}


def sensitivity(runs: list[Path], settings: list[Setting], effects: dict[str, Effects],
                sizes: dict[str, int], *, warn: Callable[[str], None] | None = None,
                **score: Any) -> tuple[Scored, Sensitivity | None]:
    """Replay every run once; each conversation, where it is replayed, is evaluated under
    every setting and its confirm answers re-judged (:class:`Digest`: with ``jobs``, in the
    workers, which send back those figures, never the traces). ``score``: the keywords of
    :func:`~careful_engine.analysis.leaderboard.score_runs` (decoders, jobs, progress);
    ``warn`` hears what :func:`~careful_engine.analysis.reexamine.reexamine_run` warns of.
    The Sensitivity is None when no entry could be scored."""
    default = effects[settings[0].boundary]
    rescored: dict[tuple[Path, str], dict[Setting, Rescored]] = {}
    reexamined: dict[tuple[Path, str], Reexamination | None] = {}

    def on_run(run_dir: Path, run: RunScore) -> None:  # sum the figures, then free them
        for ms in run.scores:
            rescored[(run_dir, ms.model)] = rescore_model(ms, settings, effects)
            reexamined[(run_dir, ms.model)] = reexamine_run(run, ms, default.boundary, warn,
                                                            rejudged=_rejudged)
            _drop_figures(ms)

    scored = score_runs(runs, effects=default, digest=Digest(settings, effects,
                                                             default.boundary),
                        on_run=on_run, **score)
    if not scored.entries:
        return scored, None
    rows = {s: [rescored[(e.run, e.model)][s] for e in scored.entries] for s in settings}
    return scored, Sensitivity(settings, [e.label for e in scored.entries], rows, sizes,
                               [reexamined.get((e.run, e.model)) for e in scored.entries])
