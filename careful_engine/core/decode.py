"""Result entries to trajectories, decoded step by step with the model's own bfcl handler.

bfcl's evaluator (``eval_runner._evaluate_single_multi_turn_entry``) calls
``handler.decode_execute(step, has_tool_call_tag=False)`` on every step, keeps non-empty
decodes and silently drops both empty decodes and exceptions. Here every step keeps its
outcome: calls, no call, or a decode failure with its message.

bfcl quirk kept by construction: decoding *is* bfcl's handler, so its behaviour carries over,
verdicts included. The prompting decoders (``default_decode_execute_prompting`` ->
``resolve_ast_call``) read only keyword arguments, so ``[cd('docs')]`` decodes to ``cd()``:
reference calls with positional arguments, written verbatim by a prompting model, fail
exactly the conversations that contain them (tests/test_verdict_exact.py counts them from
bfcl's data at test time).
"""

from __future__ import annotations

import re
from typing import Any

from careful_engine.core.json_values import a_kind
from careful_engine.core.literal_expr import Refused
from careful_engine.core.trajectory import Outcome, Step, Trajectory


def is_empty_execute_response(decoded: Any) -> bool:
    """bfcl's ``is_empty_execute_response`` (multi_turn_utils.py:103-108)."""
    if len(decoded) == 0:
        return True
    return len(decoded) == 1 and len(decoded[0]) == 0


# how a step meant as a call opens: a JSON or Python list or object, a tag (<tool_call>),
# ``name(`` with no space before the parenthesis (a code fence before any of them)
_CALL_LIKE = re.compile(r"\s*(?:`{3}\w*\s*)?(?:[\[{<]|[A-Za-z_][\w.]*\()")


def text_answer(item: Any) -> bool:
    """Whether a step its handler fails to decode is a text answer rather than a call that
    could not be decoded: the texts of an FC handler's text reply (Claude's ``list[str]``:
    an FC decoder reads call objects only), or a text that does not open like a call (an
    OpenAI FC ``str``, an xLAM or prompting model's prose). bfcl's loop ends the turn on
    either (its ``except`` after ``decode_execute``), as on an empty decode, and its
    evaluator drops both: a text answer is "no call", whichever way the handler says so."""
    if isinstance(item, list):
        return bool(item) and all(isinstance(x, str) for x in item)
    return isinstance(item, str) and not _CALL_LIKE.match(item)


def decode_step(handler: Any, item: Any, input_tokens: int | None = None,
                output_tokens: int | None = None) -> Step:
    """Decode one logged step (with its token counts, if known)."""
    outcome, calls, error = _decode(handler, item)
    return _step(item, outcome, calls, error, input_tokens, output_tokens)


def _decode(handler: Any, item: Any) -> tuple[Outcome, list, str | None]:
    """What ``handler`` decodes ``item`` to: (outcome, calls, error message)."""
    try:
        decoded = handler.decode_execute(item, has_tool_call_tag=False)
    except Refused as e:  # model text the safe evaluator would not compute: named as such
        return _ERROR, [], str(e)
    except Exception as e:  # bfcl drops these steps; the message is kept here
        if text_answer(item) and not isinstance(e, (RecursionError, MemoryError)):
            # the turn's closing text, not a call that went wrong (an exhausted decoder is
            # no verdict on the text: kept as a failure, and not memoised)
            return Outcome.NO_CALL, [], None
        return _ERROR, [], f"{type(e).__name__}: {e}"
    try:
        empty = is_empty_execute_response(decoded)
    except TypeError as e:
        return _ERROR, [], f"TypeError: {e}"
    if empty:
        return Outcome.NO_CALL, [], None
    return Outcome.CALLS, list(decoded), None


