"""What the decoder made of a run (:mod:`careful_engine.analysis.decode_audit`) as
:class:`Report` files and 80-column terminal tables: step outcome shares per entry and
category, and the commonest decode failure messages."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from careful_engine.analysis.decode_audit import (
    MISMATCH_MAX_CALLS,
    MISMATCH_MIN_FAILED,
    DecodeStats,
)
from careful_engine.core.safe_text import visible
from careful_engine.core.trajectory import Outcome
from careful_engine.present.report import Report, pct, short
from careful_engine.present.tables import TERMINAL_CATEGORY, Name, NameTable, one_decimal


def shares_report(audits: list[tuple[str, list[DecodeStats]]]) -> Report:
    """One row per entry and category (and the entry's total): step outcome shares, flags."""
    rep = Report(
        "Decode outcomes of the logged steps",
        ["entry", "category", "decoder", "conversations", "inference errors", "missing",
         "steps", "calls %", "no call %", "failed %", "flag"],
        name="decode_audit",
        caption="calls: the step decoded to function calls; no call: it decoded to nothing "
                "(text, or nothing at all: an FC step logged as []); failed: the decoder raised (bfcl drops these steps silently); "
                f"flag: fewer than {100 * MISMATCH_MAX_CALLS:.0f}% of steps decoded to calls "
                f"while at least {100 * MISMATCH_MIN_FAILED:.0f}% failed (decoder mismatch?), "
                "or fewer than 5% decoded to calls (no calls?)",
    )
    for label, stats in audits:
        for st in stats:
            rep.add(label, "all" if st.category is None else short(st.category), st.decoder,
                    st.conversations, st.inference_errors, st.missing, st.total_steps,
                    pct(st.share(Outcome.CALLS)), pct(st.share(Outcome.NO_CALL)),
                    pct(st.share(Outcome.DECODE_ERROR)),
                    "; ".join(f.kind for f in st.flags()) or None)
    return rep


def messages_report(audits: list[tuple[str, list[DecodeStats]]], top: int = 5) -> Report:
    """The commonest decode failure messages per entry (over all its categories)."""
    rep = Report("Commonest decode failure messages (numbers and quoted text stripped)",
                 ["entry", "message", "steps", "share of failures %", "example"],
                 name="decode_messages")
    for label, stats in audits:
        for st in stats:
            if st.category is not None:
                continue
            failed = st.steps.get(Outcome.DECODE_ERROR, 0)
            for msg, n in st.messages.most_common(top):
                rep.add(label, msg, n, pct(n / failed) if failed else None, st.examples[msg])
    return rep


def shares_terminal(audits: list[tuple[str, list[DecodeStats]]]) -> Table:
    """Per entry (its total in bold) and category: % of steps by outcome, inference errors."""
    table = NameTable(title="Decode outcomes of the logged steps", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False, title_justify="left",
                  caption_justify="left",
                  caption="calls / no call / failed: % of the logged steps; inf.err: entries "
                          "with no steps (inference errors); ⚑: flagged (see below)")
    table.add_column(Name("entry / category"), min_width=16, max_width=30)
    for h in ("steps", "calls", "no call", "failed", "inf.err", ""):
        table.add_column(h, justify="right", no_wrap=True)

    def cells(st: DecodeStats) -> list[str]:
        return [str(st.total_steps), one_decimal(pct(st.share(Outcome.CALLS))),
                one_decimal(pct(st.share(Outcome.NO_CALL))),
                one_decimal(pct(st.share(Outcome.DECODE_ERROR))),
                str(st.inference_errors), "⚑" if st.flags() else ""]

    for i, (label, stats) in enumerate(audits):
        whole = [st for st in stats if st.category is None]
        parts = [st for st in stats if st.category is not None]
        for st in whole:
            table.add_row(Name(label), *cells(st), style="bold")
        for j, st in enumerate(parts):
            table.add_row("  " + TERMINAL_CATEGORY.get(st.category, st.category), *cells(st),
                          end_section=j == len(parts) - 1 and i < len(audits) - 1)
    return table


def messages_terminal(audits: list[tuple[str, list[DecodeStats]]], top: int = 3) -> Table:
    table = NameTable(title="Commonest decode failure messages", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False, title_justify="left")
    table.add_column(Name("entry"), min_width=10, max_width=20)
    table.add_column("steps", justify="right", no_wrap=True)
    table.add_column("message", overflow="fold")
    for label, stats in audits:
        for st in stats:
            if st.category is None:
                for i, (msg, n) in enumerate(st.messages.most_common(top)):
                    table.add_row(Name(label if i == 0 else ""), str(n),
                                  Text(visible(msg)))
    return table
