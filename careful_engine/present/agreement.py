"""Agreement and the reveal log as every front end shows them (the CLI's tables, the
workbench's Agreement screen): the same columns, the same figures (:func:`statistic`: the
one rounding rule, :func:`~careful_engine.core.figures.figure_text`), the same lines."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from careful_engine.annotation.agreement import AgreementReport
from careful_engine.core.figures import figure_text
from careful_engine.core.safe_text import clip, visible

PAIR_COLUMNS = ("pair", "agree", "raw", "Cohen's κ")
LOG_CHARS = 200  # of an override's reason (and who, what) in a reveal-log line; the rest cut


def statistic(value: float | None) -> str:
    """A statistic (κ, α, raw agreement) to three places, half up; ``–`` when undefined."""
    return "–" if value is None or math.isnan(value) else figure_text(value, 3)


@dataclass(frozen=True)
class AgreementTables:
    """An agreement report as text: ``title`` (functions, unanimous), one row per pair under
    :data:`PAIR_COLUMNS`, and the overall figures as (name, value) rows. Names are as
    stored: a front end shows each cell literally."""

    title: str
    pairs: tuple[tuple[str, ...], ...]
    overall: tuple[tuple[str, str], ...]

    def pair_cells(self, columns: Iterable[str]) -> list[tuple[str, ...]]:
        """The pair rows with only ``columns`` (of :data:`PAIR_COLUMNS`), in that order."""
        at = [PAIR_COLUMNS.index(c) for c in columns]
        return [tuple(row[i] for i in at) for row in self.pairs]


def agreement_tables(report: AgreementReport) -> AgreementTables:
    """``report`` as the tables every front end shows."""
    return AgreementTables(
        title=f"{len(report.functions)} functions, {report.unanimous}/{report.complete} "
              "unanimous",
        pairs=tuple((f"{p.a}–{p.b}", f"{p.agree}/{p.n}", statistic(p.raw), statistic(p.kappa))
                    for p in report.pairs),
        overall=(("Fleiss' κ", statistic(report.fleiss)),
                 ("Krippendorff's α (nominal)", statistic(report.alpha)),
                 ("destructive labels", ", ".join(f"{a} {n}" for a, n in report.yes.items()))),
    )


@dataclass(frozen=True)
class RevealLine:
    """One opening of a round's labels: ``override`` when it opened a blind round early,
    ``text`` (who, when, what, and the reason of an override) with control characters as
    escapes, each part cut past :data:`LOG_CHARS`."""

    override: bool
    text: str


def reveal_lines(reveals: Iterable[Mapping], overrides: int,
                 openings: int = 0) -> list[RevealLine]:
    """The last ``overrides`` overrides and the last ``openings`` other openings of a reveal
    log (:meth:`~careful_engine.annotation.store.Store.reveal_log`), in time order."""
    reveals = list(reveals)
    early = [r for r in reveals if r["override"]]
    other = [r for r in reveals if not r["override"]]
    shown = (early[-overrides:] if overrides > 0 else []) + (
        other[-openings:] if openings > 0 else [])
    shown.sort(key=lambda r: str(r["created"]))

    def part(value: object) -> str:
        return visible(clip(str(value), LOG_CHARS))

    lines = []
    for r in shown:
        head = (f"by {part(r['who'])} at {visible(str(r['created'])[:19])}, "
                f"{part(r.get('what') or 'all labels')}")
        lines.append(RevealLine(True, f"override {head}: {part(r['override'])}")
                     if r["override"] else RevealLine(False, f"opened {head}"))
    return lines


__all__ = ["LOG_CHARS", "PAIR_COLUMNS", "AgreementTables", "RevealLine", "agreement_tables",
           "reveal_lines", "statistic"]