class _Memo:
    """One handler's decodes of the step texts met so far (a run repeats many of its steps
    word for word: a third of xlam-2-8b-fc-r's base steps, more for other models).

    bfcl's decoders are functions of the step text alone (none of the 34 ``decode_execute``
    of bfcl-eval 2026.3.23 changes its handler), so an identical text decodes identically.
    Kept only for text steps whose calls are text (what the replay parses); errors from
    exhausted recursion or memory are not kept. Bounded by the step text it holds (the calls
    are made of that text)."""

    MAX_CHARS = 8_000_000

    def __init__(self, handler: Any) -> None:
        self.handler = handler  # (kept alive: the memo is found by the handler's id)
        self.known: dict[str, tuple[Outcome, Any, str | None]] = {}
        self.chars = 0

    def miss(self, item: str) -> tuple[Outcome, Any, str | None]:
        """Decode a text not held yet, and keep it where it may be; the calls of what is
        returned are copied by the caller (a step owns its list)."""
        got = _decode(self.handler, item)
        for c in got[1]:
            if type(c) is not str:
                return got
        error = got[2]
        if error is not None and error.startswith(("RecursionError", "MemoryError")):
            return got
        self.chars += len(item)
        if self.chars > self.MAX_CHARS:
            self.known.clear()
            self.chars = len(item)
        got = self.known[item] = (got[0], tuple(got[1]), error)
        return got


_MEMOS: dict[int, _Memo] = {}


def _memo(handler: Any) -> _Memo:
    got = _MEMOS.get(id(handler))
    if got is None or got.handler is not handler:
        if len(_MEMOS) >= 64:
            _MEMOS.clear()
        got = _MEMOS[id(handler)] = _Memo(handler)
    return got


def clear_caches() -> None:
    """Forget the decodes kept for this process (a benchmark's cold start)."""
    _MEMOS.clear()


_ERROR = Outcome.DECODE_ERROR
_new_object = object.__new__


def _step(raw: Any, outcome: Outcome, calls: list, error: str | None, input_tokens: Any,
          output_tokens: Any) -> Step:
    """``Step(raw, outcome, calls, error, input_tokens, output_tokens)`` without the
    dataclass's keyword handling (the same instance dict, in field order)."""
    step = _new_object(Step)
    step.__dict__ = {"raw": raw, "outcome": outcome, "calls": calls, "error": error,
                     "input_tokens": input_tokens, "output_tokens": output_tokens}
    return step


ITERATED = (list, str, dict, tuple)  # what bfcl's evaluator iterates as a turn's steps
# Decoding is bounded like a replay (careful_engine.core.budget): bfcl's decoders take time and
# memory in proportion to a step's text (a prompting decode of a 1,000,000-character step
# takes about 1.7 s and 260 MB here; logged steps of real runs stay under 3,000). A longer
# step, or text beyond MAX_DECODED_CHARS in one conversation, is not decoded: the conversation
# stops there with the verdict careful:budget_exceeded. Steps that are not text (FC runs log
# lists of call objects, which bfcl's decoders read at C speed) are bounded by the length of
# an entry's line (careful_engine.core.runs.MAX_ENTRY_CHARS). So does a conversation whose
# steps decode to more than MAX_DECODED_CALLS calls (real runs: at most 37), where the replay,
# the rules and the blame would take time and memory in proportion to them (about 70 µs and
# 1 KB a call): an FC step of more call objects is not even handed to the decoder.
MAX_STEP_CHARS = 1_000_000
MAX_DECODED_CHARS = 4_000_000
MAX_DECODED_CALLS = 50_000


def has_steps(turn: Any) -> bool:
    """Whether bfcl would hand anything of this turn to the decoder."""
    return isinstance(turn, ITERATED) and len(turn) > 0


def odd_shape(turn: Any, steps: list[Step] | None = None) -> str | None:
    """A plain description of a turn that is not a list of steps (None for a list)."""
    if isinstance(turn, (list, tuple)):
        return None
    if isinstance(turn, (str, dict)):
        decoded = steps is not None and any(s.outcome is Outcome.CALLS for s in steps)
        what = "and some decode to calls" if decoded else "and decodes nothing"
        if isinstance(turn, str):
            return f"turns are strings: bfcl iterates their characters {what}"
        return f"turns are objects: bfcl iterates their keys {what}"
    return (f"a turn is {a_kind(turn)}, not a list of steps: bfcl's evaluator stops with an "
            "error on it; here it has no steps")


_NO_ROW = object()


def _row(counts: Any, turn: int) -> Any:
    """``counts[turn]``, or a marker where it cannot be read."""
    try:
        return counts[turn]
    except (TypeError, IndexError, KeyError):
        return _NO_ROW


