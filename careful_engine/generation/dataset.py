"""The test entries of a run, loaded exactly as ``bfcl generate`` loads them."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from careful_engine.core import bfcl
from careful_engine.generation.errors import GenerationError

_ALIASES = {"all": bfcl.CATEGORIES, "multi_turn": bfcl.CATEGORIES}


def parse_categories(values: Iterable[str] | None) -> tuple[str, ...]:
    """``base``, ``multi_turn_base``, ``all`` ..., comma-separated or repeated; in bfcl's order."""
    wanted: set[str] = set()
    for value in values or ["all"]:
        for part in str(value).split(","):
            name = part.strip()
            if not name:
                continue
            full = bfcl.category_named(name)
            if name in _ALIASES:
                wanted.update(_ALIASES[name])
            elif full is not None:
                wanted.add(full)
            else:
                raise GenerationError(f"unknown category {name!r}; expected "
                                      f"{bfcl.CATEGORY_NAMES_HELP}, or all")
    return tuple(c for c in bfcl.CATEGORIES if c in wanted)


def parse_ids(values: Iterable[str] | None) -> list[str]:
    out: list[str] = []
    for value in values or []:
        out.extend(p.strip() for p in str(value).split(",") if p.strip())
    known = bfcl.conversation_index()
    unknown = [i for i in out if i not in known]
    if unknown:
        raise GenerationError(f"no multi-turn conversation with id {', '.join(unknown[:5])}")
    return list(dict.fromkeys(out))


@cache
def _loaded(category: str) -> tuple[dict, ...]:
    return tuple(sorted(bfcl.load_dataset_entry(category), key=lambda e: bfcl.sort_key(e["id"])))


def load_entries(category: str) -> list[dict]:
    """bfcl's ``load_dataset_entry``: docs populated, miss_func docs held out; sorted by id.

    Loaded once per process; callers must not modify the entries (the runner deep-copies
    each one before inference).
    """
    return list(_loaded(category))


def select(categories: tuple[str, ...], ids: list[str] | None = None,
           limit: int | None = None) -> dict[str, list[dict]]:
    """Per category, the entries to run: ``ids`` if given (their categories only), else the
    first ``limit`` of each category in id order (all without a limit)."""
    if ids:
        cats = tuple(c for c in bfcl.CATEGORIES if any(bfcl.category_of(i) == c for i in ids))
        wanted = set(ids)
        return {c: [e for e in load_entries(c) if e["id"] in wanted] for c in cats}
    out = {}
    for c in categories:
        entries = load_entries(c)
        out[c] = entries[:limit] if limit is not None else entries
    return out
