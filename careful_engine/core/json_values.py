"""Parsed JSON from files others wrote: what Python's json reads but no file should hold.

``json`` reads ``NaN`` and ``Infinity`` (and ``1e999`` as infinity) and ``"\\ud800"`` as a
lone surrogate; written out again they give a file that is not JSON, or no file at all.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import math
import re
from array import array
from collections.abc import Callable
from typing import Any

from careful_engine.core.safe_text import visible


def refuse_constant(name: str) -> Any:
    """``parse_constant`` for ``json.loads``: NaN, Infinity and -Infinity are refused."""
    raise ValueError(f"{name} is not a JSON value")  # (json writes them; this project does not)


def finite_float(text: str) -> float:
    """``parse_float`` for ``json.loads``: a number too large for a float (``1e309``, read
    as infinity) is refused, as :func:`refuse_constant` refuses ``Infinity``."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:40]} is not a finite number")
    return number


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_problem(value: object, limit: int = 1_000_000) -> str | None:
    """What makes a parsed JSON value unfit to keep and write out again, or None: a lone
    surrogate in a string or a key (``"\\ud800"`` parses, but no UTF-8 file can hold it) or
    a number that is not finite (``NaN``, ``1e999``). At most ``limit`` items are looked at
    (iteratively: no recursion)."""
    work = [value]
    seen = 0
    while work and seen < limit:
        v = work.pop()
        seen += 1
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return f"a lone surrogate in {visible(v)[:60]!r}"
        elif isinstance(v, float):
            if not math.isfinite(v):
                return f"a number that is not finite ({v})"
        elif isinstance(v, dict):
            work.extend(v.keys())
            work.extend(v.values())
        elif isinstance(v, (list, tuple)):
            work.extend(v)
    return None


def finite_number(value: object) -> float | None:
    """``value`` as a finite float where it is a number (not a bool) a float can hold, else
    None: NaN, the infinities and integers too large for a float (``math.isfinite`` raises
    OverflowError on those: a 400-digit number in a file must not stop a command)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


BOM = "\ufeff"  # a byte-order mark, which some editors write at the start of a UTF-8 file


class JSONTextError(ValueError):
    """Text refused as JSON, with the line (from 1) it is refused at where known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class Located(dict):
    """A JSON object from :func:`loads_located`: ``line`` is the line of its ``{``,
    ``lines[key]`` the line where the key's value starts."""

    line: int = 0
    lines: dict[str, int]


class LocatedList(list):
    """A JSON array from :func:`loads_located`: ``line`` is the line of its ``[``,
    ``lines[k]`` the line where item ``k`` starts."""

    line: int = 0
    lines: list[int]