MAX_TOKEN_COUNT = 10**9  # no model step reads or writes a billion tokens


def token_count(value: Any) -> int | None:
    """``value`` as a token count: a whole number from 0 to :data:`MAX_TOKEN_COUNT` (an int,
    or a float with no fraction), else None (NaN, infinities, negatives, bools, text)."""
    if type(value) is int:
        return value if 0 <= value <= MAX_TOKEN_COUNT else None
    if type(value) is float and 0 <= value <= MAX_TOKEN_COUNT and value.is_integer():
        return int(value)  # (NaN fails every comparison)
    return None


def bad_token_count(values: Any, depth: int = 0) -> Any:
    """The first number in ``values`` (a logged token-count field, nested lists) that cannot
    be a token count, or None. Text and other shapes are not numbers: they are left alone."""
    if type(values) is list and depth < 8:
        for v in values:
            got = bad_token_count(v, depth + 1)
            if got is not None:
                return got
        return None
    if type(values) in (int, float) and token_count(values) is None:
        return values
    return None


def _cell(row: Any, step: int) -> int | None:
    """``row[step]`` where it is a token count (:func:`token_count`), else None."""
    if row is _NO_ROW:
        return None
    try:
        value = row[step]
    except (TypeError, IndexError, KeyError):
        return None
    return token_count(value)


def _cells(row: Any, n: int) -> list:
    """``[_cell(row, s) for s in range(n)]``, at once where the row is a list of counts that
    are ints (as bfcl writes them)."""
    if type(row) is list and len(row) >= n:
        cells = row[:n]
        for value in cells:
            if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
                break
        else:
            return cells
    return [_cell(row, s) for s in range(n)]


def decode_entry(entry: dict, handler: Any | None) -> Trajectory:
    """Decode a result entry. ``handler`` may be None only if nothing needs decoding."""
    result = entry.get("result")
    entry_id = entry.get("id", "?")
    if type(result) is not list:  # bfcl: multi_turn:inference_error
        return Trajectory(id=entry_id, turns=None, raw_result=result,
                          inference_error=str(result)[:500],
                          confirm=isinstance(entry.get(ANSWERS), dict))
    turns: list[list[Step]] = []
    problems: list[str] = []
    in_counts = entry.get("input_token_count")
    out_counts = entry.get("output_token_count")
    decoded = 0  # characters of step text decoded so far
    n_calls = 0  # and the calls they decoded to
    memo = _memo(handler) if handler is not None else None
    known = memo.known if memo is not None else {}
    over: tuple[int, int, str] | None = None
    for t, turn in enumerate(result):
        steps: list[Step] = []
        if not isinstance(turn, ITERATED):
            # bfcl's evaluator would crash iterating it; here the turn has no steps
            problems.append(f"turn {t}: {odd_shape(turn)}")
            turns.append(steps)
            continue
        if turn and handler is None:
            raise RuntimeError("a decoder is needed for this run: name one with --decoder")
        n = len(turn)
        ins, outs = _cells(_row(in_counts, t), n), _cells(_row(out_counts, t), n)
        if over is None:
            size = _text_size(turn)
            if size > MAX_STEP_CHARS or decoded + size > MAX_DECODED_CHARS:
                over = _over(turn, t, decoded)  # (found step by step; None: within after all)
            decoded += size
        for s, item in enumerate(turn):
            if over is None and type(item) is not str and isinstance(item, (list, tuple)) \
                    and n_calls + len(item) > MAX_DECODED_CALLS:
                over = _too_many(t, s)  # (an item per call: not handed to the decoder)
            if over is not None and (t, s) >= over[:2]:
                steps.append(_step(item, _ERROR, [], f"not decoded: {over[2]}", ins[s],
                                   outs[s]))
                continue
            if type(item) is str:  # (a handler is at hand: see above)
                got = known.get(item) or memo.miss(item)  # type: ignore[union-attr]
                step = _step(item, got[0], list(got[1]), got[2], ins[s], outs[s])
            else:
                step = decode_step(handler, item, ins[s], outs[s])
            n_calls += len(step.calls)
            if n_calls > MAX_DECODED_CALLS:
                over = _too_many(t, s)
                step = _step(item, _ERROR, [], f"not decoded: {over[2]}", ins[s], outs[s])
            steps.append(step)
        shape = odd_shape(turn, steps)
        if shape:
            problems.append(f"turn {t}: {shape}")
        turns.append(steps)
    return Trajectory(id=entry_id, turns=turns, raw_result=result,
                      user_answers=_user_answers(entry), problems=problems,
                      confirm=isinstance(entry.get(ANSWERS), dict), over_budget=over)


