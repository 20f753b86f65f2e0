"""The decodes kept per handler (careful_engine.core.decode._Memo) give exactly what the
handler gives each step alone, on every shared run, and never share what a step holds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from careful_engine.core import decode
from careful_engine.core.decode import decode_entry, decode_step
from careful_engine.core.runs import load_result_file
from careful_engine.core.trajectory import Outcome
from careful_engine.scoring.score import discover

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import shared_runs  # noqa: E402  (bench/shared_runs.py: the decoders the runs are read with)


def test_every_shared_run_decodes_as_step_by_step(shared_runs_dir: Path) -> None:
    decode.clear_caches()
    texts = repeated = 0
    for run in sorted(p for p in shared_runs_dir.iterdir() if p.is_dir()):
        by_model, _ = discover(run)
        for model, files in by_model.items():
            handler = shared_runs.handler(run, model)
            for rf in files:
                for entry in load_result_file(rf).entries.values():
                    got = decode_entry(entry, handler)
                    if got.turns is None:
                        continue
                    for turn, raw in zip(got.turns, entry["result"], strict=False):
                        if not isinstance(raw, list):
                            continue
                        for step, item in zip(turn, raw, strict=True):
                            alone = decode_step(handler, item, step.input_tokens,
                                                step.output_tokens)
                            assert step == alone, (rf.path, entry["id"], item)
                            if type(item) is str:
                                texts += 1
    held = sum(len(m.known) for m in decode._MEMOS.values())
    repeated = texts - held
    assert texts > 5_000 and repeated > 1_000, (texts, held)  # the memo was exercised


@pytest.fixture
def shared_runs_dir(shared_runs: Path) -> Path:
    return shared_runs


class _Counting:
    """A handler that decodes ``f(x)`` texts and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def decode_execute(self, item: str, has_tool_call_tag: bool = False) -> list:
        self.calls += 1
        if item == "deep":
            raise RecursionError("maximum recursion depth exceeded")
        if item == "[bad":  # opens like a call: a failure (prose would be no call)
            raise ValueError("not a call")
        if item == "objects":
            return [{"name": "f"}]
        return [item] if item else []


def _entry(*steps: str) -> dict:
    return {"id": "multi_turn_base_0", "result": [list(steps)]}


def test_repeated_text_is_decoded_once_and_each_step_owns_its_calls() -> None:
    decode.clear_caches()
    h = _Counting()
    first = decode_entry(_entry("f(x=1)", "f(x=1)", "", "[bad", "[bad"), h)
    assert h.calls == 3
    steps = first.turns[0]
    assert [s.outcome for s in steps] == [Outcome.CALLS, Outcome.CALLS, Outcome.NO_CALL,
                                          Outcome.DECODE_ERROR, Outcome.DECODE_ERROR]
    assert steps[4].error == "ValueError: not a call"
    steps[0].calls.append("g()")  # a step's calls are its own list
    assert steps[1].calls == ["f(x=1)"]
    again = decode_entry(_entry("f(x=1)"), h)
    assert h.calls == 3 and again.turns[0][0].calls == ["f(x=1)"]


def test_not_kept_exhausted_recursion_calls_not_text_and_beyond_the_bound(monkeypatch) -> None:
    decode.clear_caches()
    h = _Counting()
    decode_entry(_entry("deep", "deep", "objects", "objects"), h)
    assert h.calls == 4  # neither a RecursionError nor calls that are not text are kept
    monkeypatch.setattr(decode._Memo, "MAX_CHARS", 20)
    decode.clear_caches()
    h = _Counting()
    got = decode_entry(_entry("f(a=111111111111)", "f(b=222222222222)", "f(a=111111111111)"), h)
    assert h.calls == 3  # the second text filled the memo past its bound: it started again
    assert [s.calls for s in got.turns[0]] == [["f(a=111111111111)"], ["f(b=222222222222)"], ["f(a=111111111111)"]]
    assert decode._MEMOS[id(h)].chars <= 20
