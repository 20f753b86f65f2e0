"""Replay fidelity: each replayed call's result against the tool result logged at generation.

The log's ``tool`` messages of step ``s`` of turn ``t`` are the results of that step's calls,
in order; the replay's model-side :class:`CallRecord` s of the same turn and step are aligned
with them by position. A call is *reproduced* when both strings are equal. Each divergence gets
a cause, the first that applies of:

``decoder_drift``    today's decoder makes other calls of this step or an earlier one
``not_replayed`` / ``not_logged`` a call on one side only, with no decoder drift to explain it
``engine_refusal``   the engine refused the call (it never ``eval`` s) and bfcl's executor
                     failed too, with another message: verdict-neutral wording
``function_removed`` the call names a function the pinned simulators no longer have
``engine_refused``   the engine refused a call (not a plain call of literals) that bfcl's
                     ``eval`` ran on the day
``data_drift``       the logged initial state of the call's class differs from the pinned one
``nondeterministic`` the results differ only in generated ids (uuids, ``*_id``, tokens) or
                     wall-clock values (date-times)
``numeric_precision`` the results differ only in the last digits of floats
``state_diverged``   the logged state of the call's class at the start of the turn differs
                     from the replay's (an earlier call had another effect than on the day)
``simulator_changed`` same call, same logged state: the pinned simulator answers differently
                     (a change in bfcl-eval's simulator code, or process state of the day)
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from careful_engine.analysis.provenance.decoder import DecoderDrift
from careful_engine.analysis.provenance.drift import DatasetDrift
from careful_engine.analysis.provenance.log import InferenceLog, parse_log
from careful_engine.analysis.provenance.logged_state import logged_classes, state_differences
from careful_engine.core import bfcl
from careful_engine.core.calls import ParseFailure
from careful_engine.core.replay import ConversationTrace
from careful_engine.core.trajectory import CallRecord, SideTrace

CAUSES = (
    "decoder_drift", "not_replayed", "not_logged", "engine_refusal", "function_removed",
    "engine_refused", "data_drift", "nondeterministic", "numeric_precision", "state_diverged",
    "simulator_changed",
)
# causes whose difference cannot change bfcl's verdict of the replay: refusal wording never
# matches a reference result, and float digits come from the same pinned code on both sides
VERDICT_NEUTRAL = frozenset({"engine_refusal", "numeric_precision"})

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_CLOCK = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2})?")
_ID_KEY = re.compile(r"(^|_)(id|uuid|token)$", re.I)
_ERROR = "Error during execution"


@dataclass
class Divergence:
    """A logged tool result that the replay does not reproduce."""

    turn: int
    step: int
    index: int
    call: str | None
    logged: str | None
    replayed: str | None
    cause: str = "simulator_changed"
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "step": self.step, "index": self.index, "call": self.call,
                "logged": self.logged, "replayed": self.replayed, "cause": self.cause,
                "detail": self.detail}


@dataclass
class Fidelity:
    logged: int = 0  # tool results in the log
    reproduced: int = 0
    extra: int = 0  # replayed calls with no logged result
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def first(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None

    @property
    def relevant(self) -> list[Divergence]:
        """Divergences whose cause is not verdict-neutral."""
        return [d for d in self.divergences if d.cause not in VERDICT_NEUTRAL]

    @property
    def share(self) -> float | None:
        return self.reproduced / self.logged if self.logged else None

    def to_json(self) -> dict[str, Any]:
        first = self.first
        return {"calls_logged": self.logged, "reproduced": self.reproduced,
                "replayed_not_logged": self.extra,
                "divergent_calls": len(self.divergences),
                "causes": sorted({d.cause for d in self.divergences}),
                "first_divergence": first.to_json() if first else None}


# ---------------------------------------------------------------- logged results for the UI


def logged_tool_results(entry: dict) -> dict[tuple[int, int, int], str]:
    """Per model call ``(turn, step, index in step)``, the tool result the model was shown."""
    log = parse_log(entry.get("inference_log")) if isinstance(entry, dict) else None
    if log is None:
        return {}
    return {
        (t, step.index, i): result
        for t, turn in enumerate(log.turns)
        for step in turn.steps
        for i, result in enumerate(step.tools)
    }


def _by_step(side: SideTrace | None) -> dict[tuple[int, int], list[CallRecord]]:
    out: dict[tuple[int, int], list[CallRecord]] = {}
    for turn in side.turns if side else []:
        for rec in turn:
            out.setdefault((rec.turn, rec.step), []).append(rec)
    return out


@dataclass
class SeenResult:
    """A replayed call beside the result logged for it at generation time."""

    record: CallRecord
    logged: str | None

    @property
    def same(self) -> bool:
        return self.logged == self.record.result


def seen_results(trace: ConversationTrace, entry: dict) -> dict[tuple[int, int, int], SeenResult]:
    """Per replayed model call ``(turn, step, index)``: its record and the logged result."""
    logged = logged_tool_results(entry)
    return {
        (t, s, i): SeenResult(rec, logged.get((t, s, i)))
        for (t, s), recs in _by_step(trace.model).items()
        for i, rec in enumerate(recs)
    }


# ---------------------------------------------------------------- comparison


def _leaf_reasons(a: Any, b: Any, key: str, out: set[str]) -> None:
    if type(a) is not type(b) and not (_number(a) and _number(b)):
        out.add("content")
    elif isinstance(a, dict):
        if a.keys() != b.keys():
            out.add("content")
            return
        for k in a:
            if a[k] != b[k]:
                _leaf_reasons(a[k], b[k], str(k), out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.add("content")
            return
        for x, y in zip(a, b, strict=True):
            if x != y:
                _leaf_reasons(x, y, key, out)
    elif _number(a) and _number(b):
        close = math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        out.add("float" if close else ("id" if _ID_KEY.search(key) else "content"))
    elif isinstance(a, str):
        if (_UUID.match(a) and _UUID.match(b)) or _ID_KEY.search(key):
            out.add("id")
        elif _CLOCK.search(a) and _CLOCK.search(b) and _CLOCK.sub("", a) == _CLOCK.sub("", b):
            out.add("clock")
        else:
            out.add("content")
    else:
        out.add("content")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def value_cause(logged: str, replayed: str) -> str | None:
    """``nondeterministic`` / ``numeric_precision`` when only such values differ, else None."""
    try:
        a, b = json.loads(logged), json.loads(replayed)
    except (ValueError, TypeError, RecursionError):
        a, b = logged, replayed
    reasons: set[str] = set()
    try:
        _leaf_reasons(a, b, "", reasons)
    except RecursionError:
        return None
    if not reasons or "content" in reasons:
        return None
    return "numeric_precision" if reasons == {"float"} else "nondeterministic"


def _cause(
    div: Divergence,
    rec: CallRecord | None,
    drift: DatasetDrift,
    decoder: DecoderDrift,
    log: InferenceLog,
    model: SideTrace,
    involved: tuple[str, ...],
) -> tuple[str, str]:
    d = decoder.first_at_or_before(div.turn, div.step)
    if d is not None:
        return "decoder_drift", f"turn {d.turn} step {d.step}: {d.kind}"
    if rec is None:
        return "not_replayed", "a logged result with no replayed call"
    if div.logged is None:
        return "not_logged", "a replayed call with no logged result"
    if isinstance(rec.call, ParseFailure):
        name = rec.call.name
        if div.logged.startswith(_ERROR):
            return "engine_refusal", rec.call.reason
        if name and name not in bfcl.function_class() and "is not defined" in rec.call.reason:
            return "function_removed", f"{name} is not a function of the pinned simulators"
        return "engine_refused", rec.call.reason
    cls = rec.class_name
    if cls is not None and cls in drift.changed_classes:
        return "data_drift", f"initial state changed: {', '.join(sorted(drift.changed_classes))}"
    vc = value_cause(div.logged, div.replayed or "")
    if vc:
        return vc, ""
    before = log.state_before(div.turn)
    if before is not None:
        mine = model.initial_state if div.turn == 0 else (
            model.turn_end_states[div.turn - 1] if div.turn - 1 < len(model.turn_end_states)
            else None)
        if mine is not None:
            classes = [cls] if cls in before else logged_classes(involved)
            diffs = state_differences(mine, before, classes)
            if diffs:
                return "state_diverged", "state at turn start differs: " + ", ".join(diffs[:4])
        return "simulator_changed", "same call from the same logged state"
    return "simulator_changed", "same call (state at turn start not logged)"


def replay_fidelity(
    trace: ConversationTrace, log: InferenceLog, drift: DatasetDrift, decoder: DecoderDrift
) -> Fidelity:
    """Compare the replay's model calls with the logged tool results, call by call."""
    out = Fidelity()
    model = trace.model
    if model is None:
        return out
    records = _by_step(model)
    seen: set[tuple[int, int]] = set()
    for t, turn in enumerate(log.turns):
        for step in turn.steps:
            recs = records.get((t, step.index), [])
            seen.add((t, step.index))
            out.logged += len(step.tools)
            for i in range(max(len(step.tools), len(recs))):
                logged = step.tools[i] if i < len(step.tools) else None
                rec = recs[i] if i < len(recs) else None
                if logged is None:
                    out.extra += 1
                elif rec is not None and rec.result == logged:
                    out.reproduced += 1
                    continue
                div = Divergence(t, step.index, i, rec.text if rec else None, logged,
                                 rec.result if rec else None)
                div.cause, div.detail = _cause(div, rec, drift, decoder, log, model,
                                               trace.conversation.involved_classes)
                out.divergences.append(div)
    for key, recs in records.items():
        if key not in seen and key[0] < len(log.turns):
            out.extra += len(recs)
    return out
