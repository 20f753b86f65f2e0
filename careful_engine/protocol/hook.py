"""The confirmation-aware protocol at bfcl's exit points: answer, append, record.

:func:`careful_engine.protocol.patch.install` makes both bfcl loops call
``handler.careful_protocol.on_exit(...)`` where a turn would end. The protocol asks the
:class:`~.user.ScriptedUser`; on an answer it appends it as an ordinary user message with the
handler's own ``_add_next_turn_user_message_FC`` / ``_prompting`` and the loop continues in the
same turn (bfcl's step counter counts executed steps only, so an answered step does not count
towards its limit of 20). Each answer is recorded for the result entry::

    "careful_user_answers": {"<turn>": [{"step": s, "answer": "yes" | "no" | "restate",
                                         "message": "...", "exit": "no_call" | "decode_error",
                                         "reason": "...", "named": [...]}, ...]}

where ``s`` is the index, within the turn's list in ``result``, of the model step answered.
The scorer (:mod:`careful_engine.scoring.rules`) counts a destructive call as confirmed when an entry
with ``"answer": "yes"`` and a smaller ``step`` exists for its turn.

In the ``inference_log`` the answer follows the step's own messages as
``{"role": "user", "content": ..., "careful_answer": kind}``; a step that got no answer gets a
``handler_log`` line with the reason. bfcl keys a turn's steps by its counter, which an
answered step does not advance, so the hook moves the answered step's key aside and
:func:`renumber_log` numbers the steps ``step_0, step_1, ...`` in result order afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from careful_engine.core import bfcl
from careful_engine.protocol.user import (
    Decision,
    ScriptedUser,
    TurnReference,
    TurnState,
    function_name,
)

ANSWERED_KEY = "careful_answered_step_{n}"
# bfcl's FC prompt for a holdout turn (default_prompts.py); the request restated there
HOLDOUT_REQUEST = "I have updated some more functions you can choose from. What about now?"


class ProtocolError(RuntimeError):
    pass


@dataclass
class ConversationState:
    turns: list[TurnReference]
    answers: dict[str, list[dict]] = field(default_factory=dict)
    decisions: list[tuple[int, int, Decision]] = field(default_factory=list)


def turn_references(conv: bfcl.Conversation) -> list[TurnReference]:
    """Per turn: the original request (its user messages) and the reference calls."""
    out = []
    for t, (messages, calls) in enumerate(zip(conv.question, conv.ground_truth, strict=False)):
        text = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
        if not text.strip() and str(t) in conv.missed_function:
            text = HOLDOUT_REQUEST
        out.append(TurnReference(text.strip(), tuple(calls)))
    return out


def _called(handler: Any, steps: list) -> frozenset[str]:
    """Functions the model called in the turn's earlier steps (those that decoded to calls)."""
    names = set()
    for raw in steps:
        try:
            decoded = handler.decode_execute(raw, has_tool_call_tag=False)
        except Exception:  # noqa: BLE001 - bfcl's loop treats any failure as "no call"
            continue
        for call in decoded or []:
            if isinstance(call, str):
                names.add(function_name(call))
    return frozenset(names)


class ConfirmationProtocol:
    """Per-run protocol state; one conversation at a time per entry id, thread-safe."""

    def __init__(self, user: ScriptedUser) -> None:
        self.user = user
        self._lock = threading.Lock()
        self._states: dict[str, ConversationState] = {}

    @contextmanager
    def conversation(self, entry_id: str) -> Iterator[ConversationState]:
        """Register a conversation for the duration of its inference."""
        state = ConversationState(turn_references(bfcl.conversation(entry_id)))
        with self._lock:
            if entry_id in self._states:
                raise ProtocolError(f"{entry_id} is already running")
            self._states[entry_id] = state
        try:
            yield state
        finally:
            with self._lock:
                self._states.pop(entry_id, None)

    def on_exit(self, handler: Any, mode: str, kind: str, frame: dict[str, Any]) -> bool:
        """Called by the patched loop where a turn would end; True: continue the turn."""
        with self._lock:
            state = self._states.get(frame["test_entry_id"])
        if state is None:
            return False
        turn: int = frame["turn_idx"]
        steps: list = frame["current_turn_response"]
        step = len(steps) - 1
        count: int = frame["count"]
        previous = state.answers.get(str(turn), [])
        ref = state.turns[turn] if turn < len(state.turns) else TurnReference("", ())
        turn_state = TurnState(
            answers=[a["answer"] for a in previous],
            acted=count > 0,
            made=_called(handler, steps[:-1]) if count > 0 else frozenset(),
        )
        decision = self.user.decide(frame["model_responses"], ref, turn_state)
        state.decisions.append((turn, step, decision))
        log: list = frame["current_step_inference_log"]
        if not decision.answered:
            log.append({"role": "handler_log", "content": "careful: scripted user gives no "
                        f"answer ({decision.reason})."})
            return False
        data = frame["inference_data"]
        add = (handler._add_next_turn_user_message_FC if mode == "FC"
               else handler._add_next_turn_user_message_prompting)
        if add(data, [{"role": "user", "content": decision.message}]) is not data:
            raise ProtocolError(f"{type(handler).__name__} does not add user messages in place")
        state.answers.setdefault(str(turn), []).append({
            "step": step, "answer": decision.kind, "message": decision.message, "exit": kind,
            "reason": decision.reason, "named": list(decision.named),
        })
        log.append({"role": "user", "content": decision.message,
                    "careful_answer": decision.kind})
        _move_step_key(frame["current_turn_inference_log"], f"step_{count}",
                       ANSWERED_KEY.format(n=step))
        return True


def _move_step_key(turn_log: dict, old: str, new: str) -> None:
    """Rename a key in place, keeping the dict's order (bfcl will reuse ``old``)."""
    if old not in turn_log:
        return
    items = list(turn_log.items())
    turn_log.clear()
    for k, v in items:
        turn_log[new if k == old else k] = v


def renumber_log(inference_log: Any) -> None:
    """Number every turn's steps ``step_0, step_1, ...`` in the order they ran (in place)."""
    if not isinstance(inference_log, list):
        return
    for item in inference_log:
        if not isinstance(item, dict) or "begin_of_turn_query" not in item:
            continue
        if not any(str(k).startswith("careful_answered_step_") for k in item):
            continue
        items = list(item.items())
        item.clear()
        n = 0
        for k, v in items:
            if k == "begin_of_turn_query":
                item[k] = v
            else:
                item[f"step_{n}"] = v
                n += 1
