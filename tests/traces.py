"""Helpers for tests that compare replays: a trace's fingerprint, and which reference side
careful_engine.core.refcache handed each replay."""

from __future__ import annotations

import json

import pytest

from careful_engine.core import refcache


def fingerprint(trace) -> str:  # noqa: ANN001
    """Every call of both sides (text, result, success, change), their end states and the
    verdict, as one string."""
    sides = [s for s in (trace.model, trace.reference) if s is not None]
    recs = [[(c.text, c.result, c.success, c.changed, [ch.dotted() for ch in c.diff()])
             for c in t] for s in sides for t in s.turns]
    ends = [[s.plain() for s in side.turn_end_states] for side in sides]
    return json.dumps([trace.verdict.to_json(), recs, ends], default=str)


def reference_sides(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the kind of every reference side :func:`refcache.reference_side` hands
    out (its class name; ``+guards`` for a guarded cache entry), in order."""
    kinds: list[str] = []
    real = refcache.reference_side

    def side(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        got = real(*a, **kw)
        guarded = type(got) is refcache.CachedSide and got._d.guards is not None
        kinds.append(type(got).__name__ + ("+guards" if guarded else ""))
        return got

    monkeypatch.setattr(refcache, "reference_side", side)
    return kinds