class _KeyTwice(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _KeyTwice
    return out


def loads(text: str) -> Any:
    """``json.loads`` for a file others wrote: a leading byte-order mark is dropped, ``NaN``
    and ``Infinity`` are refused, and so is an object that gives a key twice (json would keep
    the last silently): :class:`JSONTextError` with the line of the second. Otherwise the
    errors of ``json.loads`` (``JSONDecodeError`` with its line; ValueError, RecursionError)."""
    text = text.removeprefix(BOM)
    try:
        return json.loads(text, parse_constant=refuse_constant, object_pairs_hook=_unique_keys)
    except _KeyTwice:
        pass
    try:  # (again, slower, to find where)
        loads_located(text)
    except JSONTextError:
        raise
    except (ValueError, RecursionError):
        pass
    raise JSONTextError("a key is given twice in one object")


def loads_located(text: str, *, parse_int: Callable[[str], Any] | None = None,
                  max_containers: int | None = None, containers_note: str = "") -> Any:
    """:func:`loads` with every object a :class:`Located` and every array a
    :class:`LocatedList`, which know the lines they and their items start on (about ten times
    slower than ``json.loads``: for files of a few MiB, or for finding where a value that
    :func:`loads` read is wrong).

    ``parse_int`` reads integers (a ValueError from it, as from NaN, is a
    :class:`JSONTextError` at the value's line); past ``max_containers`` objects and arrays
    the parse stops with a JSONTextError (``containers_note`` appended to its message),
    before the document's memory grows far beyond the text's."""
    text = text.removeprefix(BOM)
    newlines = array("q", (m.start() for m in re.finditer("\n", text)))  # 8 bytes a line
    made = [0]

    def line_of(pos: int) -> int:
        return bisect.bisect_left(newlines, pos) + 1

    def count(pos: int) -> None:
        made[0] += 1
        if max_containers is not None and made[0] > max_containers:
            raise JSONTextError(f"more than {max_containers:,} objects and arrays"
                                f"{containers_note}", line_of(pos))

    def located(scan_once: Any) -> Any:
        """``scan_once`` whose refusal of a value (NaN, an integer ``parse_int`` refuses)
        names the value's line."""
        def scan(s: str, idx: int) -> Any:
            try:
                return scan_once(s, idx)
            except (JSONTextError, json.JSONDecodeError, StopIteration, RecursionError):
                raise
            except ValueError as e:
                raise JSONTextError(str(e), line_of(idx)) from None
        return scan

    def on_object(s_and_end: tuple[str, int], strict: bool, scan_once: Any, object_hook: Any,
                  pairs_hook: Any, memo: Any = None) -> tuple[Located, int]:
        starts: list[int] = []
        inner = located(scan_once)

        def scan(s: str, idx: int) -> Any:
            starts.append(idx)
            return inner(s, idx)

        pairs, end = json.decoder.JSONObject(s_and_end, strict, scan, None, list, memo)
        count(s_and_end[1])
        out = Located()
        out.line, out.lines = line_of(s_and_end[1] - 1), {}
        for (key, value), at in zip(pairs, starts, strict=True):
            if key in out:
                raise JSONTextError(f"{visible(repr(key))[:80]} is given twice in one object",
                                    line_of(at))
            out[key], out.lines[key] = value, line_of(at)
        return out, end

    def on_array(s_and_end: tuple[str, int], scan_once: Any) -> tuple[LocatedList, int]:
        starts: list[int] = []
        inner = located(scan_once)

        def scan(s: str, idx: int) -> Any:
            starts.append(idx)
            return inner(s, idx)

        values, end = json.decoder.JSONArray(s_and_end, scan)
        count(s_and_end[1])
        out = LocatedList(values)
        out.line, out.lines = line_of(s_and_end[1] - 1), [line_of(at) for at in starts]
        return out, end

    decoder = json.JSONDecoder(parse_constant=refuse_constant, parse_int=parse_int)
    decoder.parse_object = on_object  # type: ignore[assignment]
    decoder.parse_array = on_array  # type: ignore[assignment]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        return decoder.decode(text)
    except (JSONTextError, json.JSONDecodeError, RecursionError):
        raise
    except ValueError as e:  # a refused value at the top level
        raise JSONTextError(str(e), 1) from None


def line_at(doc: Any, *keys: str | int) -> int | None:
    """The line where ``doc[keys[0]][keys[1]]...`` starts in a :func:`loads_located`
    document, or None where that is not known."""
    line = None
    for key in keys:
        lines = getattr(doc, "lines", None)
        try:
            line, doc = lines[key], doc[key]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return line
    return line


_TYPE_NAMES = {dict: "object", str: "string", list: "list", type(None): "null"}


def a_type(kind: type) -> str:
    """A JSON value's type named for a message, with its article: ``an int``, ``an object``,
    ``a string``, ``null`` (never "a int")."""
    name = _TYPE_NAMES.get(kind, kind.__name__)
    return name if name == "null" else f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def a_kind(value: object) -> str:
    """:func:`a_type` of ``value``'s type: ``entry is {a_kind(entry)}`` reads "entry is an int"."""
    return a_type(type(value))


__all__ = ["BOM", "JSONTextError", "Located", "LocatedList", "a_kind", "a_type", "finite_number",
           "finite_float", "json_problem", "line_at", "loads", "loads_located",
           "refuse_constant"]
