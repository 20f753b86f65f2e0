"""A small JSON-Schema-like validator, and a JSON reader that knows each object's line.

Schemas are plain dicts using a subset of JSON Schema's keywords: ``type`` (a name or a list),
``enum``, ``minLength``/``maxLength``, ``properties``, ``required``,
``additionalProperties`` (``False`` or a schema), ``items``, ``minItems``/``maxItems``, and
three of our own: ``format`` (a named check passed to :func:`validate`), ``uniqueBy`` (a
property whose value must not repeat in an array), and ``maxDepth``/``maxSize`` (bounds for
free-form JSON). Validation never stops at the first problem: it returns every
:class:`Problem`, each with the line of the object it was found in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from careful_engine.core.json_values import JSONTextError, json_problem, loads_located

MAX_INT_DIGITS = 30
# objects and arrays in one file: a label set of the 128 functions holds about 520 (a label
# about four), and an import takes 10,000 labels at most; past this the parse stops, before
# the file's memory grows to twenty times its size
MAX_CONTAINERS = 100_000
_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


@dataclass(frozen=True)
class Problem:
    path: str  # e.g. labels[3].reason
    line: int | None
    id: str | None  # e.g. the function a label item is about
    message: str

    def format(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        field = f"{self.path}: " if self.id and self.path else ""
        return f"{where} [{self.id or self.path or 'file'}]: {field}{self.message}"


class JSONFileError(ValueError):
    """The text is not JSON this reader accepts (with the line where it fails)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def loads_with_lines(text: str) -> Any:
    """JSON with each object and array knowing its line
    (:func:`careful_engine.core.json_values.loads_located`, as boundary and declarations
    files are read): bounded integers and containers, no NaN, no key twice in one object, no
    value that no UTF-8 file or JSON writer holds.

    Raises :class:`JSONFileError` (with a line) for anything it refuses.
    """
    try:
        doc = loads_located(text, parse_int=_bounded_int, max_containers=MAX_CONTAINERS,
                            containers_note="; a label set holds about four a label")
    except JSONTextError as e:
        raise JSONFileError(f"invalid JSON: {e}", e.line) from None
    except json.JSONDecodeError as e:
        raise JSONFileError(f"invalid JSON: {e.msg} (column {e.colno})", e.lineno) from None
    except RecursionError:
        raise JSONFileError("invalid JSON: nested too deeply") from None
    except ValueError as e:
        raise JSONFileError(f"invalid JSON: {e}") from None
    _check_values(doc)
    return doc


def _check_values(doc: Any) -> None:
    """JSONFileError (with the line of the object or array holding it) for a value no UTF-8
    file can hold or no JSON writes: a lone surrogate (``"\\ud800"`` parses) or a number
    that is not finite (``1e999``). Such a value was imported, then export failed, or wrote
    ``Infinity``, which import refuses."""
    work: list[tuple[Any, int | None]] = [(doc, None)]
    while work:
        value, line = work.pop()
        line = getattr(value, "line", None) or line
        if isinstance(value, dict):
            for k, v in value.items():
                problem = json_problem(k)
                if problem is not None:
                    raise JSONFileError(f"invalid JSON: {problem}", line)
                work.append((v, line))
        elif isinstance(value, list):
            work.extend((v, line) for v in value)
        else:
            problem = json_problem(value)
            if problem is not None:
                raise JSONFileError(f"invalid JSON: {problem}", line)


def _line(value: Any, default: int | None) -> int | None:
    return getattr(value, "line", None) or default


def kind_of(value: Any) -> str:
    """The JSON type name of a decoded value."""
    if value is None:
        return "null"
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def _depth_and_size(value: Any, limit: int) -> tuple[int, int]:
    """(nesting depth, number of nodes) of free-form JSON, walked without recursion."""
    depth, nodes = 0, 0
    stack = [(value, 1)]
    while stack and nodes <= limit:
        v, d = stack.pop()
        nodes += 1
        depth = max(depth, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
            nodes += sum(len(k) for k in v) // 32
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
        elif isinstance(v, str):
            nodes += len(v) // 32
    return depth, nodes


def validate(
    value: Any,
    schema: Mapping[str, Any],
    formats: Mapping[str, Callable[[Any], str | None]] | None = None,
    *,
    path: str = "",
    line: int | None = None,
    ident: str | None = None,
    id_of: Callable[[str, Any], str | None] | None = None,
) -> list[Problem]:
    """Every way ``value`` breaks ``schema``; ``formats`` name checks returning a problem."""
    formats = formats or {}
    line = _line(value, line)
    problems: list[Problem] = []

    def bad(message: str) -> list[Problem]:
        problems.append(Problem(path, line, ident, message))
        return problems

    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_TYPES[t](value) for t in names):
            return bad(f"expected {' or '.join(names)}, got {kind_of(value)}")
    if "enum" in schema and value not in schema["enum"]:
        shown = repr(value) if not isinstance(value, str) or len(value) < 40 else "a long string"
        return bad(f"{shown} is not one of {', '.join(map(repr, schema['enum']))}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return bad("empty" if not value else "too short")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return bad(f"{len(value)} characters, at most {schema['maxLength']}")
    if "maxDepth" in schema or "maxSize" in schema:
        depth, size = _depth_and_size(value, schema.get("maxSize", 10**6))
        if depth > schema.get("maxDepth", 10**6):
            return bad(f"nested {depth} deep, at most {schema['maxDepth']}")
        if size > schema.get("maxSize", 10**6):
            return bad(f"too large (more than {schema['maxSize']} items)")
    if "format" in schema and value is not None:
        message = formats[schema["format"]](value)
        if message:
            return bad(f"{message}")
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                bad(f"missing {key!r}")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key in props:
                problems += validate(item, props[key], formats, path=sub, line=line,
                                     ident=ident, id_of=id_of)
            elif extra is False:
                shown = key if len(key) <= 40 else key[:37] + "..."
                bad(f"unknown field {shown!r}")
            elif isinstance(extra, Mapping):
                problems += validate(item, extra, formats, path=sub, line=line,
                                     ident=ident, id_of=id_of)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return bad(f"at least {schema['minItems']} items expected")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return bad(f"{len(value)} items, at most {schema['maxItems']}")
        items = schema.get("items")
        unique = schema.get("uniqueBy")
        seen: dict[Any, int] = {}
        for i, item in enumerate(value):
            sub = f"{path}[{i}]"
            item_id = id_of(sub, item) if id_of else None
            if items is not None:
                problems += validate(item, items, formats, path=sub, line=line,
                                     ident=item_id or ident, id_of=id_of)
            if unique and isinstance(item, dict) and isinstance(item.get(unique), str):
                key = item[unique]
                if key in seen:
                    problems.append(Problem(
                        sub, _line(item, line), item_id or ident,
                        f"{key!r} appears twice (first at {path}[{seen[key]}])"))
                else:
                    seen[key] = i
    return problems


__all__ = ["JSONFileError", "Problem", "kind_of", "loads_with_lines", "validate"]
