"""One check of an Anthropic answer for generation and annotation (core.anthropic_answers):
the same answer gets the same verdict from both, each with its own size cap, under the
stricter of the two rules they had."""

from __future__ import annotations

import types

import pytest

from careful_engine.annotation import llm
from careful_engine.core import anthropic_answers
from careful_engine.core.decode import MAX_TOKEN_COUNT
from careful_engine.generation import retry

USAGE = {"input_tokens": 10, "output_tokens": 5}


def _msg(content, usage=None):
    return {"content": content, "usage": USAGE if usage is None else usage}


def _ns(value):
    """The answer as the SDK gives it: attributes, not keys."""
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_ns(v) for v in value]
    return value


TEXT = {"type": "text", "text": "ok"}
CASES = [
    (_msg([TEXT]), None),
    (_msg([{"type": "thinking", "thinking": "hm"}, TEXT]), None),
    (_msg([TEXT], {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": None}),
     None),
    # generation refused these, annotation let them through (the stricter rule stays)
    (_msg([{"type": "image"}]), "a content block of type 'image'"),
    (_msg([{"type": "tool_use", "id": 5, "name": "x", "input": {}}]),
     "a tool_use block whose id is not text"),
    (_msg([{"type": "tool_use", "id": "t", "name": "no such\x1b", "input": {}}]),
     "a tool_use block naming no tool offered ('no such\\\\x1b')"),
    (_msg([TEXT], {"input_tokens": MAX_TOKEN_COUNT, "output_tokens": 1,
                   "cache_read_input_tokens": 1}),
     "the answer's usage adds up to more input tokens than a step may log"),
    # the wording both now give
    (_msg([{"type": "text", "text": None}]), "a text block holds null, not text"),
    (_msg([5]), "a content block is an int, without a type"),
    (_msg([{"type": "tool_use", "id": "t", "name": "x", "input": [1]}]),
     "a tool_use block's input is a list, not an object"),
    (_msg([TEXT], {"input_tokens": "abc", "output_tokens": 5}),
     "the answer's usage input_tokens is 'abc', not a token count"),
    (_msg([TEXT], {"input_tokens": 1, "output_tokens": True}),
     "the answer's usage output_tokens is 'True', not a token count"),
    ({"content": [TEXT]}, "the answer's usage input_tokens is 'None', not a token count"),
    (5, "the answer is not a message (an int without content)"),
]


@pytest.mark.parametrize(("answer", "why"), CASES)
def test_generation_and_annotation_give_one_verdict(answer, why):
    assert retry.message_problem(answer) == why
    assert llm.message_problem(answer) == why
    assert llm.message_problem(_ns(answer)) == why


def test_each_keeps_its_own_size_cap():
    text = "x" * (llm.MAX_ANSWER_CHARS + 1)
    answer = _msg([{"type": "text", "text": text}])
    assert llm.message_problem(answer) == \
        f"the answer has more than {llm.MAX_ANSWER_CHARS:,} characters"
    assert retry.message_problem(answer) is None
    assert llm.MAX_ANSWER_CHARS < retry.MAX_ANSWER_CHARS


def test_offered_tools_are_checked_when_known():
    answer = _msg([{"type": "tool_use", "id": "t", "name": "rm", "input": {}}])
    assert retry.message_problem(answer) is None
    assert retry.message_problem(answer, frozenset({"cd"})) == \
        "a tool_use block naming no tool offered ('rm')"


def test_an_input_nested_too_deeply_is_one_line():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    answer = _msg([{"type": "tool_use", "id": "t", "name": "x", "input": {"a": deep}}])
    assert anthropic_answers.message_problem(answer, 10**9) == \
        "a tool_use block's input is nested too deeply"


def test_usage_of_reads_keys_and_attributes():
    usage = {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 2}
    expected = {"input_tokens": 3, "output_tokens": 4, "cache_creation_input_tokens": None,
                "cache_read_input_tokens": 2}
    assert anthropic_answers.usage_of(_msg([], usage)) == expected
    assert anthropic_answers.usage_of(_ns(_msg([], usage))) == expected
