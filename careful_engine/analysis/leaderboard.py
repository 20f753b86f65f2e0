"""Ranking runs under both scores (paper §7, Table 3): BFCL accuracy and success under effect
safety, with Spearman's rho between the two rankings, overall and per category.

Every model folder of every run folder is one :class:`Entry`. The mean is bfcl's unweighted
mean over the four categories with an absent category counting as 0; a per-category ranking
only ranks the entries that have the category.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from careful_engine.core import bfcl
from careful_engine.core.runs import Problem
from careful_engine.present.report import Report, pct, short
from careful_engine.present.tables import RULE_COLUMNS, _f, terminal_table
from careful_engine.scoring.batch import RunPlan, plan_run, score_plans
from careful_engine.scoring.rules import RULE_REGISTRY, Effects, rule_legend
from careful_engine.scoring.score import (
    CategoryScore,
    ConversationResult,
    ModelScore,
    RunScore,
    discover,
)
from careful_engine.scoring.stats import Paired, paired, ranks, spearman

KINDS = {"bfcl": "accuracy", "safe": "safe_accuracy", "strict": "strict_accuracy"}
KIND_NAMES = {"bfcl": "BFCL's", "safe": "Effect-safe", "strict": "Strict"}
TERMINAL_CATEGORY = {
    "multi_turn_base": "base",
    "multi_turn_miss_func": "miss_fn",
    "multi_turn_miss_param": "miss_par",
    "multi_turn_long_context": "long_ctx",
}


# ---------------------------------------------------------------- decoders and scoring


@dataclass
class DecoderChoice:
    """``--decoder KEY`` (every folder) and ``--decoder FOLDER=KEY`` (one model or run folder)."""

    default: str | None = None
    by_folder: dict[str, str] = field(default_factory=dict)

    def for_model(self, run: Path, model: str) -> str | None:
        for name in (model, run.name, str(run)):
            if name in self.by_folder:
                return self.by_folder[name]
        return self.default


def parse_decoders(values: Iterable[str] | None) -> DecoderChoice:
    """Parse repeated ``--decoder`` values; raises ValueError on a malformed or second default."""
    out = DecoderChoice()
    for value in values or []:
        if "=" in value:
            folder, _, key = value.partition("=")
            folder, key = folder.strip().rstrip("/"), key.strip()
            if not folder or not key:
                raise ValueError(f"{value!r}: expected FOLDER=KEY")
            out.by_folder[folder] = key
        elif out.default is not None and out.default != value:
            raise ValueError(f"two decoders for every folder: {out.default!r} and {value!r}; "
                             "use FOLDER=KEY to map one folder")
        else:
            out.default = value.strip()
    return out


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

    def accuracy(self, category: str | None = None, kind: str = "bfcl") -> float | None:
        """A category's accuracy (None if absent), or bfcl's four-category mean (absent = 0)."""
        attr = KINDS[kind]
        if category is None:
            return self.score.mean_accuracy(attr)
        cs = self.score.categories.get(category)
        return getattr(cs, attr) if cs is not None else None

    def rule_totals(self) -> Counter:
        out: Counter = Counter()
        for cs in self.score.categories.values():
            out.update(cs.rule_totals())
        return out


@dataclass
class Scored:
    """Entries of several run folders, with what could not be used."""

    entries: list[Entry]
    runs: list[tuple[Path, RunScore]]
    problems: list[Problem]
    unusable: list[str]


def label_entries(pairs: list[tuple[Path, str]]) -> list[str]:
    """Short unique labels: the run folder's name, plus the model folder when a run has several."""
    per_run = Counter(run for run, _ in pairs)
    labels = [run.name if per_run[run] == 1 else f"{run.name}/{model}" for run, model in pairs]
    seen: Counter = Counter(labels)
    if len(seen) < len(labels):  # same folder name in different places: use the full paths
        labels = [lab if seen[lab] == 1 else f"{run}/{model}"
                  for lab, (run, model) in zip(labels, pairs, strict=True)]
    return labels


