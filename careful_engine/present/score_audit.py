"""An audit of bfcl score files (:mod:`careful_engine.analysis.score_audit`) as
:class:`Report` files and 80-column terminal tables."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from careful_engine.analysis import score_audit as sa
from careful_engine.present.report import Report, pct
from careful_engine.present.tables import one_decimal, terminal_table

BLOCK_NAMES = {"non_live": "non-live", "live": "live", "irrelevance": "irrel.",
               "multi_turn": "multi-turn", "agentic": "agentic"}


def score_audit_reports(audits: list[sa.ModelAudit], result_dir: Path | None,
                        source: Path | None = None) -> list[Report]:
    """Overall accuracy, the credited irrelevance entries, and the findings, as files
    (``source``: the score folder read, named in the overall table's caption)."""
    overall = Report(
        "Overall accuracy as bfcl weights it (%), from the score files",
        ["model", *[BLOCK_NAMES[b] for b in sa.BLOCKS], "overall (weighted)",
         "unweighted block mean", "irrelevance share of overall %", "relevance",
         "categories found", "categories missing"],
        name="score_audit_overall",
        caption="weights " + ", ".join(f"{BLOCK_NAMES[b]} {w}" for b, w in sa.WEIGHTS.items())
                + " (bfcl-eval 2026.3.23, eval_runner_helper.py); a category not evaluated "
                  "counts 0; live_relevance enters no block; " + source_note(source),
    )
    credited = Report(
        "Irrelevance entries bfcl credited, by what their raw output holds",
        ["model", "category", "accuracy %", "credited", "failed", "result file", "read",
         "attempted call", "empty", "other", "attempted call %", "markers", "examples"],
        name="score_audit_irrelevance",
        caption="credited: entries not listed as failed; attempted call: a tool-call tag, a "
                "JSON name/arguments object, a Python call with keyword arguments or a "
                "structured call (heuristic)",
    )
    flags = Report("Findings", ["model", "kind", "message"], name="score_audit_flags")
    for a in audits:
        ov = a.overall
        overall.add(a.model, *[pct(ov.blocks[b]) for b in sa.BLOCKS], pct(ov.overall),
                    pct(ov.unweighted), pct(ov.irrelevance_share), pct(ov.relevance),
                    len(a.scores.files), len(ov.missing))
        for cr in a.credited:
            sf = a.scores.files[cr.category]
            credited.add(a.model, cr.category, pct(sf.accuracy), cr.credited, cr.failed,
                         str(cr.result_file) if cr.result_file else None, cr.read, cr.calls,
                         cr.empty, cr.other, pct(cr.call_share), cr.marker_summary() or None,
                         " ".join(cr.examples) or None)
        for f in a.flags:
            flags.add(f.model, f.kind, f.message)
    return [overall, credited, flags]


def writer(source: Path | None) -> str:
    """Whose score files ``source`` holds: ``careful's`` (written by ``careful score``) or
    ``bfcl's``."""
    return "careful's" if source is not None and sa.written_by_careful(source) else "bfcl's"


def source_note(source: Path | None) -> str:
    """Where the audit's figures come from: bfcl's score files as written, not a replay, or
    careful's own, as ``careful score`` wrote them from its replay."""
    where = f" in {source}" if source is not None else ""
    if writer(source) == "careful's":
        return (f"source: careful's own score files{where}, as `careful score` wrote them "
                "from its replay (bfcl's format, not bfcl's files; `careful provenance` "
                "compares a run's two)")
    return (f"source: bfcl's score files{where}, as bfcl wrote them (not re-scored; "
            "`careful score` replays the result files, `careful provenance` compares the two)")


def overall_terminal(audits: list[sa.ModelAudit], source: Path | None = None) -> Table:
    """Overall accuracy as bfcl weights it, for an 80-column terminal; the caption names
    the score files it was read from (``source``: their folder)."""
    rows = [[a.model, *[one_decimal(pct(a.overall.blocks[b])) for b in sa.BLOCKS],
             one_decimal(pct(a.overall.overall)), one_decimal(pct(a.overall.unweighted)),
             one_decimal(pct(a.overall.relevance))] for a in audits]
    return terminal_table(
        f"Overall as bfcl weights it (%), from {writer(source)} score files",
        ["model", "n-live", "live", "irrel", "m-turn", "agent", "overall", "unwtd", "relev"],
        rows, "weights 10/10/10/30/40 (non-live/live/irrelevance/multi-turn/agentic); unwtd: "
              "plain mean of the 5 blocks; relev: live_relevance (in no block); absent = 0; "
              + source_note(source),
        first_width=20, tight=True)  # eight cells of 100.0 fit 80 columns


def credited_terminal(audits: list[sa.ModelAudit], result_dir: Path | None) -> Table:
    """The irrelevance entries bfcl credited, for an 80-column terminal."""
    rows = []
    for a in audits:
        for cr in a.credited:
            read = str(cr.read) if cr.result_file else "–"
            rows.append([a.model, cr.category.replace("live_irrelevance", "live_irrel"),
                         f"{cr.credited}/{cr.credited + cr.failed}", read, str(cr.calls),
                         str(cr.empty), str(cr.other), one_decimal(pct(cr.call_share))])
    where = str(result_dir) if result_dir else "none found (use --results)"
    return terminal_table(
        "Credited irrelevance entries", ["model", "category", "credited", "read", "call",
                                         "empty", "other", "call %"], rows,
        f"read: credited entries found in the result files ({where}); call: raw output "
        "holds an attempted call (heuristic)", first_width=16, tight=True)
