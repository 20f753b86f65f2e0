"""The rules for names (annotators, rounds, authors) and for reasons, enforced at every entry.

A name is what people type and read: two names that look alike must be one name. So a name is
NFC-normalised, then must be 1 to 64 characters of letters, digits, ``.``, ``_`` or ``-``,
starting with a letter or a digit: no whitespace (leading, trailing or inner), no control or
invisible formatting characters, no path separators. Two annotators whose names differ only
by case or Unicode compatibility form (``alice``/``Alice``, ``ﬁona``/``fiona``) are refused as
confusable.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from careful_engine.annotation.errors import AnnotationError
from careful_engine.core.json_values import a_kind
from careful_engine.core.safe_text import misleading

NAME_MAX = 64
REASON_MAX = 4000
NAME_RULE = (
    f"1-{NAME_MAX} letters, digits, '.', '_' or '-', starting with a letter or digit; "
    "no spaces, no control characters"
)
_PUNCT = frozenset("._-")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_name(name: object, what: str = "annotator") -> str:
    """``name`` NFC-normalised, or :class:`AnnotationError` stating the rule it breaks."""
    if not isinstance(name, str):
        raise AnnotationError(f"invalid {what} name {_shown(name)}: not text ({NAME_RULE})")
    if len(name) > 4 * NAME_MAX:
        raise AnnotationError(f"invalid {what} name {_shown(name)}: too long ({NAME_RULE})")
    nfc = unicodedata.normalize("NFC", name)
    problem = _name_problem(nfc)
    if problem:
        raise AnnotationError(f"invalid {what} name {_shown(name)}: {problem} ({NAME_RULE})")
    return nfc


def _name_problem(name: str) -> str | None:
    if not name:
        return "empty"
    if name != name.strip():
        return "leading or trailing whitespace"
    if len(name) > NAME_MAX:
        return f"{len(name)} characters"
    for c in name:
        cat = unicodedata.category(c)
        if cat[0] == "C":
            return f"control or invisible character U+{ord(c):04X}"
        if c.isspace() or cat[0] == "Z":
            return "whitespace inside"
        if not (cat[0] in "LMN" or c in _PUNCT):
            return f"character {c!r} not allowed"
    if unicodedata.category(name[0])[0] not in "LN":
        return "must start with a letter or a digit"
    return None


_SEPARATORS = re.compile(r"[, ]+")


def parse_names(value: str | Iterable[str] | None) -> list[str]:
    """Names from one value or several (a repeated option, a dialog's field), each once, in
    order: the one convention of every front end (``-a A1 -a A2`` == ``-a A1,A2`` ==
    ``A1 A2``). Commas and spaces separate names; any other whitespace or control character is
    no separator and stays in its name, so that :func:`check_name` refuses ``"alice\n"``
    rather than a name being silently corrected."""
    values = [value] if isinstance(value, str) else list(value or [])
    names = [part for item in values for part in _SEPARATORS.split(item) if part]
    return list(dict.fromkeys(names))


def name_key(name: str) -> str:
    """What two confusable names share: NFKC, case-folded."""
    return unicodedata.normalize("NFKC", name).casefold()


def confusable(name: str, existing: list[str] | tuple[str, ...]) -> str | None:
    """An existing name that differs from ``name`` yet looks the same, or None."""
    key = name_key(name)
    return next((e for e in existing if e != name and name_key(e) == key), None)


def check_reason(reason: object, where: str = "") -> str:
    """A reason stripped, with newlines normalised; refused if not text, too long, or holding
    characters that can mislead a terminal (:func:`~careful_engine.core.safe_text.misleading`:
    controls other than newline and tab, bidi overrides, unassigned...)."""
    prefix = f"{where}: " if where else ""
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise AnnotationError(f"{prefix}a reason must be text, not {a_kind(reason)}")
    text = reason.replace("\r\n", "\n").strip()
    if len(text) > REASON_MAX:
        raise AnnotationError(
            f"{prefix}the reason has {len(text)} characters; at most {REASON_MAX}")
    bad = misleading(text, lines=True)
    if bad:
        raise AnnotationError(f"{prefix}the reason holds a control character {bad}")
    return text


def check_line(value: object, what: str, limit: int = 4096) -> str:
    """Stored one-line text (a path, who closed a round): at most ``limit`` characters, none
    that careful refuses (:func:`~careful_engine.core.safe_text.misleading`); the same check
    where it is written and where it is read back, or :class:`AnnotationError`."""
    bad = misleading(value) if isinstance(value, str) else "not text"
    if bad or not isinstance(value, str) or len(value) > limit:
        why = bad or f"{len(str(value))} characters"
        raise AnnotationError(f"{what} {_shown(value)[:60]} is not one line of plain text of "
                              f"at most {limit} characters ({why})")
    return value


def time_problem(value: object) -> str | None:
    """Why ``value`` is not an ISO 8601 time (as careful writes them), or None."""
    from datetime import datetime

    if not isinstance(value, str) or len(value) > 64:
        return f"{_shown(value)[:60]} is not an ISO 8601 time"
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return f"{_shown(value)[:60]} is not an ISO 8601 time"
    return None


def check_model(model: object) -> str:
    """A language model's name: bounded, printable text without whitespace."""
    if not isinstance(model, str) or not model or len(model) > 200 or any(
        c.isspace() or unicodedata.category(c)[0] == "C" for c in model
    ):
        raise AnnotationError(
            f"invalid model name {_shown(model)}: 1-200 printable characters, no spaces")
    return model


__all__ = ["NAME_MAX", "NAME_RULE", "REASON_MAX", "check_line", "check_model", "check_name",
           "check_reason",
           "confusable", "name_key", "parse_names", "time_problem"]
