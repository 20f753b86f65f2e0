"""Parsed JSON from files others wrote: what Python's json reads but no file should hold.

``json`` reads ``NaN`` and ``Infinity`` (and ``1e999`` as infinity) and ``"\\ud800"`` as a
lone surrogate; written out again they give a file that is not JSON, or no file at all.
"""

from __future__ import annotations

import math
import re
from typing import Any

from careful_engine.core.safe_text import visible


def refuse_constant(name: str) -> Any:
    """``parse_constant`` for ``json.loads``: NaN, Infinity and -Infinity are refused."""
    raise ValueError(f"{name} is not a JSON value")  # (json writes them; this project does not)


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


__all__ = ["finite_number", "json_problem", "refuse_constant"]
