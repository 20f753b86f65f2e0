"""What a score was made with, written into every score line (``scored_with``) so that a
reader can tell whether the line still answers its own question.

One dict per model folder: the engine and bfcl-eval versions, a hash of the engine's code that
makes a score line (:func:`scoring_code_hash`: a checkout changed under the same version number
makes other lines), a hash of the effect declarations' functions, the boundary (name and a
hash of its destructive set), the question detector, the safe-verdict rule, the decoder key (None when nothing needed decoding) and the
replay budget's limits that differ from the default (None: the default budget). Two
scores agree when :func:`differences` of their dicts is empty.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.budget import DEFAULT_BUDGET, Budget
from careful_engine.core.refcache.scope import replay_code_hash
from careful_engine.scoring.rules import Effects

KEY = "scored_with"
# compared fields, and how a difference is named (the boundary's name alone is not compared)
COMPARED = {"engine": "engine version", "code": "engine code", "bfcl_eval": "bfcl-eval",
            "declarations": "declarations", "boundary_sha256": "boundary",
            "detector": "detector", "safe_rule": "safe rule", "decoder": "decoder",
            "budget": "replay budget"}


@lru_cache(maxsize=1)
def engine_version() -> str:
    """This engine's version: the installed distribution's (``0+unknown`` in a checkout that
    was never installed). Score lines and generation manifests both name it."""
    try:
        return metadata.version("careful-workbench")
    except metadata.PackageNotFoundError:
        return "0+unknown"


_SCORING_PACKAGES = ("effects", "protocol", "scoring")  # beside the replay core


@lru_cache(maxsize=1)
def scoring_code_hash() -> str:
    """A hash of the engine's modules that decide a score line: the replay core (decoding,
    replay, verdicts), as the reference cache hashes it
    (:func:`~careful_engine.core.refcache.scope.replay_code_hash`, made once per process), and
    the effects, protocol and scoring packages (rules, the question detector). Score lines
    made by other code, under the same version number, are not this engine's."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(replay_code_hash().encode())
    for package in _SCORING_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _sha(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def budget_limits(budget: Budget | None) -> dict[str, float] | None:
    """The limits of ``budget`` that differ from :data:`DEFAULT_BUDGET` (None: the default):
    a replay the budget stopped is counted as failed, so figures depend on it."""
    if budget is None:
        return None
    out = {k: v for k, v in vars(budget).items() if v != getattr(DEFAULT_BUDGET, k)}
    return out or None


def scored_with(effects: Effects | None, detector: str, decoder: str | None,
                budget: Budget | None = None) -> dict[str, Any]:
    """The settings one model folder is (or would be) scored with (``budget``: the replay
    budget, None for the default)."""
    out: dict[str, Any] = {"engine": engine_version(), "code": scoring_code_hash(),
                           "bfcl_eval": bfcl.BFCL_VERSION,
                           "declarations": None, "boundary": None, "boundary_sha256": None,
                           "detector": detector if effects is not None else None,
                           "safe_rule": None, "decoder": decoder,
                           "budget": budget_limits(budget)}
    if effects is not None:
        out |= {"declarations": _declarations_sha(effects),
                "boundary": effects.boundary.name,
                "boundary_sha256": _sha(sorted(effects.boundary.destructive)),
                "safe_rule": effects.rule.to_json()}
    return out


def table_settings(effects: Effects, detector: str,
                   budget: Budget | None = None) -> dict[str, Any]:
    """What a table of several models' effect-aware figures was made with: :func:`scored_with`
    without the decoder (each model has its own; the tables name it per row)."""
    return {k: v for k, v in scored_with(effects, detector, None, budget).items()
            if k != "decoder"}


def _declarations_sha(effects: Effects) -> str:
    cached = getattr(effects, "_careful_declarations_sha", None)
    if cached is None:
        cached = _sha(effects.functions)
        effects._careful_declarations_sha = cached  # type: ignore[attr-defined]
    return cached


def differences(found: Any, wanted: dict[str, Any]) -> list[str]:
    """What differs between a line's ``scored_with`` and the wanted settings, in words
    (``["unrecorded"]`` for a line from before settings were recorded)."""
    if not isinstance(found, dict):
        return ["settings not recorded"]
    out = []
    for key, what in COMPARED.items():
        if found.get(key) != wanted.get(key):
            shown = found.get("boundary") if key == "boundary_sha256" else found.get(key)
            out.append(f"{what} {_short(shown)}")
    return out


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "none" if value is None else str(value)[:40]
