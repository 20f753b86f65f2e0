"""The one rule for figures: documents carry the full value, every display rounds it here.

A percentage is ``100 * share`` (:func:`percent`), computed once, the same way everywhere; a
table, the terminal and the step summary show :func:`shown` of it, and a JSON document stores
the unrounded value, so a reader who rounds the document's figure gets the table's.
"""

from __future__ import annotations


def percent(share: float | None) -> float | None:
    """``share`` (0-1) as a percentage, unrounded: the value every shown figure rounds."""
    return None if share is None else 100 * share


def shown(value: float | None, digits: int = 1) -> float | None:
    """A figure as every table shows it: Python's round to ``digits`` places."""
    return None if value is None else round(value, digits)
