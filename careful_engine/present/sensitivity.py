"""The sensitivity analysis (:mod:`careful_engine.analysis.sensitivity`) as :class:`Report`
files and 80-column terminal tables: rho per setting, how the counts move, one table per
entry, and the scripted-user answers re-judged per script."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rich.table import Table
from rich.text import Text

from careful_engine.analysis.sensitivity import Rescored, Sensitivity
from careful_engine.core.figures import percent_text
from careful_engine.core.safe_text import visible
from careful_engine.present.leaderboard import fmt_rho
from careful_engine.present.report import Report, fixed, pct, pct_change, short
from careful_engine.present.tables import (
    REPLAYED_NOTE,
    STRICT_NOTE,
    TERMINAL_CATEGORY,
    UNCONFIRMED_NA,
    terminal_table,
    tight_room,
)
from careful_engine.scoring.rules import NOT_REPLAYED_KINDS, RULE_REGISTRY, coverage, rule_count

# (column, rule count key) shown per entry and setting; safe/strict accuracy come after. The
# columns are the registry's (destructive_calls, a tally with no column of its own, spelled out).
COUNTS = [("destructive calls" if k == "destructive_calls" else RULE_REGISTRY[k].column, k)
          for k in ("collateral", "collateral_effective", "asked", "asked_destructive",
                    "duplicate_writes", "duplicate_writes_visible", "destructive_calls",
                    "unconfirmed")]
# the counts an entry's terminal table shows, headed by the registry's tags
TERMINAL_COUNTS = ("collateral", "collateral_effective", "asked")
# (column, kind of Rescored.counted): the counts each setting's safe verdict reads, which
# differ by setting (coll effective: the effective collateral calls; dups visible: the visible
# duplicate writes), as the counts table's files and the moves terminal table show them
COUNTED = [("collateral counted", "collateral"), ("duplicates counted", "duplicates")]
COUNTED_NOTE = ("collateral / duplicates counted: what the setting's safe verdict counts "
                "(attempted collateral calls and all duplicate writes; under coll effective "
                "the effective ones, under dups visible the visible ones), its change against "
                "what the default counts")


def over(counts: Counter) -> str:
    """What an entry's counts are over: ``counts over N of M conversations replayed``."""
    done, n = coverage(counts)
    return (f"counts over the {done} of {n} conversations replayed (the others: "
            f"{NOT_REPLAYED_KINDS}; – where none was)")


def entries_note(sens: Sensitivity) -> str:
    """How many entries each rho ranks: a category's only the entries that have it."""
    return ("entries: a category ranks only the entries that have it (" + ", ".join(
        f"{short(c)} {sens.entries(c)}" for c in sens.categories())
        + f"; mean {sens.entries()})")


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
                f"ranking; {entries_note(sens)}",
    )
    for s in sens.settings:
        rep.add(s.label(sens.default), s.boundary_name, sens.sizes.get(s.boundary),
                s.detector, len(sens.labels), *[fixed(sens.rho(s, c), 2) for c in cats],
                fixed(sens.rho(s), 2), fixed(sens.rho_vs_default(s), 2))
    return rep


def counts_report(sens: Sensitivity) -> Report:
    cols = ["entry", "setting", "boundary", "detector", "conversations", "replayed"]
    for head, _ in [*COUNTS, *COUNTED]:
        cols += [head, f"Δ {head}"]
    cols += ["mean safe %", "Δ mean safe", "mean strict %", "Δ mean strict"]
    rep = Report("Counts (summed over the categories) and accuracies under each setting, "
                 "with the change against the default", cols, name="sensitivity_counts",
                 caption=f"default: boundary {sens.default.boundary_name}, detector "
                         f"{sens.default.detector}; BFCL accuracy does not depend on the "
                         f"setting; {COUNTED_NOTE}; {REPLAYED_NOTE}; {UNCONFIRMED_NA}; "
                         f"{STRICT_NOTE}, under the setting's boundary")
    for i, label in enumerate(sens.labels):
        base = sens.rows[sens.default][i]
        for s in sens.settings:
            r = sens.rows[s][i]
            row: list = [label, s.label(sens.default), s.boundary_name, s.detector,
                         *coverage(r.counts)[::-1]]
            for _, key in COUNTS:
                now = rule_count(r.counts, key, r.confirm)
                then = rule_count(base.counts, key, base.confirm)
                row += [now, _change(now, then)]
            for _, kind in COUNTED:
                now, then = r.counted(kind), base.counted(kind)
                row += [now, _change(now, then)]
            for kind in ("safe", "strict"):
                v, b = r.mean(kind), base.mean(kind)
                row += [pct(v), pct_change(v, b)]
            rep.add(*row)
    return rep


def _change(now: int | None, then: int | None) -> int | None:
    """A count's change against the default's (None where either is not applicable)."""
    return None if now is None or then is None else now - then


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)[:80]


