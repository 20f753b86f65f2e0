"""Dataset drift: the logged user messages and initial state against the pinned dataset's.

A conversation is *identical* when every logged turn's user messages and the logged initial
state equal the pinned dataset's, and the log has as many turns as the dataset (fewer only
when the run was force-quit at the step limit, or stopped by an inference error). Otherwise it
drifted in one or more ways: question changed, initial state changed, turn count changed.
Without a log there is nothing to compare: *no log* (unverifiable, never clean).

Held-out turns (miss_func) are empty in the dataset; bfcl replaces them with a fixed sentence
(``default_prompts.py:71-77``: FC models get the sentence, prompting models the repr of the
held-out docs, a newline, then the sentence). A logged held-out turn matches when it is one
user message ending with that sentence; a list of docs that names other functions than the
dataset's is noted (what the harness showed), not counted as drift. System messages a
prompting handler adds to the first turn are not part of the dataset and are skipped.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any

from careful_engine.analysis.provenance.log import InferenceLog
from careful_engine.analysis.provenance.logged_state import (
    excerpt,
    logged_classes,
    logged_form,
    same,
    state_differences,
)
from careful_engine.core import bfcl, process

# bfcl_eval/constants/default_prompts.py:71-73 (checked against the package by the tests)
HOLDOUT_SENTENCE = "I have updated some more functions you can choose from. What about now?"


class DriftKind(StrEnum):
    IDENTICAL = "identical"
    QUESTION = "question_changed"
    INITIAL_STATE = "initial_state_changed"
    TURN_COUNT = "turn_count_changed"
    NO_LOG = "no_log"


DRIFT_ORDER = (DriftKind.TURN_COUNT, DriftKind.QUESTION, DriftKind.INITIAL_STATE)


@dataclass
class DatasetDrift:
    """How one conversation's log compares with the pinned dataset."""

    kinds: list[DriftKind] = field(default_factory=list)  # empty: identical
    differences: list[str] = field(default_factory=list)
    changed_classes: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    state_compared: bool = False

    @property
    def status(self) -> DriftKind:
        """The primary kind: no log, else turn count > question > initial state, else identical."""
        if DriftKind.NO_LOG in self.kinds:
            return DriftKind.NO_LOG
        for kind in DRIFT_ORDER:
            if kind in self.kinds:
                return kind
        return DriftKind.IDENTICAL

    @property
    def drifted(self) -> bool:
        return any(k in self.kinds for k in DRIFT_ORDER)

    @property
    def verifiable(self) -> bool:
        return DriftKind.NO_LOG not in self.kinds

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "kinds": [k.value for k in self.kinds],
            "differences": self.differences,
            "changed_classes": sorted(self.changed_classes),
            "notes": self.notes,
            "initial_state_compared": self.state_compared,
        }


def no_log(reason: str) -> DatasetDrift:
    return DatasetDrift([DriftKind.NO_LOG], notes=[reason])


def _messages(query: list[dict], keep_system: bool) -> list[tuple[Any, Any]]:
    return [
        (m.get("role"), m.get("content"))
        for m in query
        if keep_system or m.get("role") != "system"
    ]


def _holdout(turn: int, query: list[dict], conv: bfcl.Conversation, drift: DatasetDrift) -> None:
    users = [m for m in query if m.get("role") != "system"]
    content = users[0].get("content") if len(users) == 1 else None
    if users and users[0].get("role") == "user" and isinstance(content, str) and \
            content.endswith(HOLDOUT_SENTENCE):
        shown = content[: -len(HOLDOUT_SENTENCE)].rstrip("\n")
        if shown:
            try:
                docs = ast.literal_eval(shown)
                names = sorted(d.get("name") for d in docs if isinstance(d, dict))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                names = None
            expected = sorted(conv.missed_function.get(str(turn), []))
            if names is not None and names != expected:
                drift.notes.append(f"turn {turn}: the held-out prompt listed {names}, "
                                   f"the dataset holds out {expected}")
        return
    _mark(drift, DriftKind.QUESTION)
    drift.differences.append(f"turn {turn} (held out): {excerpt(content, HOLDOUT_SENTENCE)}")


def _mark(drift: DatasetDrift, kind: DriftKind) -> None:
    if kind not in drift.kinds:
        drift.kinds.append(kind)


def _message_excerpt(got: list[tuple], want: list[tuple]) -> str:
    """The first differing message content as 'logged -> pinned', else the message lists."""
    if len(got) == len(want):
        for (r1, c1), (r2, c2) in zip(got, want, strict=True):
            if r1 == r2 and c1 != c2:
                return excerpt(c1, c2)
    return excerpt(got, want)


