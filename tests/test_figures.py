"""One rounding rule for every figure shown (careful_engine.core.figures)."""

from __future__ import annotations

import pytest

from careful_engine.core.figures import figure_text, mean_share, percent, percent_text, shown
from careful_engine.present.report import Report, pct, pct_change


@pytest.mark.parametrize("value, want", [
    (28.749999999999996, 28.8),  # (41.5 + 38.5 + 35 + 0) / 4 in floats: 28.75
    (9.749999999999998, 9.8),  # (4 + 35 + 0 + 0) / 4
    (26.25, 26.3),  # exact: Python's round gives 26.2 (half to even)
    (0.05, 0.1), (0.04999, 0.0), (-0.25, -0.3), (100.0, 100.0), (None, None),
])
def test_shown_rounds_half_up_after_float_noise(value, want) -> None:
    assert shown(value) == want


def test_every_display_of_a_share_agrees() -> None:
    """A mean that is exactly x.x5 shows the same, rounded up, in a table cell, a line of
    text, and the document's value rounded half up (pct gives that value, as a table's JSON
    stores it); its change
    against another is the difference of the shown figures."""
    share = (0.415 + 0.385 + 0.35 + 0) / 4  # 0.28749999999999998
    assert percent(share) == 28.75
    assert pct(share) == 28.75 and shown(pct(share)) == 28.8 and percent_text(share) == "28.8"
    assert Report.format_cell(pct(share)) == "28.8"  # a table cell holds the value, shows 28.8
    assert Report.format_cell(100 * share) == "28.8"
    assert pct_change(share, 0.2625) == 2.5  # 28.8 - 26.3
    assert percent_text(None) == "–"


def test_the_rule_holds_whatever_decimal_context_bfcl_left() -> None:
    """bfcl's MathAPI.square_root sets the process's decimal precision to its argument
    (``getcontext().prec = precision``): after a replay called it with 1, every shown figure
    raised InvalidOperation (the whole suite in one process: 89 failures)."""
    import decimal

    from careful_engine.core import bfcl
    from careful_engine.core.environment import Environment

    with decimal.localcontext() as ctx:
        conv = next(c for c in bfcl.conversations("multi_turn_base")
                    if "MathAPI" in c.involved_classes)
        env = Environment.for_conversation(conv, "reference")
        env.execute("square_root(number=2, precision=1)")
        assert decimal.getcontext().prec == 1 and ctx.prec == 1
        assert shown(28.749999999999996) == 28.8 and percent_text(0.2625) == "26.3"
        assert shown(1e70) == 1e70


def test_figure_text_rounds_half_up_to_any_places() -> None:
    assert (figure_text(2.25), figure_text(2.5, 0), figure_text(3.5, 0)) == ("2.3", "3", "4")
    assert figure_text(None, 0) == "–"


def test_equal_means_are_equal_floats() -> None:
    """99, 94, 100 and 100, 93, 100 of 200: the float sums differ in the last bit."""
    a, b = [99 / 200, 94 / 200, 1 / 2, 0.0], [1 / 2, 93 / 200, 1 / 2, 0.0]
    assert sum(a) / 4 != sum(b) / 4 and mean_share(a) == mean_share(b) == 0.36625
    assert mean_share([None, 0.5]) == 0.25