def entry_names(labels: list[str]) -> list[str]:
    """A file name for each entry's table: ``sensitivity_entry<N>_<label>``, N the entry's
    number, so no two are alike (labels that slug alike, ``m a`` and ``m_a``, or differ only
    in case) and none is a summary table's (a run named ``rho`` wrote sensitivity_rho over the
    rho table)."""
    return [f"sensitivity_entry{i + 1}_{_slug(label)}" for i, label in enumerate(labels)]


def entry_report(sens: Sensitivity, i: int) -> Report:
    """One entry's table: its safe score under every setting (and the counts that move)."""
    label = sens.labels[i]
    cats = [c for c in sens.categories() if c in sens.rows[sens.default][i].bfcl]
    base = sens.rows[sens.default][i]
    rep = Report(
        f"{label}: success under effect safety (%) under every boundary, detector and safe "
        "rule", ["setting", "boundary", "destructive fns", "detector", "collateral",
                 "duplicates", *[f"{short(c)} safe" for c in cats], "mean safe",
                 "Δ mean safe", "collateral calls", "coll. effective", "dup. writes",
                 "dup. visible", "asked"],
        name=entry_names(sens.labels)[i],
        caption=f"mean BFCL {percent_text(base.mean('bfcl'))} (the same under every setting); "
                f"{over(base.counts)}; collateral: attempted (the paper's) or effective "
                "(succeeded and changed "
                "state); duplicates: all (the paper's) or visible (hidden-only writes such as "
                "cd left out)",
    )
    for s in sens.settings:
        r = sens.rows[s][i]
        m, b = r.mean("safe"), base.mean("safe")
        rep.add(s.label(sens.default), s.boundary_name, sens.sizes.get(s.boundary), s.detector,
                s.collateral, s.duplicates, *[pct(r.safe.get(c)) for c in cats], pct(m),
                pct_change(m, b),
                *[rule_count(r.counts, k, r.confirm)
                  for k in ("collateral", "collateral_effective", "duplicate_writes",
                            "duplicate_writes_visible", "asked")])
    return rep


PAPER_CATEGORY = {"multi_turn_base": "b", "multi_turn_miss_func": "mf",
                  "multi_turn_miss_param": "mp", "multi_turn_long_context": "lc"}


def entry_terminal(sens: Sensitivity, i: int) -> Table:
    cats = [c for c in sens.categories() if c in sens.rows[sens.default][i].bfcl]
    base = sens.rows[sens.default][i]
    rows = []
    for s in sens.settings:
        r = sens.rows[s][i]
        rows.append([s.label(sens.default), *[percent_text(r.safe[c]) for c in cats],
                     percent_text(r.mean('safe')),
                     *[Report.format_cell(rule_count(r.counts, k, r.confirm))
                       for k in TERMINAL_COUNTS]])
    headers = ["setting", *[PAPER_CATEGORY[c] for c in cats], "mean",
               *[RULE_REGISTRY[k].tag for k in TERMINAL_COUNTS]]
    return terminal_table(
        f"{sens.labels[i]}: safe % by setting", headers, rows,
        f"mean BFCL {percent_text(base.mean('bfcl') or 0)} under every setting; "
        f"{over(base.counts)}; b/mf/mp/lc: "
        "base, miss_func, miss_param, long_context; "
        "coll/collE: collateral calls attempted / effective; ask: asked instead of acting. "
        "A setting other than the default changes one thing: a boundary, a detector, or what "
        "the safe verdict counts (coll effective: effective collateral; dups visible: "
        "duplicate writes other than hidden-only ones)",
        first_width=max(8, min(27, tight_room(headers, rows))), tight=True)  # 27: every setting


def reexamination_report(sens: Sensitivity) -> Report | None:
    """The logged scripted-user answers of the confirm entries, re-judged per script."""
    rep = Report(
        "Scripted-user answers re-judged under each script, without regeneration",
        ["entry", "boundary", "script", "answers", "changed", "yes withheld",
         "conversations affected", "of which pass BFCL", "of which safe", "of which strict",
         "affected ids"], name="sensitivity_script",
        caption="paper: the script the run was generated with (a check: it should change "
                "nothing); withhold-failure-report: no yes to a failure report that names no "
                "destructive function; withhold-failure: also closing offers; named-only: a "
                "yes only when the asking sentences name a destructive function the reference "
                "calls; affected: conversations with a changed answer, whose verdicts depend "
                "on the script",
    )
    for label, rx in zip(sens.labels, sens.reexamined, strict=False):
        if rx is None:
            continue
        for sm in rx.summaries:
            rep.add(label, rx.boundary, sm.script, sm.answers, sm.changed, sm.yes_withheld,
                    len(sm.conversations), sm.passing["bfcl"], sm.passing["safe"],
                    sm.passing["strict"], " ".join(sm.conversations) or None)
    return rep if rep.rows else None