def _questions(conv: bfcl.Conversation, log: InferenceLog, drift: DatasetDrift) -> None:
    for t, turn in enumerate(log.turns[: len(conv.question)]):
        if turn.query is None:
            drift.notes.append(f"turn {t}: user messages not logged")
            continue
        pinned = conv.question[t]
        if not pinned and str(t) in conv.missed_function:
            _holdout(t, turn.query, conv, drift)
        else:
            keep_system = any(m.get("role") == "system" for m in pinned)
            got = _messages(turn.query, keep_system)
            want = [(m.get("role"), m.get("content")) for m in pinned]
            if got != want:
                _mark(drift, DriftKind.QUESTION)
                drift.differences.append(f"turn {t} user message: {_message_excerpt(got, want)}")


_SHARED = {"TravelAPI.credit_card_list": 0, "TravelAPI.booking_record": 1}


@cache
def _extension_keys() -> tuple[frozenset, frozenset]:
    cards = process.pristine_module_object("TravelAPI", "CREDIT_CARD_EXTENSION")
    bookings = process.pristine_module_object("TravelAPI", "BOOKING_RECORD_EXTENSION")
    return frozenset(cards), frozenset(bookings)


def _shared_travel_data(diffs: list[str], expected: Mapping, logged: Mapping,
                        drift: DatasetDrift) -> list[str]:
    """Long-context TravelAPI merges module-level cards and bookings that every conversation
    of a generating process shares (and may have changed): differences confined to those
    entries are noted, not counted as drift."""
    out = []
    for d in diffs:
        if d not in _SHARED:
            out.append(d)
            continue
        attr = d.split(".")[1]
        shared = _extension_keys()[_SHARED[d]]
        want = {k: v for k, v in expected["TravelAPI"].get(attr, {}).items() if k not in shared}
        got = logged["TravelAPI"].get(attr)
        got = {k: v for k, v in got.items() if k not in shared} if isinstance(got, dict) else got
        if same(want, got):
            drift.notes.append(f"initial {d}: only the long-context data shared between "
                               "conversations differs (carried at generation)")
        else:
            out.append(d)
    return out


def _content_keys(conv: bfcl.Conversation, classes: list[str]) -> dict[str, tuple]:
    """Keys that determine each class's freshly loaded state (long-context TravelAPI carries
    data between conversations, so it has none)."""
    return {
        c: (c, conv.long_context, json.dumps(conv.initial_config.get(c, {})))
        for c in classes
        if not (c == "TravelAPI" and conv.long_context)
    }


def dataset_drift(
    conv: bfcl.Conversation,
    log: InferenceLog | None,
    initial_state: Mapping[str, Mapping[str, Any]] | None,
    *,
    inference_error: bool = False,
) -> DatasetDrift:
    """Compare a parsed log with the pinned conversation.

    ``initial_state`` is this engine's snapshot of the freshly loaded scenario (class -> plain
    attributes), e.g. ``ConversationTrace.model.initial_state``.
    """
    if log is None:
        return no_log("the entry has no inference_log")
    if not log.turns and log.initial_state is None:
        return no_log("the inference_log holds neither turns nor states")
    drift = DatasetDrift()
    n_log, n_data = len(log.turns), len(conv.question)
    truncated = n_log < n_data and (log.forced_quit or inference_error)
    if n_log != n_data and not truncated:
        drift.kinds.append(DriftKind.TURN_COUNT)
        drift.differences.append(f"the log has {n_log} turns, the pinned dataset {n_data}")
    _questions(conv, log, drift)
    classes = logged_classes(conv.involved_classes)
    if log.initial_state is None:
        if classes:  # bfcl logs no state list when every class is stateless
            drift.notes.append("initial state not logged")
    elif initial_state is not None:
        drift.state_compared = True
        diffs = state_differences(initial_state, log.initial_state, classes,
                                  _content_keys(conv, classes))
        if conv.long_context:
            diffs = _shared_travel_data(diffs, initial_state, log.initial_state, drift)
        if diffs:
            drift.kinds.append(DriftKind.INITIAL_STATE)
            drift.changed_classes = {d.split(".")[0].split(" ")[0] for d in diffs}
            for d in diffs[:8]:
                cls, _, attr = d.partition(".")
                if attr and cls in initial_state and cls in log.initial_state:
                    got = log.initial_state[cls].get(attr)
                    want = initial_state[cls].get(attr)
                    shown = excerpt(got, logged_form(want, got))
                    drift.differences.append(f"initial {d}: {shown}")
                else:
                    drift.differences.append(f"initial {d}")
    return drift

