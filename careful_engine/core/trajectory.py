"""Plain data for decoded trajectories and replayed traces."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from careful_engine.core.calls import Call, ParseFailure
from careful_engine.core.state import Change, State, diff


class Outcome(StrEnum):
    """What one logged model step decoded to."""

    CALLS = "calls"
    NO_CALL = "no_call"
    DECODE_ERROR = "decode_error"


@dataclass
class Step:
    """One logged model step (one model response) and its decode outcome."""

    raw: Any
    outcome: Outcome
    calls: list[str] = field(default_factory=list)
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def text(self) -> str:
        """The prose of the step, for steps that are text (best effort over BFCL's formats)."""
        raw = self.raw
        if isinstance(raw, str):
            return raw
        if isinstance(raw, list):
            return "\n".join(x for x in raw if isinstance(x, str))
        return ""


@dataclass
class Trajectory:
    """The model side of one result entry, decoded step by step.

    ``turns`` is None when the entry's ``result`` is not a list (an inference error).
    """

    id: str
    turns: list[list[Step]] | None
    raw_result: Any = None
    inference_error: str | None = None
    user_answers: dict[int, list[dict]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    confirm: bool = False  # generated under the confirmation protocol (answers recorded)
    # (turn, step, reason) where decoding stopped: the step is too long to decode within the
    # budget (careful_engine.core.decode); the replay stops there with the budget verdict
    over_budget: tuple[int, int, str] | None = None

    def decoded(self) -> list[list[list[str]]]:
        """What bfcl's evaluator passes to its checker: per turn, the non-empty decoded steps."""
        return [[s.calls for s in turn if s.outcome is Outcome.CALLS] for turn in self.turns or []]


@dataclass(slots=True)
class CallRecord:
    """One executed call with its result and the state before and after it."""

    turn: int
    step: int  # index of the step within the turn (-1 for reference calls)
    text: str
    call: Call | ParseFailure
    result: str
    success: bool
    class_name: str | None
    state_before: State = field(repr=False)
    state_after: State = field(repr=False)

    @property
    def name(self) -> str | None:
        return self.call.name

    @property
    def parsed(self) -> bool:
        return isinstance(self.call, Call)

    @property
    def changed(self) -> bool:
        return self.state_before is not self.state_after and self.state_before != self.state_after

    def diff(self, classes: Collection[str] | None = None) -> list[Change]:
        """Leaf changes this call made (hidden state included); with ``classes``, only those
        of these classes."""
        if self.state_before is self.state_after:
            return []
        return diff(self.state_before, self.state_after, classes)


@dataclass
class SideTrace:
    """All calls of one side (model or reference) of a conversation, per turn."""

    turns: list[list[CallRecord]]
    initial_state: State = field(repr=False)
    turn_end_states: list[State] = field(repr=False, default_factory=list)

    def calls(self) -> list[CallRecord]:
        return [c for t in self.turns for c in t]

    def results(self, turn: int) -> list[str]:
        return [c.result for c in self.turns[turn]]


@dataclass
class Verdict:
    """bfcl's multi-turn verdict for one entry."""

    valid: bool
    error_type: str | None = None
    error_message: str | None = None
    turn: int | None = None
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"valid": self.valid}
        if not self.valid:
            out["error"] = {
                "error_message": self.error_message,
                "error_type": self.error_type,
                "details": self.details,
            }
        return out
