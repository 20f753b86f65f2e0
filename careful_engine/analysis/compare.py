"""Comparing two runs conversation by conversation (paper Table 5): score one model folder of
each run, pair their verdicts by conversation id under each chosen score, and evaluate the
CI gates on the pairing (:mod:`careful_engine.analysis.gates`).

The pairing itself (:func:`~careful_engine.analysis.leaderboard.compare`, the exact McNemar
test) lives with the leaderboard; this module holds the decisions `careful compare` makes
around it, as data, so that any front end gets the same result.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.analysis import gates
from careful_engine.analysis.leaderboard import (
    VERDICTS,
    Comparison,
    Entry,
    Scored,
    compare,
    label_entries,
    score_run_groups,
    synthetic_label,
    without_protocol,
)


class NotComparable(ValueError):
    """Nothing to compare; ``unusable``: the folders that could not be scored;
    ``not_strict``: the entries strict success was dropped for (see :func:`pair`); ``notes``:
    :attr:`Scored.notes` of both runs."""

    def __init__(self, message: str, unusable: Iterable[str] = (),
                 not_strict: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.unusable = list(unusable)
        self.not_strict = list(not_strict)
        self.notes: list[str] = []


def parse_scores(values: Iterable[str] | None) -> list[str]:
    """``--score`` values (bfcl, safe, strict, both = bfcl and safe; default both) as the
    verdict kinds to pair, in order, without repeats; raises ValueError on another name."""
    kinds = [k for s in values or ["both"] for k in (["bfcl", "safe"] if s == "both" else [s])]
    for k in kinds:
        if k not in VERDICTS:
            raise ValueError(f"{k!r}; choose bfcl, safe, strict or both")
    return list(dict.fromkeys(kinds))


def one_entry(scored: Scored, run: Path, which: str) -> Entry:
    """The one entry of a compared run (``which``: "a" or "b", naming the side in the
    messages); raises :class:`NotComparable` when it has none or several."""
    side = f"RUN_{which.upper()} {run}"
    if not scored.entries:
        raise NotComparable(f"{side}: nothing to compare", scored.unusable)
    if len(scored.entries) > 1:
        names = ", ".join(e.model for e in scored.entries)
        raise NotComparable(f"{side} holds {len(scored.entries)} model folders ({names}); "
                            f"choose one with --model-{which}")
    return scored.entries[0]


def _same(a: Path | None, b: Path | None) -> bool:
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def side_labels(a: Entry, b: Entry) -> tuple[str, str]:
    """Labels for A and B: their entry labels, or, when those are the same but the model
    folders are not, both labelled together as the leaderboard labels entries."""
    if a.label != b.label or _same(a.folder, b.folder):
        return a.label, b.label
    label_a, label_b = label_entries([(a.run, a.model), (b.run, b.model)], [a.folder, b.folder])
    return (synthetic_label(label_a, a.score.synthetic),
            synthetic_label(label_b, b.score.synthetic))


@dataclass
class Pairing:
    """Two scored entries and their comparisons, one per verdict kind."""

    a: Entry
    b: Entry
    scored: Scored  # both runs: their problems and unusable folders
    comparisons: list[Comparison]
    label_a: str
    label_b: str
    not_strict: list[str] = field(default_factory=list)  # entries without the protocol

    @property
    def kinds(self) -> list[str]:
        return [c.kind for c in self.comparisons]


def strict_not_applicable(labels: list[str]) -> str:
    """Why strict success of these entries (without the confirmation protocol) is not
    compared: the words of careful compare and the workbench's Compare tab."""
    return (f"strict success is not applicable to {', '.join(labels)} (no confirmation "
            "protocol, so no destructive call can be confirmed); not compared")


def pair(scored: Scored, kinds: list[str]) -> Pairing:
    """Pair the two entries of ``scored`` (A, B; see :func:`score_pair`) under each kind. Strict success is dropped (and the entries that lack the
    confirmation protocol named in ``not_strict``) when either entry has no protocol, since
    no destructive call can be confirmed there. Raises :class:`NotComparable` when no kind is
    left or the two share no category."""
    a, b = scored.entries
    standard = [e.label for e in (a, b) if without_protocol(e.score)]
    if "strict" in kinds and standard:
        kinds = [k for k in kinds if k != "strict"]
    else:
        standard = []
    if not kinds:
        raise NotComparable("nothing to compare", not_strict=standard)
    comparisons = [compare(a.score, b.score, k) for k in kinds]
    if not comparisons[0].categories:
        raise NotComparable(f"no category in common: A has "
                            f"{', '.join(a.score.categories) or 'none'}, B has "
                            f"{', '.join(b.score.categories) or 'none'}",
                            not_strict=standard)
    label_a, label_b = side_labels(a, b)
    return Pairing(a, b, scored, comparisons, label_a, label_b, standard)


def score_pair(run_a: Path, run_b: Path, *, model_a: str | None = None,
               model_b: str | None = None, **score: Any) -> Scored:
    """Score one model folder of each run, both runs' files in one pool of workers: entries
    ``[A, B]`` with both runs' problems, each once (a file read for both sides, as in
    ``compare X X``, gives its problems once); raises :class:`NotComparable` (see
    :func:`one_entry`). ``score``: the keywords of
    :func:`~careful_engine.analysis.leaderboard.score_run_groups`."""
    sa, sb = score_run_groups([([run_a], [model_a] if model_a else None),
                               ([run_b], [model_b] if model_b else None)], **score)
    try:
        a, b = one_entry(sa, run_a, "a"), one_entry(sb, run_b, "b")
    except NotComparable as e:
        e.notes = sa.notes + sb.notes
        raise
    seen = {astuple(p) for p in sa.problems}
    return Scored([a, b], sa.runs + sb.runs,
                  sa.problems + [p for p in sb.problems if astuple(p) not in seen],
                  list(dict.fromkeys(sa.unusable + sb.unusable)), sa.notes + sb.notes)


def gate(pairing: Pairing, *, fail_on_regression: bool, alpha: float,
         limits: list[gates.Increase]) -> gates.Gate:
    """The gate of `careful compare`: a significant regression under any kind (when asked)
    and each rule count's increase limit. A strict regression asked for where it cannot be
    applied (an entry without the confirmation protocol) fails as not applicable, as a strict
    floor of `careful score` does."""
    conditions = []
    if fail_on_regression:
        conditions = gates.check_regressions(pairing.comparisons, alpha)
        if pairing.not_strict:
            conditions.append(gates.Condition(
                "regression", gates.OVERALL, False, "strict overall: not applicable (no "
                f"confirmation protocol in {', '.join(pairing.not_strict)})", "strict",
                values={"not_applicable": pairing.not_strict}))
    conditions += gates.check_increases(pairing.a.score, pairing.b.score, limits)
    return gates.Gate(conditions, fail_on_regression or bool(limits),
                      {"fail_on_regression": fail_on_regression, "alpha": alpha,
                       "scores": [*pairing.kinds, *(["strict"] if pairing.not_strict else [])],
                       "max_increase": [x.text for x in limits]})
