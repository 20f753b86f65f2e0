"""bfcl's multi-turn verdict, reproduced rule by rule (bfcl_eval/eval_checker/multi_turn_eval).

The rules, in bfcl's order (``eval_runner._evaluate_single_multi_turn_entry`` then
``multi_turn_checker.multi_turn_checker``):

1. ``result`` not a list -> ``multi_turn:inference_error``.
2. number of turns differs from the reference -> ``multi_turn:force_terminated``.
3. per turn, after the model's steps and then the reference turn have executed:
   a. reference turn non-empty and no decoded model step -> ``multi_turn:empty_turn_model_response``;
   b. reference turn empty -> not checked (its model calls were executed all the same);
   c. public attributes (taken from the reference instance, no leading underscore) compared
      with ``!=`` -> ``multi_turn:instance_state_mismatch``;
   d. reference results of this turn an unordered sub-multiset of the model's results of all
      turns so far -> ``multi_turn:execution_response_mismatch``.
The first failing turn decides; bfcl executes nothing after it.

One outcome is the engine's own: ``careful:budget_exceeded``, for a conversation whose replay
was stopped by its budget before bfcl's verdict was reached (see careful_engine.core.budget).
"""

from __future__ import annotations

from typing import Any

from careful_engine.core.budget import BUDGET_EXCEEDED
from careful_engine.core.state import State, TooLarge, comparable, to_plain
from careful_engine.core.trajectory import Verdict

INFERENCE_ERROR = "multi_turn:inference_error"
FORCE_TERMINATED = "multi_turn:force_terminated"
EMPTY_TURN = "multi_turn:empty_turn_model_response"
STATE_MISMATCH = "multi_turn:instance_state_mismatch"
RESPONSE_MISMATCH = "multi_turn:execution_response_mismatch"
ERROR_TYPES = (INFERENCE_ERROR, FORCE_TERMINATED, EMPTY_TURN, STATE_MISMATCH, RESPONSE_MISMATCH)
DETAIL_LIMIT = 10_000  # containers of one differing attribute shown in a verdict's details
DETAIL_DEPTH = 200  # and levels of nesting


def budget_exceeded(reason: str, turn: int | None = None) -> Verdict:
    """The engine's outcome for a conversation stopped by its budget (not bfcl's verdict)."""
    return Verdict(False, BUDGET_EXCEEDED,
                   f"Replay stopped by the engine's budget before bfcl's verdict: {reason}",
                   turn, {"reason": reason})


def inference_error() -> Verdict:
    return Verdict(
        False,
        INFERENCE_ERROR,
        "Error during inference phase. Model did not output a list of model responses.",
    )


def force_terminated(model_turns: int, reference_turns: int) -> Verdict:
    return Verdict(
        False,
        FORCE_TERMINATED,
        "Model was force-terminated during inference phase. The length of the model result "
        f"turns ({model_turns}) does not match the length of the ground truth turns "
        f"({reference_turns}).",
    )


def empty_turn(turn: int) -> Verdict:
    return Verdict(False, EMPTY_TURN, f"Model response list is empty for turn {turn}", turn)


def compare_instances(model: Any, reference: Any) -> dict[str, dict]:
    """bfcl's ``_compare_instances``: differing public attributes of two instances."""
    differences = {}
    for attr in vars(reference):
        if attr.startswith("_"):
            continue
        m, r = getattr(model, attr), getattr(reference, attr)
        if m != r:
            differences[attr] = {"model": _shown(m), "ground_truth": _shown(r)}
    return differences


def _shown(value: Any) -> Any:
    """The plain form of an attribute for a verdict's details, or a note when too large."""
    try:
        plain = to_plain(value, limit=DETAIL_LIMIT)
    except TooLarge:
        return f"<{type(value).__name__} too large to show (more than {DETAIL_LIMIT:,} parts)>"
    if type(value).__name__ != "Directory":
        return plain  # only a file-system tree nests deeper than a call's literals can
    stack, deepest = [(plain, 1)], 0
    while stack:  # JSON writers recurse: keep what is shown shallow
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > DETAIL_DEPTH:
            return f"<{type(value).__name__} too deep to show (more than {DETAIL_DEPTH} levels)>"
        if type(v) is dict:
            stack.extend((x, d + 1) for x in v.values())
        elif type(v) in (list, tuple):
            stack.extend((x, d + 1) for x in v)
    return plain


def state_check(model: dict[str, Any], reference: dict[str, Any], turn: int,
                same: tuple[State, State, tuple[str, ...]] | None = None) -> Verdict | None:
    """bfcl's ``state_checker``: the first class (in involved order) whose state differs.

    ``same``: the two sides' current states and the classes whose captures may be stale
    (those reaching bfcl's process-global objects). A class whose captures are equal marshal
    bytes holding no NaN has equal public attributes, so bfcl's ``!=`` finds nothing there
    (bfcl's simulators hold only built-in values: equal marshal bytes mean equal values of
    equal types; a NaN, unequal to itself, and bytes-like values are the exceptions, and
    bfcl's simulators never hold a bytes-like value: tests/test_scoring_fast.py checks).
    """
    for class_name, ref_instance in reference.items():
        if same is not None and class_name not in same[2]:
            a = same[0]._blobs.get(class_name)
            if a == same[1]._blobs.get(class_name) and comparable(a):
                continue
        differences = compare_instances(model[class_name], ref_instance)
        if differences:
            return Verdict(
                False,
                STATE_MISMATCH,
                f"Model instance for {class_name} does not match the state with ground truth "
                "instance.",
                turn,
                {"class": class_name, "differences": differences},
            )
    return None


def missing_unordered(expected: list[str], actual: list[str]) -> list[str]:
    """bfcl's ``_is_subsequence_unordered``: items of ``expected`` not matched in ``actual``."""
    pool = list(actual)
    missing = []
    for item in expected:
        try:
            pool.remove(item)
        except ValueError:
            missing.append(item)
    return missing


def response_check(all_model_results: list[str], reference_results: list[str],
                   turn: int) -> Verdict | None:
    """bfcl's ``response_checker`` on the cumulative model results."""
    missing = missing_unordered(reference_results, all_model_results)
    if missing:
        return Verdict(
            False,
            RESPONSE_MISMATCH,
            "Model response execution results so far does not contain all the ground truth "
            f"response execution results for turn {turn}.",
            turn,
            {"missing_items": missing},
        )
    return None
