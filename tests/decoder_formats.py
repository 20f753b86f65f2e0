"""Reference steps rendered in the output formats of bfcl's decoders, and which format each
registered handler reads (found by trying every renderer on probe steps through bfcl's own
``decode_execute``; nothing here copies bfcl's parsers).

A renderer takes a step's calls as ``(name, kwargs)`` pairs and returns the step as it would
appear in a result file for that format. :func:`arithmetic` rewrites argument values as
arithmetic over literals with the same values (``'doc' + 'uments'``, ``(4 - 1) + 1``), which
only an ``eval``-style decoder (bfcl's ``resolve_ast_by_type`` or a local FC handler's
``eval(text)``) reads, so those steps exercise the evaluator itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any

from careful_engine.core import bfcl
from careful_engine.demo.reference import fc_step

Calls = list[tuple[str, dict]]


def _py_call(name: str, kwargs: dict, value: Callable[[Any], str] = repr) -> str:
    return f"{name}({', '.join(f'{k}={value(v)}' for k, v in kwargs.items())})"


def _named(calls: Calls, key: str = "arguments") -> list[dict]:
    return [{"name": n, key: k} for n, k in calls]


RENDERERS: dict[str, Callable[[Calls, Callable[[Any], str]], Any]] = {
    # FC objects as API handlers log them, arguments as a JSON string
    "fc_json": lambda c, v: [{n: json.dumps(k)} for n, k in c],
    # FC objects with argument objects (local FC handlers that parse while generating)
    "fc_object": lambda c, v: [{n: k} for n, k in c],
    "fc_named_object": lambda c, v: _named(c),
    "fc_cohere": lambda c, v: [{"tool_name": n, "parameters": k} for n, k in c],
    # bfcl's prompting format: a Python list of calls
    "python_list": lambda c, v: "[" + ", ".join(_py_call(n, k, v) for n, k in c) + "]",
    "gorilla": lambda c, v: ", ".join(_py_call(n, k, v) for n, k in c),
    "nemotron": lambda c, v: "<TOOLCALL>[" + ", ".join(_py_call(n, k, v) for n, k in c)
                             + "]</TOOLCALL>",
    "minicpm": lambda c, v: "<|tool_call_start|>\n```python\n"
                            + "\n".join(_py_call(n, k, v) for n, k in c)
                            + "\n```\n<|tool_call_end|>",
    # Hermes/Qwen tool-call blocks
    "tool_call_json": lambda c, v: "\n".join(
        "<tool_call>\n" + json.dumps(d) + "\n</tool_call>" for d in _named(c)),
    # JSON lists of {"name", "arguments"} / {"name", "parameters"}
    "json_arguments": lambda c, v: json.dumps(_named(c)),
    "falcon": lambda c, v: "<tool_call>" + json.dumps(_named(c)) + "</tool_call>",
    "granite": lambda c, v: "".join("<function_call> " + json.dumps(d) for d in _named(c)),
    # Llama 3.1: a Python literal list of {"name", "parameters"} (bfcl evals it)
    "llama_python": lambda c, v: "[" + ", ".join(
        "{'name': " + repr(n) + ", 'parameters': {"
        + ", ".join(f"{k!r}: {v(x)}" for k, x in kw.items()) + "}}" for n, kw in c) + "]",
    "glm": lambda c, v: f"{c[0][0]}\n{json.dumps(c[0][1])}" if len(c) == 1 else None,
    "functiongemma": lambda c, v: "".join(
        f"<start_function_call>call:{n}{_gemma(k)}<end_function_call>" for n, k in c),
}


def _gemma(v: Any) -> str:
    if isinstance(v, str):
        return f"<escape>{v}<escape>"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ",".join(_gemma(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_gemma(x)}" for k, x in v.items()) + "}"
    return repr(v)
# renderers that write argument values as Python expressions (arithmetic applies)
EXPRESSION_RENDERERS = ("python_list", "gorilla", "nemotron", "minicpm", "llama_python")


def named_calls(calls: list[str]) -> Calls:
    """Reference call strings as (name, kwargs), positional arguments bound to their names."""
    return [(n, json.loads(a)) for d in fc_step(calls) for n, a in d.items()]


def render(fmt: str, calls: Calls, value: Callable[[Any], str] = repr) -> Any:
    return RENDERERS[fmt](calls, value)


def arithmetic(v: Any) -> str:
    """A value written as arithmetic over literals that evaluates to the same value."""
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, int):
        return f"({v - 3} + 3)" if v % 2 else f"(2 ** 1 * {v // 2})" if v else "(1 - 1)"
    if isinstance(v, float):
        return f"({v!r} + 0.0)"
    if isinstance(v, str):
        k = len(v) // 2
        return f"({v[:k]!r} + {v[k:]!r})"
    if isinstance(v, list):
        return "([] + [" + ", ".join(arithmetic(x) for x in v) + "])"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {arithmetic(x)}" for k, x in v.items()) + "}"
    return repr(v)


EXTRA_ARITHMETIC = [  # (text of an argument value, its value)
    ("1+2", 3), ("-3", -3), ("2**10", 1024), ("'a'+'b'", "ab"), ("1e3", 1000.0),
    ("[1, [2, 3], {'k': [4]}]", [1, [2, 3], {"k": [4]}]), ("'ab' * 3", "ababab"),
    ("7 // 2 + 7 % 2", 4), ("1.5 * 4", 6.0), ("(1, 2) + (3,)", (1, 2, 3)),
    ("[1] * 3 + [2]", [1, 1, 1, 2]), ("2 ** -1", 0.5), ("10 - 2 * 3", 4),
]


def normalised(decoded: Any) -> list[tuple[str, str]] | None:
    """Decoded call strings as (name, canonical JSON arguments); None if they do not parse."""
    if not isinstance(decoded, list) or not all(isinstance(x, str) for x in decoded):
        return None
    try:
        return [(n, json.dumps(json.loads(a), sort_keys=True))
                for d in fc_step(decoded) for n, a in d.items()]
    except (ValueError, TypeError):
        return None


def _probe_steps() -> list[Calls]:
    steps = []
    for conv in bfcl.conversations("multi_turn_base")[:6]:
        steps += [named_calls(t) for t in conv.ground_truth if t]
    return steps


@cache
def handler_format(key: str) -> str | None:
    """The first renderer whose steps the key's handler decodes to the same calls, on every
    probe step (None when none fits)."""
    h = bfcl.handler(key)
    probes = _probe_steps()
    for fmt in RENDERERS:
        ok = True
        for calls in probes:
            step = render(fmt, calls)
            if step is None:
                continue
            try:
                got = normalised(h.decode_execute(step, has_tool_call_tag=False))
            except Exception:  # noqa: BLE001 (a decoder that does not read this format)
                ok = False
                break
            if got != normalised([_py_call(n, k) for n, k in calls]):
                ok = False
                break
        if ok:
            return fmt
    return None
