"""The one rule for figures: documents carry the value, every display rounds it here.

A percentage is ``100 * share`` (:func:`percent`), computed once, the same way everywhere,
with the float noise of its arithmetic past :data:`SNAP` decimals taken off (the mean of 4%
and 35% is 9.75, not the float sum's 9.749999999999998). A table, the terminal and the step
summary show :func:`shown` of it: rounded half up, as people round (9.75 -> 9.8, 26.25 ->
26.3; Python's ``round`` gives 9.7 and 26.2, by binary noise and by rounding half to even).
A JSON document (the CI document, every table's ``.json``) stores :func:`percent`'s value
(any other figure to :data:`SNAP` decimals too), so a reader who rounds it half up (jq, a
spreadsheet, JavaScript's ``toFixed``) gets the table's figure; a table's ``.md`` and ``.csv``
hold the figure shown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

SNAP = 9  # decimals a computed figure keeps: what lies past them is float noise
# its own decimal context: the process's is bfcl's to change (MathAPI.square_root sets its
# precision to the call's argument, for every Decimal after it)
_CONTEXT = Context(prec=60, rounding=ROUND_HALF_UP)


def percent(share: float | None) -> float | None:
    """``share`` (0-1) as a percentage, to :data:`SNAP` decimals: the value every shown
    figure rounds."""
    return None if share is None else round(100 * share, SNAP)


def mean_share(values: Iterable[float | None]) -> float:
    """The unweighted mean of shares (0-1; None counts as 0), to :data:`SNAP` + 2 decimals
    (:func:`percent`'s :data:`SNAP`): equal means are equal floats, so they rank together
    (99, 94, 100 and 100, 93, 100 passes of 200 both average 36.625 %; their float sums
    differ in the last bit)."""
    values = [v or 0.0 for v in values]
    return round(sum(values) / len(values), SNAP + 2) if values else 0.0


def shown(value: float | None, digits: int = 1) -> float | None:
    """A figure as every table shows it: to ``digits`` places, half up (after the float noise
    past :data:`SNAP` decimals is taken off)."""
    if value is None or not math.isfinite(value):
        return value
    exact = Decimal(repr(round(value, SNAP)))  # (exact: no context involved)
    try:
        return float(exact.quantize(Decimal(1).scaleb(-digits, _CONTEXT), context=_CONTEXT))
    except InvalidOperation:  # beyond 60 digits: no figure careful shows
        return round(value, digits)


def figure_text(value: float | None, digits: int = 1) -> str:
    """A figure as text, as the tables show it: :func:`shown` to ``digits`` places (half up:
    2.25 -> ``2.3``, 0 places: 2.5 -> ``3``), or ``–`` for none."""
    value = shown(value, digits)
    return "–" if value is None else f"{value:.{digits}f}"


def percent_text(share: float | None) -> str:
    """``share`` (0-1) as a shown percentage with one decimal (``9.8``), or ``–`` for none:
    for lines of text, as the tables show it."""
    return figure_text(percent(share))
