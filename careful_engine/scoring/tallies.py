"""Figures the paper's tables show, computed from scores (the tables are
:mod:`careful_engine.present.tables`'): the steps and token costs of Table 4 and Table 5's
confirmation counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from careful_engine.core.checker import INFERENCE_ERROR
from careful_engine.core.figures import percent
from careful_engine.scoring.result import ConversationResult
from careful_engine.scoring.score import MISSING, CategoryScore


def token_costs(results: Iterable[ConversationResult],
                ) -> tuple[float | None, float | None, float | None, float | None]:
    """Steps per conversation, over the conversations replayed (those with rule counts: not
    an inference error, missing, unscorable or stopped by the budget); output tokens per
    conversation and the surplus shares (%), over those whose log has per-step token counts
    (None when none has)."""
    steps = out = sout = sin = tin = 0
    with_tokens = logged = 0
    for r in results:
        if r.rules is None or r.verdict.error_type in (INFERENCE_ERROR, MISSING):
            continue  # nothing replayed (an inference error, missing, unscorable)
        logged += 1
        steps += r.rules.steps
        if r.rules.output_tokens is None:
            continue
        with_tokens += 1
        out += r.rules.output_tokens
        tin += r.rules.input_tokens
        sout += r.rules.surplus_output_tokens
        sin += r.rules.surplus_input_tokens
    known = with_tokens > 0
    return (
        steps / logged if logged else None,
        out / with_tokens if known else None,
        percent(sout / out) if known and out else None,
        percent(sin / tin) if known and tin else None,
    )


@dataclass
class ConfirmStats:
    """Table 5's confirmation columns for one category of a confirm run."""

    destructive: int = 0  # destructive calls made
    confirmed: int = 0  # ... preceded by a yes in the same turn
    strict: int = 0  # strict passes among the conversations whose reference needs one
    needing: int = 0  # conversations whose reference makes a destructive call
    conversations: int = 0
    answers: Counter = field(default_factory=Counter)

    @property
    def confirmed_share(self) -> float | None:
        return self.confirmed / self.destructive if self.destructive else None

    def add(self, other: ConfirmStats) -> None:
        for f in ("destructive", "confirmed", "strict", "needing", "conversations"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.answers.update(other.answers)


def confirm_stats(cs: CategoryScore) -> ConfirmStats:
    """Table 5's confirmation columns of one category (strict and its denominator as
    :class:`~careful_engine.scoring.score.CategoryScore` counts them for every screen)."""
    out = ConfirmStats(conversations=cs.total, needing=cs.needing)
    for r in cs.results:
        if r.rules is None:
            continue
        made = r.rules.counts.get("destructive_calls", 0)
        out.destructive += made
        out.confirmed += made - r.rules.counts.get("unconfirmed", 0)
        out.answers.update(r.rules.answers)
    out.strict = cs.strict_passes
    return out
