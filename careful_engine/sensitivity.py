"""How much the effect-aware result depends on the rules' settings (paper §7, "Sensitivity").

Each run is replayed once with its traces kept; the rules are then re-evaluated on the traces
under every setting (a destructive boundary and a question detector), and the traces dropped
before the next run. Reported per setting: Spearman's rho between the BFCL and the safe
ranking (per category and on the mean) and between the safe ranking and the default's; per
entry, how every count and the safe accuracy move against the default setting.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from . import bfcl
from . import boundary as boundaries
from .detector import DETECTORS
from .leaderboard import TERMINAL_CATEGORY, fixed, fmt_rho, terminal_table
from .report import Report, pct, short
from .rules import Effects, evaluate, safe_valid, strict_valid
from .scoring import MISSING, ModelScore
from .stats import spearman

DEFAULT_DETECTOR = "strict"

# (column, rule count key) shown per entry and setting; safe/strict accuracy come after.
COUNTS = [
    ("collateral", "collateral"),
    ("asked", "asked"),
    ("asked destr.", "asked_destructive"),
    ("dup. writes", "duplicate_writes"),
    ("destructive calls", "destructive_calls"),
    ("unconfirmed", "unconfirmed"),
]


@dataclass(frozen=True)
class Setting:
    """One way of scoring: a boundary (name or path) and a question detector."""

    boundary: str
    detector: str = DEFAULT_DETECTOR

    @property
    def boundary_name(self) -> str:
        return Path(self.boundary).stem

    def label(self, default: Setting) -> str:
        if self == default:
            return "default"
        if self.boundary_name == default.boundary_name:
            return self.detector
        if self.detector == default.detector:
            return self.boundary_name
        return f"{self.boundary_name}/{self.detector}"


def available_boundaries() -> list[str]:
    """The boundary files in declarations/boundary/, by name."""
    return sorted(p.stem for p in boundaries.boundary_dir().glob("*.json"))


def settings_for(
    extra_boundaries: list[str] | None = None,
    detectors: list[str] | None = None,
    default: Setting | None = None,
    grid: bool = False,
) -> list[Setting]:
    """The default first; then every detector under the default boundary and every boundary
    (found in declarations/boundary/ and given) under the default detector; ``grid``: all
    combinations."""
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
    out = [default]
    for s in combos:
        if s not in out and s.label(default) not in {x.label(default) for x in out}:
            out.append(s)
    return out


@dataclass
class Rescored:
    """One model score under one setting."""

    setting: Setting
    model: str
    bfcl: dict[str, float]
    safe: dict[str, float]
    strict: dict[str, float]
    counts: Counter = field(default_factory=Counter)  # summed over the categories

    def mean(self, kind: str = "safe") -> float:
        values = getattr(self, kind)
        return sum(values.get(c, 0.0) for c in bfcl.CATEGORIES) / len(bfcl.CATEGORIES)

    def value(self, category: str | None, kind: str) -> float | None:
        return self.mean(kind) if category is None else getattr(self, kind).get(category)


def rescore_model(ms: ModelScore, settings: list[Setting],
                  effects: dict[str, Effects]) -> dict[Setting, Rescored]:
    """Re-evaluate the rules of every kept trace under each setting (no replay).

    ``effects`` maps each setting's boundary to its loaded :class:`Effects`. A conversation
    without a trace (a missing entry) fails every score, as in :mod:`careful_engine.scoring`.
    """
    out: dict[Setting, Rescored] = {}
    for s in settings:
        eff = effects[s.boundary]
        res = Rescored(s, ms.model, {}, {}, {})
        for c, cs in ms.categories.items():
            safe = strict = 0
            for r in cs.results:
                if r.trace is None:
                    if r.verdict.error_type != MISSING:
                        raise ValueError(f"{r.id}: no trace kept; score with keep_traces=True")
                    continue
                rules = evaluate(r.trace, eff, s.detector)
                res.counts.update(rules.counts)
                safe += safe_valid(r.verdict.valid, rules)
                strict += strict_valid(r.verdict.valid, rules)
            n = cs.total or 1
            res.bfcl[c], res.safe[c], res.strict[c] = cs.accuracy, safe / n, strict / n
        out[s] = res
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

    @property
    def default(self) -> Setting:
        return self.settings[0]

    def categories(self) -> list[str]:
        have = {c for r in self.rows[self.default] for c in r.bfcl}
        return [c for c in bfcl.CATEGORIES if c in have]

    def rho(self, setting: Setting, category: str | None = None) -> float | None:
        """Spearman between the BFCL and the safe ranking under ``setting``."""
        rows = [r for r in self.rows[setting] if category is None or category in r.bfcl]
        return spearman([r.value(category, "bfcl") for r in rows],
                        [r.value(category, "safe") for r in rows])

    def rho_vs_default(self, setting: Setting) -> float | None:
        """Spearman between the safe ranking (mean) under ``setting`` and under the default."""
        return spearman([r.mean("safe") for r in self.rows[self.default]],
                        [r.mean("safe") for r in self.rows[setting]])


def rho_report(sens: Sensitivity) -> Report:
    cats = sens.categories()
    rep = Report(
        "Rank correlation under each setting: Spearman's rho between the BFCL and the "
        "effect-safe ranking",
        ["setting", "boundary", "destructive fns", "detector", "entries",
         *[f"rho {short(c)}" for c in cats], "rho mean", "rho safe vs default"],
        name="sensitivity_rho",
        caption="rho safe vs default: Spearman between the safe ranking (mean) under the "
                "setting and under the default; – with fewer than two entries or a constant "
                "ranking",
    )
    for s in sens.settings:
        rep.add(s.label(sens.default), s.boundary_name, sens.sizes.get(s.boundary),
                s.detector, len(sens.labels), *[fixed(sens.rho(s, c), 2) for c in cats],
                fixed(sens.rho(s), 2), fixed(sens.rho_vs_default(s), 2))
    return rep


def counts_report(sens: Sensitivity) -> Report:
    cols = ["entry", "setting", "boundary", "detector"]
    for head, _ in COUNTS:
        cols += [head, f"Δ {head}"]
    cols += ["mean safe %", "Δ mean safe", "mean strict %", "Δ mean strict"]
    rep = Report("Counts (summed over the categories) and accuracies under each setting, "
                 "with the change against the default", cols, name="sensitivity_counts",
                 caption=f"default: boundary {sens.default.boundary_name}, detector "
                         f"{sens.default.detector}; BFCL accuracy does not depend on the setting")
    for i, label in enumerate(sens.labels):
        base = sens.rows[sens.default][i]
        for s in sens.settings:
            r = sens.rows[s][i]
            row: list = [label, s.label(sens.default), s.boundary_name, s.detector]
            for _, key in COUNTS:
                row += [r.counts.get(key, 0), r.counts.get(key, 0) - base.counts.get(key, 0)]
            for kind in ("safe", "strict"):
                row += [pct(r.mean(kind)), round(100 * (r.mean(kind) - base.mean(kind)), 1)]
            rep.add(*row)
    return rep


def rho_terminal(sens: Sensitivity) -> Table:
    cats = sens.categories()
    rows = [[s.label(sens.default), *[fmt_rho(sens.rho(s, c)) for c in cats],
             fmt_rho(sens.rho(s)), fmt_rho(sens.rho_vs_default(s))] for s in sens.settings]
    return terminal_table(
        f"Spearman's rho, BFCL vs safe ranking ({len(sens.labels)} entries)",
        ["setting", *[TERMINAL_CATEGORY[c] for c in cats], "mean", "vs def."], rows,
        "vs def.: the safe ranking under the setting against the default's (mean). Settings: "
        + "; ".join(f"{s.label(sens.default)} = {s.boundary_name} "
                    f"({sens.sizes.get(s.boundary, '?')} fns), {s.detector}"
                    for s in sens.settings),
        first_width=20)


def moves_terminal(sens: Sensitivity) -> Table:
    """Per entry and setting: the counts that move and the safe mean, with the change against
    the default in brackets."""
    metrics = [("coll", "collateral"), ("asked", "asked"), ("askD", "asked_destructive"),
               ("dupW", "duplicate_writes"), ("safe %", None)]
    table = terminal_table(
        "How the counts (summed over categories) and the safe mean move with the setting",
        ["entry / setting", *[h for h, _ in metrics]], [],
        "coll: collateral destructive calls; askD: asked where the reference acts "
        "destructively; dupW: duplicate writes; (±n): change against the default",
        first_width=26)
    for i, label in enumerate(sens.labels):
        base = sens.rows[sens.default][i]
        table.add_row(label, *[""] * len(metrics), style="bold")
        for j, s in enumerate(sens.settings):
            r = sens.rows[s][i]
            cells = []
            for _, key in metrics:
                if key is None:
                    v, d = 100 * r.mean("safe"), 100 * (r.mean("safe") - base.mean("safe"))
                    cells.append(f"{v:.1f}" + (f" ({d:+.1f})" if round(d, 1) else ""))
                else:
                    v, d = r.counts.get(key, 0), r.counts.get(key, 0) - base.counts.get(key, 0)
                    cells.append(f"{v}" + (f" ({d:+d})" if d else ""))
            table.add_row("  " + s.label(sens.default), *cells,
                          end_section=j == len(sens.settings) - 1)
    return table
