"""The leaderboard's tables (paper Table 3): ranks under both scores on the mean and per
category, Spearman's rho between the rankings, and the rule totals, as :class:`Report` files
and as 80-column terminal tables. The ranking itself is
:mod:`careful_engine.analysis.leaderboard`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from careful_engine.analysis.leaderboard import Entry, categories_of, rank_order, ranking
from careful_engine.present.report import Report, fixed, pct, short
from careful_engine.present.tables import (
    ASKED_NA,
    REPLAYED_NOTE,
    REPLAYED_TERMINAL,
    RULE_COLUMNS,
    TERMINAL_CATEGORY,
    UNCONFIRMED_NA,
    asked_legend,
    confirm_columns,
    one_decimal,
    replayed_cell,
    terminal_table,
    terminal_tables,
)
from careful_engine.scoring.rules import RULE_REGISTRY, coverage, rule_count

# what the rule totals' "conversations" counts (careful score's n, missing ids included)
CONVERSATIONS = ("every conversation of the entry's categories, an id missing from its files "
                 "counted as failed")


def fmt_rho(rho: float | None) -> str:
    return "–" if rho is None else f"{rho:.2f}"


class _Ranked(Entry):
    """An entry whose accuracies are computed once: each is a pass over the results of its
    categories, and ranking and the tables read each one many times."""

    def __init__(self, entry: Entry) -> None:
        super().__init__(entry.label, entry.run, entry.score)
        self._accuracy: dict[tuple[str | None, str], float | None] = {}

    def accuracy(self, category: str | None = None, kind: str = "bfcl") -> float | None:
        key = (category, kind)
        if key not in self._accuracy:
            self._accuracy[key] = super().accuracy(category, kind)
        return self._accuracy[key]


def leaderboard_reports(entries: list[Entry],
                        settings: dict[str, Any] | None = None) -> list[Report]:
    """The leaderboard's tables: ranks on the mean, per category, rho, and the rule totals;
    each states ``settings``, what the entries were scored with (every table holds safe
    figures or rule counts)."""
    order = rank_order([_Ranked(e) for e in entries])
    mean = ranking(order)
    main = Report(
        "Leaderboard: rank under BFCL's accuracy and under success with effect safety",
        ["entry", "decoder", "mean BFCL %", "BFCL rank", "mean safe %", "safe rank",
         "rank change"],
        name="leaderboard",
        caption=f"mean: bfcl's unweighted mean over the four categories, an absent one counting "
                f"as 0; rank change: BFCL rank minus safe rank (> 0: higher under effect "
                f"safety). Spearman's rho between the two rankings: {fmt_rho(mean.rho)} "
                f"({_entries(mean.n)})",
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
        ["entry", "categories", "conversations", "replayed"] + [h for h, _ in RULE_COLUMNS],
        name="leaderboard_rules",
        caption=f"conversations: {CONVERSATIONS}; {REPLAYED_NOTE}; counts summed over the "
                "entry's categories "
                "(unconfirmed: over those run under the confirmation protocol); see `careful "
                "score` for the rules; " + UNCONFIRMED_NA + "; " + ASKED_NA,
    )
    for e in order:
        t = e.rule_totals()
        rules.add(e.label, len(e.score.categories),
                  sum(cs.total for cs in e.score.categories.values()), coverage(t)[0],
                  *[rule_count(t, k, e.score.confirm) for _, k in RULE_COLUMNS])
    for rep in (main, per_cat, rho, rules):
        rep.settings = settings
    return [main, per_cat, rho, rules]


# ---------------------------------------------------------------- terminal layouts (<= 80 cols)


def leaderboard_terminal(entries: list[Entry]) -> list[Table]:
    """The leaderboard for an 80-column terminal: mean ranks, per-category ranks with rho,
    and the rule totals (in two parts where 80 columns cannot hold them)."""
    order = rank_order([_Ranked(e) for e in entries])
    mean = ranking(order)
    rows = [[e.label, one_decimal(pct(e.accuracy())), str(rb), one_decimal(pct(e.accuracy(None, "safe"))), str(rs),
             f"{rb - rs:+d}" if rb != rs else "0"]
            for e, rb, rs in zip(order, mean.bfcl_ranks, mean.safe_ranks, strict=True)]
    decoders = "; ".join(f"{e.label}: {e.decoder}" for e in order if e.decoder)
    first = terminal_table(
        f"Leaderboard: mean over the 4 categories (absent = 0); Spearman's rho between the "
        f"BFCL and the safe ranking {fmt_rho(mean.rho)} ({_entries(mean.n)})",
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
    keys, legend = confirm_columns(keys, any(e.score.confirm for e in order))
    headers = [RULE_REGISTRY[k].tag for k in keys]
    totals = [e.rule_totals() for e in order]  # once per entry: a pass over its results
    rows = [[e.label, replayed_cell(t),
             *[Report.format_cell(rule_count(t, k, e.score.confirm)) for k in keys]]
            for e, t in zip(order, totals, strict=True)]
    third = terminal_tables(
        "Rule totals over each entry's categories", ["entry", "conv", *headers], rows,
        asked_legend(f"{REPLAYED_TERMINAL}; {legend}", totals),
        first_width=14, tight=True)  # split where 80 columns cannot hold every rule
    return [first, second, *third]


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"
