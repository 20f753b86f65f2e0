"""``depth_over``: an entry nesting lists and objects deeper than the limit is refused, one at
the limit is read (careful_engine.core.runs)."""

from __future__ import annotations

import pytest

from careful_engine.core.runs import MAX_DEPTH, depth_over


def _nested(depth: int, leaf: object = 1) -> object:
    value: object = leaf
    for d in range(depth):
        value = [value, "x"] if d % 2 else {"k": value, "n": None}
    return value


@pytest.mark.parametrize("depth", [0, 1, 2, MAX_DEPTH - 1, MAX_DEPTH])
def test_up_to_the_limit_is_read(depth: int) -> None:
    assert not depth_over(_nested(depth))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, MAX_DEPTH + 50])
def test_beyond_the_limit_is_refused(depth: int) -> None:
    assert depth_over(_nested(depth))
    wide = {"a": [_nested(3)] * 1000, "b": [[_nested(depth)]][0]}  # the deep branch among many
    assert depth_over(wide)


def test_a_small_limit_counts_every_list_and_object() -> None:
    assert depth_over([[]], limit=1) and not depth_over([[]], limit=2)
    assert depth_over({"a": {"b": 1}}, limit=1) and not depth_over({"a": "{[[]]}"}, limit=1)
    assert not depth_over("[[[[", limit=0) and depth_over([], limit=0)