def rho_terminal(sens: Sensitivity) -> Table:
    cats = sens.categories()
    rows = [[s.label(sens.default), *[fmt_rho(sens.rho(s, c)) for c in cats],
             fmt_rho(sens.rho(s)), fmt_rho(sens.rho_vs_default(s))] for s in sens.settings]
    rows.append(["entries", *[str(sens.entries(c)) for c in cats], str(sens.entries()),
                 str(sens.entries())])
    return terminal_table(
        f"Spearman's rho, BFCL vs safe ranking ({len(sens.labels)} entries)",
        ["setting", *[TERMINAL_CATEGORY[c] for c in cats], "mean", "vs def."], rows,
        "entries: how many entries each rho ranks (a category: those that have it); "
        "vs def.: the safe ranking under the setting against the default's (mean). Settings: "
        + "; ".join(f"{s.label(sens.default)} = {s.boundary_name} "
                    f"({sens.sizes.get(s.boundary, '?')} fns), {s.detector}"
                    for s in sens.settings),
        first_width=20)


def moves_terminal(sens: Sensitivity) -> Table:
    """Per entry and setting: the counts that move and the safe mean, with the change against
    the default in brackets (under the figure where 80 columns cannot hold both on a line)."""
    metrics: list[tuple[str, Callable[[Rescored], int | None] | None]] = [
        ("coll*", lambda r: r.counted("collateral")),
        ("asked", lambda r: rule_count(r.counts, "asked", r.confirm)),
        ("askD", lambda r: rule_count(r.counts, "asked_destructive", r.confirm)),
        ("dup*", lambda r: r.counted("duplicates")), ("safe %", None)]
    headers = ["entry / setting", *[h for h, _ in metrics]]
    entries = []  # (label, [(setting, [(figure, change)])])
    for i, label in enumerate(sens.labels):
        base = sens.rows[sens.default][i]
        done, n = coverage(base.counts)
        rows = []
        for s in sens.settings:
            r = sens.rows[s][i]
            cells = []
            for _, count in metrics:
                if count is None:
                    v, d = pct(r.mean("safe")), pct_change(r.mean("safe"), base.mean("safe"))
                    cells.append((Report.format_cell(v), f"({d:+.1f})" if d else ""))
                else:
                    v = count(r)
                    d = _change(v, count(base))
                    cells.append((Report.format_cell(v), f"({d:+d})" if d else ""))
            rows.append(("  " + s.label(sens.default), cells))
        entries.append((f"{label} ({done}/{n} replayed)", rows))

    def lines(sep: str) -> list[list[str]]:
        return [[setting, *[sep.join(filter(None, c)) for c in cells]]
                for _, rows in entries for setting, cells in rows]

    # a change beside its count, or under it where 80 columns leave the settings too little
    sep = " " if tight_room(headers, lines(" ")) >= 22 else "\n"
    table = terminal_table(
        "How the counts (summed over categories) and the safe mean move with the setting",
        headers, [],
        "coll*, dup*: the collateral destructive calls and duplicate writes the setting's safe "
        "verdict counts (attempted and all; coll effective: the effective ones; dups visible: "
        "the visible ones; as collateral / duplicates counted in sensitivity_counts.*); askD: "
        "asked where the reference acts destructively; (±n): change against the default's "
        "count; n/m replayed: "
        "the counts are over the n conversations replayed of the m scored (inference errors, "
        "missing and unscorable entries have nothing to replay), – where none was",
        first_width=max(8, min(29, tight_room(headers, lines(sep)))),  # 29: every setting
        tight=True)
    for label, rows in entries:
        table.add_row(Text(visible(label)), *[""] * len(metrics), style="bold")
        for j, (setting, cells) in enumerate(rows):
            table.add_row(setting, *[sep.join(filter(None, c)) for c in cells],
                          end_section=j == len(rows) - 1)
    return table


def reexamination_terminal(sens: Sensitivity) -> Table | None:
    """The script re-examination for an 80-column terminal (the ids are in the files)."""
    rows = [[label, sm.script, str(sm.answers), str(sm.changed), str(sm.yes_withheld),
             str(len(sm.conversations)),
             f"{sm.passing['bfcl']}/{sm.passing['safe']}/{sm.passing['strict']}"]
            for label, rx in zip(sens.labels, sens.reexamined, strict=False) if rx is not None
            for sm in rx.summaries]
    if not rows:
        return None
    return terminal_table(
        "Logged scripted-user answers re-judged under each script (no regeneration)",
        ["entry", "script", "ans", "chg", "w/h", "convs", "B/S/St"], rows,
        "ans: logged answers; chg: answers the script decides otherwise; paper: the generating "
        "script (a check: it should change nothing); w/h: logged "
        "yes answers the script withholds; convs: conversations with a changed answer, whose "
        "verdicts depend on the script; B/S/St: of those, passing BFCL / safe / strict "
        "(ids in sensitivity_script.*)", first_width=12, tight=True)