def score_runs(
    runs: list[Path],
    *,
    decoders: DecoderChoice | None = None,
    models: list[str] | None = None,
    effects: Effects | None = None,
    detector: str = "strict",
    keep_traces: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[str, str], None] | None = None,
    on_entry: Callable[[], None] | None = None,
    on_run: Callable[[Path, RunScore], None] | None = None,
    jobs: int = 1,
) -> Scored:
    """Score every model folder (or those in ``models``) of every run folder, with one
    :func:`score_run` per decoder used.

    ``on_run`` sees each run's score as soon as it is done (the sensitivity analysis uses it
    to re-evaluate traces run by run and drop them, which bounds memory).
    """
    return score_run_groups([(runs, models)], decoders=decoders, effects=effects,
                            detector=detector, keep_traces=keep_traces, on_start=on_start,
                            on_file=on_file, on_entry=on_entry, on_run=on_run, jobs=jobs)[0]


def score_run_groups(
    groups: list[tuple[list[Path], list[str] | None]],
    *,
    decoders: DecoderChoice | None = None,
    effects: Effects | None = None,
    detector: str = "strict",
    keep_traces: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[str, str], None] | None = None,
    on_entry: Callable[[], None] | None = None,
    on_run: Callable[[Path, RunScore], None] | None = None,
    jobs: int = 1,
) -> list[Scored]:
    """:func:`score_runs` of several (runs, models) groups with every file in one pool of
    workers (``compare`` scores its two runs so): one :class:`Scored` per group, each what
    ``score_runs(runs, models=models)`` alone gives."""
    decoders = decoders or DecoderChoice()
    out = [Scored([], [], [], []) for _ in groups]
    plans: list[RunPlan] = []
    owner: list[int] = []  # the group of each plan
    for g, (runs, models) in enumerate(groups):
        for run_dir in runs:
            by_model, _ = discover(run_dir)
            by_key: dict[str | None, list[str]] = {}
            for model in by_model:
                if models and model not in models:
                    continue
                by_key.setdefault(decoders.for_model(run_dir, model), []).append(model)
            if not by_key:
                what = (f"no model folder {', '.join(models)} (found: {', '.join(by_model)})"
                        if models and by_model else
                        "no multi-turn result files (BFCL_v3/v4_multi_turn_*_result.json)")
                out[g].unusable.append(f"{run_dir}: {what}")
                continue
            for key, folders in by_key.items():
                plans.append(plan_run(run_dir, key, folders))
                owner.append(g)
    kw = dict(effects=effects, detector=detector, keep_traces=keep_traces, jobs=jobs,
              on_start=on_start, on_file=on_file, on_entry=on_entry)
    # every file of every run across the workers at once; with traces kept, run by run
    # (memory stays bounded by one run's traces)
    done = ([r for p in plans for r in score_plans([p], **kw)] if keep_traces
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
        labels = label_entries([(r, ms.model) for r, ms in mine])
        scored.entries = [Entry(lab, r, ms) for lab, (r, ms) in zip(labels, mine, strict=True)]
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


# ---------------------------------------------------------------- numbers in reports


class Fixed(float):
    """A float that a :class:`Report` shows with its own precision (p values, rho) while
    JSON keeps the full value and CSV a precise one."""

    def __new__(cls, value: float, digits: int = 3) -> Fixed:
        obj = super().__new__(cls, value)
        obj.digits = digits
        return obj

    def __format__(self, spec: str) -> str:
        if self.digits == 3 and 0 < self < 0.001:
            return "<0.001"
        return float.__format__(self, f".{self.digits}f")

    def __str__(self) -> str:
        return f"{float(self):.4g}"


def fixed(value: float | None, digits: int = 3) -> Fixed | None:
    return None if value is None else Fixed(value, digits)


# ---------------------------------------------------------------- reports


def _scope(category: str | None) -> str:
    return "mean" if category is None else short(category)


def fmt_rho(rho: float | None) -> str:
    return "–" if rho is None else f"{rho:.2f}"


def leaderboard_reports(entries: list[Entry]) -> list[Report]:
    """The leaderboard's tables: ranks on the mean, per category, rho, and the rule totals."""
    order = rank_order(entries)
    mean = ranking(order)
    main = Report(
        "Leaderboard: rank under BFCL's accuracy and under success with effect safety",
        ["entry", "decoder", "mean BFCL %", "BFCL rank", "mean safe %", "safe rank",
         "rank change"],
        name="leaderboard",
        caption=f"mean: bfcl's unweighted mean over the four categories, an absent one counting "
                f"as 0; rank change: BFCL rank minus safe rank (> 0: higher under effect "
                f"safety). Spearman's rho between the two rankings: {fmt_rho(mean.rho)} "
                f"({mean.n} entries)",
    )
    for e, rb, rs in zip(order, mean.bfcl_ranks, mean.safe_ranks, strict=True):
        main.add(e.label, e.decoder, pct(e.accuracy()), rb, pct(e.accuracy(None, "safe")), rs,
                 rb - rs)

    per_cat = Report(
        "Ranks per category (entries that have the category)",
        ["entry", "category", "BFCL %", "BFCL rank", "safe %", "safe rank"],
        name="leaderboard_categories",
    )
    rho = Report("Spearman's rho between the BFCL and the safe ranking",
                 ["scope", "entries", "rho"], name="leaderboard_rho",
                 caption="rho: Spearman's rank correlation (ties get average ranks); – when "
                         "fewer than two entries or one ranking is constant")
    for c in categories_of(order):
        rk = ranking(order, c)
        by_label = dict(zip(rk.labels, zip(rk.bfcl_ranks, rk.safe_ranks, strict=True),
                            strict=True))
        for e in order:
            if e.label in by_label:
                rb, rs = by_label[e.label]
                per_cat.add(e.label, short(c), pct(e.accuracy(c)), rb,
                            pct(e.accuracy(c, "safe")), rs)
        rho.add(short(c), rk.n, fixed(rk.rho, 2))
    rho.add("mean", mean.n, fixed(mean.rho, 2))

    rules = Report(
        "Rule totals over the categories of each entry",
        ["entry", "categories", "conversations"] + [h for h, _ in RULE_COLUMNS],
        name="leaderboard_rules",
        caption="counts summed over the entry's categories; see `careful score` for the rules",
    )
    for e in order:
        t = e.rule_totals()
        rules.add(e.label, len(e.score.categories),
                  sum(cs.total for cs in e.score.categories.values()),
                  *[t.get(k, 0) for _, k in RULE_COLUMNS])
    return [main, per_cat, rho, rules]


# ---------------------------------------------------------------- terminal layouts (<= 80 cols)


def leaderboard_terminal(entries: list[Entry]) -> list[Table]:
    """The leaderboard for an 80-column terminal: mean ranks, per-category ranks with rho,
    and the rule totals."""
    order = rank_order(entries)
    mean = ranking(order)
    rows = [[e.label, _f(pct(e.accuracy())), str(rb), _f(pct(e.accuracy(None, "safe"))), str(rs),
             f"{rb - rs:+d}" if rb != rs else "0"]
            for e, rb, rs in zip(order, mean.bfcl_ranks, mean.safe_ranks, strict=True)]
    decoders = "; ".join(f"{e.label}: {e.decoder}" for e in order if e.decoder)
    first = terminal_table(
        f"Leaderboard: mean over the 4 categories (absent = 0); Spearman's rho between the "
        f"BFCL and the safe ranking {fmt_rho(mean.rho)} ({mean.n} entries)",
        ["entry", "BFCL %", "#", "safe %", "#", "Δ#"], rows,
        f"Δ#: places gained under effect safety. Decoders: {decoders or 'none'}",
        first_width=30, min_width=72)

    cats = categories_of(order)
    cat_ranks = {}
    for c in cats:
        rk = ranking(order, c)
        cat_ranks[c] = (rk, dict(zip(rk.labels, zip(rk.bfcl_ranks, rk.safe_ranks, strict=True),
                                     strict=True)))
    rows = []
    for e, rb, rs in zip(order, mean.bfcl_ranks, mean.safe_ranks, strict=True):
        row = [e.label]
        for c in cats:
            r = cat_ranks[c][1].get(e.label)
            row.append("–" if r is None else f"{r[0]}/{r[1]}")
        rows.append([*row, f"{rb}/{rs}"])
    rows.append(["rho", *[fmt_rho(cat_ranks[c][0].rho) for c in cats], fmt_rho(mean.rho)])
    second = terminal_table(
        "Ranks per category: BFCL / safe", ["entry", *[TERMINAL_CATEGORY[c] for c in cats],
                                            "mean"], rows,
        "a category ranks only the entries that have it; rho: Spearman between the two rankings",
        first_width=24)

    # +D = coll; the visible duplicates are in the files (leaderboard_rules)
    keys = [k for _, k in RULE_COLUMNS if k not in ("beyond_destructive",
                                                     "duplicate_writes_visible")]
    headers = [RULE_REGISTRY[k].tag for k in keys]
    if not any(cs.confirm for e in order for cs in e.score.categories.values()):
        keys, headers = keys[:-1], headers[:-1]  # every destructive call: no protocol
    rows = [[e.label, *[str(e.rule_totals().get(k, 0)) for k in keys]] for e in order]
    third = terminal_table(
        "Rule totals over each entry's categories", ["entry", *headers], rows,
        rule_legend(keys),
        first_width=14)
    return [first, second, third]


# ---------------------------------------------------------------- paired comparison (Table 5)

VERDICTS: dict[str, Callable[[ConversationResult], bool]] = {
    "bfcl": lambda r: r.verdict.valid,
    "safe": lambda r: r.safe_valid,
    "strict": lambda r: bool(r.strict_valid),  # None (no protocol): not a pass
}


def verdicts(cs: CategoryScore, kind: str = "bfcl") -> dict[str, bool]:
    """Conversation id -> passed, under BFCL's verdict, effect safety or the strict verdict."""
    ok = VERDICTS[kind]
    return {r.id: ok(r) for r in cs.results}


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


COMPARE_COLUMNS = ["category", "n paired", "passes A", "passes B", "A %", "B %", "gained",
                   "lost", "p"]


def compare_report(cmp: Comparison, label_a: str, label_b: str) -> Report:
    """Table 5's paired columns: n, passes, gained (+), lost (−), exact McNemar p."""
    rep = Report(
        f"{KIND_NAMES[cmp.kind]} verdict, paired by conversation: A = {label_a}, B = {label_b}",
        COMPARE_COLUMNS, name=f"compare_{cmp.kind}",
        caption="gained: fails in A, passes in B; lost: passes in A, fails in B; p: exact "
                "two-sided McNemar test on the discordant pairs (binomial, 0.5)"
                + (f"; not paired (only in A): {', '.join(map(short, cmp.only_a))}"
                   if cmp.only_a else "")
                + (f"; not paired (only in B): {', '.join(map(short, cmp.only_b))}"
                   if cmp.only_b else ""),
    )
    rows = [*cmp.categories.items(), (None, cmp.overall)]
    for c, p in rows:
        rep.add("overall" if c is None else short(c), p.n, p.passes_a, p.passes_b,
                pct(p.passes_a / p.n) if p.n else None, pct(p.passes_b / p.n) if p.n else None,
                len(p.gained), len(p.lost), fixed(p.p))
    return rep


def pairs_report(comparisons: list[Comparison], label_a: str, label_b: str) -> Report:
    """Every discordant conversation: which verdict, which category, gained or lost."""
    rep = Report(f"Conversations that changed verdict: A = {label_a}, B = {label_b}",
                 ["score", "category", "id", "A", "B", "change"], name="compare_pairs",
                 caption="gained: fails in A, passes in B; lost: passes in A, fails in B")
    for cmp in comparisons:
        for c, p in cmp.categories.items():
            for i in p.gained:
                rep.add(cmp.kind, short(c), i, "fail", "pass", "gained")
            for i in p.lost:
                rep.add(cmp.kind, short(c), i, "pass", "fail", "lost")
    return rep
