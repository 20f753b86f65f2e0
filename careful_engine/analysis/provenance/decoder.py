"""Decoder drift: the day's decode of each logged step against today's decoder.

bfcl's inference loop logs what its decoder made of every step (``handler_log``:
``model_response_decoded``, or ``error`` when decoding raised). The same raw output, decoded
today by the model's handler (``careful_engine.core.decode``), should give the same calls. A step
decodes differently when the outcome differs (calls / no call / decode error) or the call
strings differ. Error messages are not compared: only that both failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from careful_engine.analysis.provenance.log import InferenceLog, LoggedStep
from careful_engine.core.decode import is_empty_execute_response, text_answer
from careful_engine.core.trajectory import Outcome, Step, Trajectory


@dataclass
class DecodeDiff:
    """One step that decodes differently today."""

    turn: int
    step: int
    kind: str  # "<then>-><now>", or "calls differ"
    then: Any
    now: Any

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "step": self.step, "kind": self.kind,
                "then": self.then, "now": self.now}


@dataclass
class DecoderDrift:
    compared: int = 0  # steps with a logged decode and a step in the result
    diffs: list[DecodeDiff] | None = None
    raw_mismatch: list[tuple[int, int]] | None = None  # log's raw output != result's step

    @property
    def differs(self) -> bool:
        return bool(self.diffs)

    def first_at_or_before(self, turn: int, step: int) -> DecodeDiff | None:
        for d in self.diffs or []:
            if (d.turn, d.step) <= (turn, step):
                return d
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "steps_compared": self.compared,
            "steps_differing": len(self.diffs or []),
            "diffs": [d.to_json() for d in self.diffs or []],
            "raw_output_differs_from_result": [list(x) for x in self.raw_mismatch or []],
        }


_CALLS, _NO_CALL, _ERROR = Outcome.CALLS, Outcome.NO_CALL, Outcome.DECODE_ERROR
CALLS, NO_CALL, ERROR = _CALLS.value, _NO_CALL.value, _ERROR.value


def _then(step: LoggedStep, raw: Any) -> tuple[str, Any]:
    """The day's decode of a step whose text is ``raw`` (a text answer the handler failed to
    decode is no call, as today: :func:`~careful_engine.core.decode.text_answer`)."""
    if step.decoded is not None:
        try:
            empty = is_empty_execute_response(step.decoded)
        except TypeError:
            empty = False
        return (NO_CALL, []) if empty else (CALLS, step.decoded)
    if text_answer(raw):
        return NO_CALL, []
    return ERROR, step.decode_error


def _now(step: Step) -> tuple[str, Any]:
    outcome = step.outcome
    if outcome is _CALLS:
        return CALLS, step.calls
    if outcome is _NO_CALL:
        return NO_CALL, []
    return ERROR, step.error


def decoder_drift(log: InferenceLog, trajectory: Trajectory | None) -> DecoderDrift:
    """Compare every logged decode with today's decode of the same step of ``result``."""
    out = DecoderDrift(0, [], [])
    if trajectory is None or trajectory.turns is None:
        return out
    for t, turn in enumerate(log.turns):
        today = trajectory.turns[t] if t < len(trajectory.turns) else []
        for logged in turn.steps:
            s = logged.index
            if s >= len(today):
                if logged.decode_logged:
                    out.diffs.append(DecodeDiff(t, s, "step missing from result",
                                                _then(logged, logged.raw)[1], None))
                continue
            step = today[s]
            if logged.has_raw and logged.raw != step.raw:
                out.raw_mismatch.append((t, s))
            if not logged.decode_logged:
                continue
            out.compared += 1
            (k_then, v_then), (k_now, v_now) = _then(logged, step.raw), _now(step)
            if k_then != k_now:
                out.diffs.append(DecodeDiff(t, s, f"{k_then}->{k_now}", v_then, v_now))
            elif k_then == CALLS and v_then != v_now:
                out.diffs.append(DecodeDiff(t, s, "calls differ", v_then, list(v_now)))
    return out
