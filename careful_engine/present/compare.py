"""A paired comparison of two runs (paper Table 5) as :class:`Report` files and an 80-column
terminal table. The pairing and McNemar test are :mod:`careful_engine.analysis.leaderboard`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from careful_engine.analysis.leaderboard import Comparison, compare
from careful_engine.present.report import Fixed, Report, fixed, pct, short
from careful_engine.present.tables import TERMINAL_CATEGORY, one_decimal, terminal_table
from careful_engine.scoring.score import ModelScore
from careful_engine.scoring.stats import Paired

KIND_NAMES = {"bfcl": "BFCL's", "safe": "Effect-safe", "strict": "Strict"}

# what the overall row is: not the leaderboard's mean (four categories, an absent one as 0)
OVERALL = ("overall: the paired conversations of every shared category pooled, A % and B % "
           "their passes over n paired (not bfcl's four-category mean, where an absent "
           "category counts as 0)")

# gained and lost: their terminal headers, in the order of every paired table (compare's,
# the demo's), and what they mean
GAINED_LOST = ("+", "−")
GAINED_LOST_NOTE = "+ gained: fails in A, passes in B; − lost: passes in A, fails in B"


def gained_lost(p: Paired) -> list[str]:
    """A paired row's gained and lost counts, in :data:`GAINED_LOST`'s order."""
    return [str(len(p.gained)), str(len(p.lost))]


def runs(label_a: str, label_b: str) -> dict[str, str]:
    """Which run is A and which B, as a paired table's files state it besides its title
    (:attr:`~careful_engine.present.report.Report.context`)."""
    return {"run A": label_a, "run B": label_b}


COMPARE_COLUMNS = ["category", "n paired", "passes A", "passes B", "A %", "B %", "gained",
                   "lost", "p"]


def compare_report(cmp: Comparison, label_a: str, label_b: str,
                   settings: dict[str, Any] | None = None) -> Report:
    """Table 5's paired columns: n, passes, gained (+), lost (−), exact McNemar p; the safe
    and strict verdicts' tables state ``settings`` (BFCL's verdict depends on none)."""
    rep = Report(
        f"{KIND_NAMES[cmp.kind]} verdict, paired by conversation: A = {label_a}, B = {label_b}",
        COMPARE_COLUMNS, name=f"compare_{cmp.kind}",
        caption=GAINED_LOST_NOTE + "; p: exact two-sided McNemar test on the discordant pairs (binomial, 0.5); " + OVERALL
                + ("; n paired: the conversations whose reference makes a destructive call "
                   "(strict success is over these; the others pass it trivially)"
                   if cmp.kind == "strict" else "")
                + (f"; not paired (only in A): {', '.join(map(short, cmp.only_a))}"
                   if cmp.only_a else "")
                + (f"; not paired (only in B): {', '.join(map(short, cmp.only_b))}"
                   if cmp.only_b else ""),
        settings=None if cmp.kind == "bfcl" else settings, context=runs(label_a, label_b),
    )
    rows = [*cmp.categories.items(), (None, cmp.overall)]
    for c, p in rows:
        rep.add("overall" if c is None else short(c), p.n, p.passes_a, p.passes_b,
                pct(p.passes_a / p.n) if p.n else None, pct(p.passes_b / p.n) if p.n else None,
                len(p.gained), len(p.lost), fixed(p.p))
    return rep


def pairs_report(comparisons: list[Comparison], label_a: str, label_b: str,
                 settings: dict[str, Any] | None = None) -> Report:
    """Every discordant conversation: which verdict, which category, gained or lost; stating
    ``settings`` where a verdict other than BFCL's is paired."""
    rep = Report(f"Conversations that changed verdict: A = {label_a}, B = {label_b}",
                 ["score", "category", "id", "A", "B", "change"], name="compare_pairs",
                 caption=GAINED_LOST_NOTE,
                 settings=settings if any(c.kind != "bfcl" for c in comparisons) else None,
                 context=runs(label_a, label_b))
    for cmp in comparisons:
        for c, p in cmp.categories.items():
            for i in p.gained:
                rep.add(cmp.kind, short(c), i, "fail", "pass", "gained")
            for i in p.lost:
                rep.add(cmp.kind, short(c), i, "pass", "fail", "lost")
    return rep


def compare_terminal(rep: Report) -> Table:
    """A :func:`compare_report` for an 80-column terminal."""
    rows = []
    for cat, n, pa, pb, acc_a, acc_b, g, lo, p in rep.rows:  # gained, lost: GAINED_LOST
        rows.append([str(cat), str(n), str(pa), str(pb), one_decimal(acc_a), one_decimal(acc_b),
                     str(g), str(lo), "–" if p is None else format(p, "")])
    return terminal_table(rep.title, ["category", "n", "pass A", "pass B", "A %", "B %",
                                      *GAINED_LOST, "p"], rows, rep.caption, first_width=10)


# the demo's paired table: both verdicts side by side; n once, BFCL's (the same
# conversations are paired under both), then each verdict's columns
PAIRED_VERDICTS = ("bfcl", "safe")
PAIRED_COLUMNS = ("gained", "lost", "p")


def paired_terminal(label_a: str, a: ModelScore, label_b: str, b: ModelScore) -> Table:
    """The paired comparison (exact McNemar) of two scores per category and overall, under
    both verdicts in one 80-column table: category, n, then gained, lost and p per verdict."""
    cmps = {k: compare(a, b, k) for k in PAIRED_VERDICTS}
    rows = []
    for c in [*cmps["bfcl"].categories, None]:
        cells: dict[str, dict[str, str]] = {}
        for k in PAIRED_VERDICTS:
            p = cmps[k].overall if c is None else cmps[k].categories[c]
            gained, lost = gained_lost(p)
            cells[k] = {"n": str(p.n), "gained": gained, "lost": lost,
                        "p": format(Fixed(p.p), "")}
        rows.append([TERMINAL_CATEGORY.get(c, "overall"), cells["bfcl"]["n"],
                     *(cells[k][col] for k in PAIRED_VERDICTS for col in PAIRED_COLUMNS)])
    plus, minus = GAINED_LOST
    return terminal_table(
        f"Paired: A = {label_a}, B = {label_b}",
        ["category", "n", f"BFCL {plus}", minus, "p", f"safe {plus}", minus, "p"], rows,
        f"{GAINED_LOST_NOTE}; p: exact McNemar", first_width=10, tight=True)
