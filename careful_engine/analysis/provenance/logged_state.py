"""Comparing a state snapshot of this engine with a ``state_info`` snapshot of bfcl's log.

The log holds each stateful class's public attributes after bfcl's ``make_json_serializable``
and ``json.dumps`` (``utils.py:493-506``, ``base_handler.py:147-166``): dict keys became
strings, tuples lists, and values JSON cannot write became their ``str()``. Two such values
occur in the eight simulators: GorillaFileSystem's ``root`` (a ``Directory``, logged as its
repr, rebuilt here from the snapshot's tree) and MessageAPI's ``generated_ids`` (a set, logged
as its repr, read back with ``ast.literal_eval`` and compared as a set). Other objects would be
logged as reprs this module cannot rebuild; they are not compared.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from careful_engine.core import bfcl

_ROOT_NAME = re.compile(r"^<Directory: (.*?), Parent: None, Contents: ")


def directory_repr(name: str, parent: str | None, tree: Mapping[str, Any]) -> str:
    """``repr(Directory)`` (gorilla_file_system.py:130-131) rebuilt from a snapshot's tree."""
    items = []
    for key, node in tree.items():
        if isinstance(node, dict) and "__file__" in node:
            inner = f"<<File: {key}, Content: {node['__file__']}>>"
        elif isinstance(node, dict) and "__dir__" in node:
            inner = directory_repr(key, name, node["__dir__"])
        else:
            inner = repr(node)
        items.append(f"{key!r}: {inner}")
    return f"<Directory: {name}, Parent: {parent}, Contents: {{{', '.join(items)}}}>"


def _json_key(key: Any) -> str:
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    return key if isinstance(key, str) else repr(key) if isinstance(key, float) else str(key)


def _as_set(value: Any) -> list | None:
    if isinstance(value, list):
        return sorted(value, key=repr)
    if value == "set()":
        return []
    if isinstance(value, str) and value.startswith("{"):
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        if isinstance(parsed, (set, frozenset)):
            return sorted(parsed, key=repr)
    return None


def same(expected: Any, logged: Any) -> bool:
    """Whether a snapshot value (this engine's plain form) equals its logged form."""
    if isinstance(expected, dict):
        if "__dir__" in expected and len(expected) == 1:
            if not isinstance(logged, str):
                return False
            m = _ROOT_NAME.match(logged)
            return m is not None and directory_repr(m.group(1), None,
                                                    expected["__dir__"]) == logged
        if "__set__" in expected and len(expected) == 1:
            got = _as_set(logged)
            return got is not None and sorted(expected["__set__"], key=repr) == got
        if "__object__" in expected:
            return True  # logged as an unrebuildable repr: not compared
        if not isinstance(logged, dict) or len(logged) != len(expected):
            return False
        for key, value in expected.items():
            k = _json_key(key)
            if k not in logged or not same(value, logged[k]):
                return False
        return True
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(logged, list)
            and len(logged) == len(expected)
            and all(same(a, b) for a, b in zip(expected, logged, strict=True))
        )
    if type(expected) is bool or type(logged) is bool:
        return type(expected) is type(logged) and expected == logged
    return expected == logged


def logged_classes(involved: tuple[str, ...] | list[str]) -> list[str]:
    """The classes bfcl logs a state for (stateless classes are skipped)."""
    return [c for c in involved if not bfcl.is_stateless(c)]


_EXPECTED: dict[tuple, str] = {}  # content key -> JSON of the expected logged form


def state_differences(
    expected: Mapping[str, Mapping[str, Any]],
    logged: Mapping[str, Any],
    classes: list[str],
    cache_keys: Mapping[str, tuple] | None = None,
) -> list[str]:
    """``Class.attribute`` names whose logged public value differs from the snapshot's.

    ``cache_keys`` (class -> a key that determines the class's snapshot) enables a fast path:
    the JSON of the logged form equal to the cached JSON of the expected one means equal
    (anything else is decided value by value).
    """
    out: list[str] = []
    present = set(expected)  # iterating a State is cheap; membership would materialise
    for cls in classes:
        if cls not in logged:
            out.append(f"{cls} (not in the log)")
            continue
        if cls not in present:
            continue
        got = logged[cls]
        if not isinstance(got, dict):
            out.append(f"{cls} (logged content is not an object)")
            continue
        key = cache_keys.get(cls) if cache_keys else None
        if key is not None:
            want = _EXPECTED.get(key)
            if want is None:
                public = {k: v for k, v in expected[cls].items() if not k.startswith("_")}
                want = _EXPECTED[key] = json.dumps(logged_form(public, got))
            if json.dumps(got) == want:
                continue
        snap = {k: v for k, v in expected[cls].items() if not k.startswith("_")}
        for key in sorted(set(snap) | set(got)):
            if key not in snap or key not in got or not same(snap[key], got[key]):
                out.append(f"{cls}.{key}")
    out.extend(f"{c} (logged, not involved now)" for c in logged if c not in present)
    return out


def excerpt(logged: Any, expected: Any, width: int = 40) -> str:
    """A short 'logged -> pinned' excerpt around the first difference of two renderings."""
    a, b = _text(logged), _text(expected)
    i = _common(a, b)
    j = _common(a[i:][::-1], b[i:][::-1])
    while i > 0 and _word(a[i - 1]):  # widen to whole words and numbers
        i -= 1
    while j > 0 and _word(a[len(a) - j]):
        j -= 1
    start = max(0, i - width)
    pre = ("…" if start else "") + a[start:i]
    da, db = a[i:len(a) - j], b[i:len(b) - j]
    post = a[len(a) - j:][:width] + ("…" if j > width else "")
    return f"{pre}[{_short(da)} -> {_short(db)}]{post}"


def _word(c: str) -> bool:
    return c.isalnum() or c in "._-"


def _common(a: str, b: str) -> int:
    """Length of the common prefix (binary search on slices, C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _short(s: str, n: int = 120) -> str:
    return s if len(s) <= n else s[:n] + "…"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def logged_form(expected: Any, logged: Any = None) -> Any:
    """A snapshot value rendered as bfcl would have logged it (for reports and excerpts)."""
    if isinstance(expected, dict):
        if "__dir__" in expected and len(expected) == 1:
            m = _ROOT_NAME.match(logged) if isinstance(logged, str) else None
            return directory_repr(m.group(1) if m else "?", None, expected["__dir__"])
        if "__set__" in expected and len(expected) == 1:
            return str(set(expected["__set__"])) if expected["__set__"] else "set()"
        sub = logged if isinstance(logged, dict) else {}
        return {_json_key(k): logged_form(v, sub.get(_json_key(k))) for k, v in expected.items()}
    if isinstance(expected, (list, tuple)):
        sub = logged if isinstance(logged, list) else []
        return [logged_form(v, sub[i] if i < len(sub) else None) for i, v in enumerate(expected)]
    return expected
