"""The one check of an Anthropic Messages API answer, for generation (bfcl's Claude handler)
and annotation (the LLM annotator): its content blocks, its size and its token counts.

An answer is read as the SDK returns it (attributes) or as a plain dict (tests, raw JSON).
Every refusal is one short line saying what was wrong; text from the answer is shown escaped.
"""

from __future__ import annotations

import json
import re
from typing import Any

from careful_engine.core.decode import MAX_TOKEN_COUNT
from careful_engine.core.json_values import a_kind
from careful_engine.core.safe_text import clip, visible

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
              "cache_read_input_tokens")
_OPTIONAL_USAGE = USAGE_KEYS[2:]  # absent (None) when the answer used no prompt cache
# a tool name as the Messages API takes one (bfcl offers Claude its functions by such names)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_THINKING = ("thinking", "redacted_thinking")  # blocks that carry no answer: passed on as sent


def get(obj: Any, key: str) -> Any:
    """``obj[key]`` of a dict, else the attribute (None when absent)."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def is_token_count(value: Any) -> bool:
    """A token count as ``careful score`` reads one (:data:`~careful_engine.core.decode.
    MAX_TOKEN_COUNT` at most), so a usage is never logged and then refused."""
    return type(value) is int and 0 <= value <= MAX_TOKEN_COUNT


def block_problem(block: Any, tools: frozenset[str] | None = None) -> str | None:
    """Why one content block is not usable (None when it is): no type; a text block without
    text; a ``tool_use`` block whose ``id`` is not text, whose name is none of the ``tools``
    offered (when known; else not a tool name at all) or whose input is not an object; any
    other type but thinking."""
    kind = get(block, "type")
    if not isinstance(kind, str):
        return f"a content block is {a_kind(block)}, without a type"
    if kind == "text":
        text = get(block, "text")
        return None if isinstance(text, str) else f"a text block holds {a_kind(text)}, not text"
    if kind == "tool_use":
        name, call_id = get(block, "name"), get(block, "id")
        if not isinstance(call_id, str) or not call_id:
            return "a tool_use block whose id is not text"
        if not isinstance(name, str) or not (name in tools if tools is not None
                                             else _TOOL_NAME.fullmatch(name)):
            what = "not text" if not isinstance(name, str) else repr(clip(visible(name), 60))
            return f"a tool_use block naming no tool offered ({what})"
        data = get(block, "input")
        if not isinstance(data, dict):
            return f"a tool_use block's input is {a_kind(data)}, not an object"
        return None
    if kind in _THINKING:
        return None
    return f"a content block of type {clip(visible(repr(kind)), 60)}"


def _size(block: Any) -> int | None:
    """Characters of a block's text or tool input (a bound on its JSON length); None when
    the input is nested too deeply to measure."""
    value = get(block, "text") or get(block, "input") or ""
    if isinstance(value, str):
        return len(value)
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str))
    except (ValueError, RecursionError):
        return None


def message_problem(message: Any, max_chars: int,
                    tools: frozenset[str] | None = None) -> str | None:
    """Why an answer is not a usable message (None when it is): content that is not a list
    of usable blocks (:func:`block_problem`, ``tools`` the names offered), more than
    ``max_chars`` characters of text and tool input, a usage whose counts are not token
    counts (the cache counts may be absent), or whose input counts add up to more than a
    step may log."""
    content = get(message, "content")
    if not isinstance(content, list):
        return f"the answer is not a message ({a_kind(message)} without content)"
    size = 0
    for block in content:
        if why := block_problem(block, tools):
            return why
        part = _size(block)
        if part is None:
            return "a tool_use block's input is nested too deeply"
        size += part
        if size > max_chars:
            return f"the answer has more than {max_chars:,} characters"
    usage = get(message, "usage")
    for key in USAGE_KEYS:
        value = get(usage, key) if usage is not None else None
        if not ((value is None and key in _OPTIONAL_USAGE) or is_token_count(value)):
            return f"the answer's usage {key} is {str(value)[:40]!r}, not a token count"
    prompt = sum(get(usage, k) or 0 for k in ("input_tokens", "cache_read_input_tokens",
                                              "cache_creation_input_tokens"))
    if prompt > MAX_TOKEN_COUNT:  # the step's input count as logged (spend.Volume.prompt)
        return "the answer's usage adds up to more input tokens than a step may log"
    return None


def usage_of(message: Any) -> dict[str, int | None]:
    """The token usage of a message that passed :func:`message_problem`."""
    usage = get(message, "usage")
    return {k: get(usage, k) if usage is not None else None for k in USAGE_KEYS}