def _text_size(turn: Any) -> int:
    """The characters of a turn's step texts (a dict turn's steps are its keys; steps that
    are not text count as none: their size was bounded when the line was read)."""
    if type(turn) is str:
        return len(turn)
    return sum([len(s) for s in turn if type(s) is str])


def _over(turn: Any, t: int, decoded: int) -> tuple[int, int, str] | None:
    """The first step of ``turn`` that is not decoded within the limits, and why."""
    for s, item in enumerate(turn):
        size = len(item) if type(item) is str else 0
        if size > MAX_STEP_CHARS:
            return (t, s, f"turn {t} step {s} is {size:,} characters long, more than the "
                          f"{MAX_STEP_CHARS:,} decoded in one step (decoding budget)")
        decoded += size
        if decoded > MAX_DECODED_CHARS:
            return (t, s, f"the conversation's steps up to turn {t} step {s} hold more than "
                          f"{MAX_DECODED_CHARS:,} characters to decode (decoding budget)")
    return None


def _too_many(t: int, s: int) -> tuple[int, int, str]:
    return (t, s, f"the conversation's steps up to turn {t} step {s} decode to more than "
                  f"{MAX_DECODED_CALLS:,} calls (decoding budget)")


ANSWERS = "careful_user_answers"  # {"<turn>": [{"step": s, "answer": "yes", ...}, ...]}


def _answer_ok(a: Any) -> bool:
    return (isinstance(a, dict) and type(a.get("step")) is int
            and isinstance(a.get("answer"), str))


def _turn_number(key: Any) -> int | None:
    """A key of the recorded answers as a turn number: ASCII digits, at most six of them
    (``"²"`` is a digit to ``str.isdigit`` that ``int`` refuses); else None."""
    if type(key) is str and 0 < len(key) <= 6 and key.isascii() and key.isdigit():
        return int(key)
    return None


def _user_answers(entry: dict) -> dict[int, list[dict]]:
    """Scripted-user answers recorded by the confirmation-aware protocol, if any: per turn,
    the answers that are well formed (:func:`answers_problem` names the others)."""
    answers = entry.get(ANSWERS) or {}
    out: dict[int, list[dict]] = {}
    if isinstance(answers, dict):
        for k, v in answers.items():
            turn = _turn_number(k)
            if turn is not None and isinstance(v, list):
                out[turn] = [a for a in v if _answer_ok(a)]
    return out


def answers_problem(entry: dict) -> str | None:
    """What is wrong with an entry's recorded answers (left out of the scoring), or None."""
    if ANSWERS not in entry:
        return None
    answers = entry[ANSWERS]
    if not isinstance(answers, dict):
        return (f"{ANSWERS} is {a_kind(answers)}, not an object of turns; the entry "
                "is scored without answers, as a standard run")
    for k, v in answers.items():
        if _turn_number(k) is None:
            return f"{ANSWERS} has a key {k!r:.40} that is not a turn number; it is left out"
        if not isinstance(v, list):
            return f"{ANSWERS}[{k!r:.20}] is {a_kind(v)}, not a list; it is left out"
        bad = next((a for a in v if not _answer_ok(a)), None)
        if bad is not None:
            return (f"{ANSWERS}[{k!r:.20}] holds {bad!r:.60}, not an answer with a whole-number "
                    "step and a text answer; it is left out")
    return None


def reference_trajectory(entry_id: str, ground_truth: list[list[str]]) -> Trajectory:
    """The reference as a trajectory: one step per reference turn, as bfcl's checker runs it."""
    turns = [
        [Step(raw=list(calls), outcome=Outcome.CALLS, calls=list(calls))] if calls else []
        for calls in ground_truth
    ]
    return Trajectory(id=entry_id, turns=turns, raw_result=ground_truth)
