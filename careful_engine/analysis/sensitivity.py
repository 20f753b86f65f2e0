"""How much the effect-aware result depends on the rules' settings (paper §7, "Sensitivity").

Each run is replayed once with its traces kept; the rules are then re-evaluated on the traces
under every setting (a destructive boundary, a question detector, and what the safe verdict
counts: attempted or effective collateral, all or visible duplicate writes), and the traces
dropped before the next run. Reported per setting: Spearman's rho between the BFCL and the
safe ranking (per category and on the mean) and between the safe ranking and the default's;
per entry, how every count and the safe accuracy move against the default setting; and one
table per entry with its safe score under every setting (plus, for confirm runs, the logged
scripted-user answers re-judged under the stricter scripts, :mod:`careful_engine.analysis.reexamine`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.analysis.leaderboard import Scored, score_runs
from careful_engine.analysis.reexamine import Reexamination, reexamine_run
from careful_engine.core import bfcl
from careful_engine.effects import boundary as boundaries
from careful_engine.scoring.detector import DETECTORS
from careful_engine.scoring.rules import (
    Effects,
    SafeRule,
    applicable,
    evaluate,
    safe_valid,
    strict_valid,
)
from careful_engine.scoring.score import MISSING, UNSCORABLE, ModelScore, RunScore
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
    """The boundary files in declarations/boundary/, by name."""
    return sorted(p.stem for p in boundaries.boundary_dir().glob("*.json"))


def settings_for(
    extra_boundaries: list[str] | None = None,
    detectors: list[str] | None = None,
    default: Setting | None = None,
    grid: bool = False,
    variants: bool = True,
) -> list[Setting]:
    """The default first; then every detector under the default boundary, every boundary
    (found in declarations/boundary/ and given) under the default detector, and (``variants``)
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
        return sum(values.get(c) or 0.0 for c in bfcl.CATEGORIES) / len(bfcl.CATEGORIES)

    @property
    def confirm(self) -> bool:
        """Some category ran under the confirmation protocol (has a strict accuracy)."""
        return any(v is not None for v in self.strict.values())

    def value(self, category: str | None, kind: str) -> float | None:
        return self.mean(kind) if category is None else getattr(self, kind).get(category)


def rescore_model(ms: ModelScore, settings: list[Setting],
                  effects: dict[str, Effects]) -> dict[Setting, Rescored]:
    """Re-evaluate the rules of every kept trace under each setting (no replay).

    ``effects`` maps each setting's boundary to its loaded :class:`Effects`. The rules are
    evaluated once per boundary and detector; the safe-rule variants read the same counts. A
    conversation without a trace (a missing entry, or one that could not be scored) fails
    every score, as in :mod:`careful_engine.scoring.score`.
    """
    out: dict[Setting, Rescored] = {s: Rescored(s, ms.model, {}, {}, {}) for s in settings}
    groups: dict[tuple[str, str], list[Setting]] = {}
    for s in settings:
        groups.setdefault(s.key, []).append(s)
    for (boundary, detector), members in groups.items():
        eff = effects[boundary]
        for c, cs in ms.categories.items():
            safe = dict.fromkeys(members, 0)
            strict = dict.fromkeys(members, 0)
            counts: Counter = Counter()
            for r in cs.results:
                if r.trace is None:
                    if r.verdict.error_type not in (MISSING, UNSCORABLE):
                        raise ValueError(f"{r.id}: no trace kept; score with keep_traces=True")
                    continue
                rules = evaluate(r.trace, eff, detector)
                counts.update(rules.counts)
                for s in members:
                    safe[s] += safe_valid(r.verdict.valid, rules, s.rule)
                    strict[s] += strict_valid(r.verdict.valid, rules, s.rule)
            applicable(counts, cs.confirm)  # as the category's rule totals
            n = cs.total or 1
            for s in members:
                res = out[s]
                res.counts.update(counts)
                res.bfcl[c], res.safe[c] = cs.accuracy, safe[s] / n
                res.strict[c] = strict[s] / n if cs.confirm else None
    return out


def drop_traces(ms: ModelScore) -> None:
    """Free the replayed traces (and their states) of a model score."""
    for cs in ms.categories.values():
        for r in cs.results:
            r.trace = None


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
    """Replay every run once (traces kept), re-evaluate the rules under every setting and
    re-judge the confirm entries' scripted-user answers, run by run, dropping the traces
    before the next run (memory stays bounded by one run). ``score``: the keywords of
    :func:`~careful_engine.analysis.leaderboard.score_runs` (decoders, jobs, progress);
    ``warn`` hears what :func:`~careful_engine.analysis.reexamine.reexamine_run` warns of.
    The Sensitivity is None when no entry could be scored."""
    default = effects[settings[0].boundary]
    rescored: dict[tuple[Path, str], dict[Setting, Rescored]] = {}
    reexamined: dict[tuple[Path, str], Reexamination | None] = {}

    def on_run(run_dir: Path, run: RunScore) -> None:  # re-evaluate, then free the traces
        for ms in run.scores:
            rescored[(run_dir, ms.model)] = rescore_model(ms, settings, effects)
            reexamined[(run_dir, ms.model)] = reexamine_run(run, ms, default.boundary, warn)
            drop_traces(ms)

    scored = score_runs(runs, effects=default, keep_traces=True, on_run=on_run, **score)
    if not scored.entries:
        return scored, None
    rows = {s: [rescored[(e.run, e.model)][s] for e in scored.entries] for s in settings}
    return scored, Sensitivity(settings, [e.label for e in scored.entries], rows, sizes,
                               [reexamined.get((e.run, e.model)) for e in scored.entries])
