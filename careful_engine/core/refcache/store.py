"""The cache as this process holds it, per category: entries read from disk or recorded here
(encoded when first needed, as a rule all at once by :func:`flush`), decoded once; and
writing them (:func:`flush`), recording whole categories ahead (:func:`warm`) and reading them
ahead (:func:`preload`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from careful_engine.core import bfcl, environment
from careful_engine.core.refcache.disk import (
    STATS,
    _disk,
    _locked,
    _path,
    _prune,
    _read,
    _write,
)
from careful_engine.core.refcache.entry import _decode, _Decoded
from careful_engine.core.refcache.recorder import _build, _Recorder
from careful_engine.core.refcache.scope import (
    Uncacheable,
    dataset_version,
    depends_on_process,
    enabled,
    guardable,
    replay_code_hash,
)
from careful_engine.core.user_cache import cache_root


@dataclass
class _Pending:
    """A reference recorded in this process whose entry is not encoded yet."""

    rec: _Recorder
    conv: bfcl.Conversation
    model_name: str


@dataclass
class _Category:
    # id -> entry (None: not cacheable; _Pending: recorded, see _settled); absent: not yet seen
    entries: dict[str, dict | _Pending | None]
    decoded: dict[str, _Decoded]
    new: set[str] = field(default_factory=set)  # recorded here, not yet on disk
    # id -> every instance template this process made for it (pickled file systems too):
    # the model side of a later replay in this process clones them (never written to disk)
    held: dict[str, dict[str, tuple]] = field(default_factory=dict)
    # id -> the checked plain-data templates of a "loads" entry (see sides.LoadedSide)
    loads: dict[str, dict[str, tuple]] = field(default_factory=dict)
    # id -> (a recorded entry, its marshal bytes without the templates): written as
    # {"data": bytes, "templates": ...} (not marshalled again) while it is that id's entry
    encoded: dict[str, tuple[dict, bytes]] = field(default_factory=dict)


def _hold(cat: _Category, conv: bfcl.Conversation,
          held: dict[str, tuple] | None = None) -> None:
    """Keep the templates this process made for ``conv`` with its category (``held``: those
    templates, if at hand)."""
    if len(cat.held.get(conv.id, ())) < len(conv.involved_classes):
        cat.held[conv.id] = environment.held_templates(conv) if held is None else held


_MEMORY: dict[tuple[str, str, str], _Category] = {}
_ABSENT: Any = object()


def _settled(cat: _Category, conv_id: str, default: Any = None) -> dict | None:
    """``conv_id``'s entry in ``cat`` (``default`` where it has none), a recorded one encoded
    now if it was not yet."""
    entry = cat.entries.get(conv_id, default)
    if type(entry) is _Pending:
        try:
            done: dict | None = entry.rec.entry(entry.conv, entry.model_name)
        except (Uncacheable, RecursionError):
            done = None
        cat.entries[conv_id] = done
        if done is not None and entry.rec.data is not None:
            cat.encoded[conv_id] = (done, entry.rec.data)
        return done
    return entry


def _category(category: str) -> _Category:
    mkey = (category, dataset_version(category), replay_code_hash())
    got = _MEMORY.get(mkey)
    if got is None:
        disk = _disk()
        entries = _read(_path(disk[0], category), disk[1], category) if disk else None
        got = _MEMORY[mkey] = _Category(entries or {}, {})
    return got


def _decoded(cat: _Category, conv_id: str) -> _Decoded | None:
    """A held entry, decoded once per process (None: not cacheable, or not decodable)."""
    entry = _settled(cat, conv_id)
    if entry is None:
        return None
    try:
        decoded = cat.decoded[conv_id] = _decode(entry)
    except (KeyError, IndexError, TypeError, ValueError, EOFError):
        cat.entries[conv_id] = None
        return None
    return decoded


def preload(categories: Iterable[str]) -> None:
    """Read and decode what the disk cache holds for ``categories`` now (a parent does this
    before forking its workers, which then share it instead of each reading it again)."""
    if not enabled():
        return
    for category in categories:
        cat = _category(category)
        for conv_id, entry in list(cat.entries.items()):
            if conv_id not in cat.decoded and not (type(entry) is dict and "loads" in entry):
                _decoded(cat, conv_id)


def flush() -> None:
    """Write what this process recorded to the disk cache (merged with what is there)."""
    dirty = [(k, c) for k, c in _MEMORY.items() if c.new]
    if not dirty:
        return
    disk = _disk()
    for (category, *_), cat in dirty:
        if disk is None:
            cat.new.clear()
            cat.encoded.clear()
            continue
        path = _path(disk[0], category)
        mine = {i: _settled(cat, i) for i in sorted(cat.new)}
        with _locked(disk[0]):  # workers flushing at once merge instead of overwriting
            entries = _read(path, disk[1], category) or {}
            entries.update(mine)
            _write(path, disk[1], category, entries, cat.encoded)
            _prune(disk[0], path)
        cat.new.clear()
        cat.encoded.clear()


def warm(categories: tuple[str, ...] = bfcl.CATEGORIES) -> None:
    """Record every cacheable reference of ``categories`` not held yet, and write them."""
    for category in categories:
        cat = _category(category)
        for conv in bfcl.conversations(category):
            entry = cat.entries.get(conv.id, _ABSENT)
            held = entry is not _ABSENT and not (type(entry) is dict and "loads" in entry)
            if held or (depends_on_process(conv) and not guardable(conv)):
                continue
            try:
                entry, data = _build(conv)
            except (Uncacheable, ValueError):
                cat.entries[conv.id] = None
            else:
                cat.entries[conv.id] = entry
                if data is not None:
                    cat.encoded[conv.id] = (entry, data)
            cat.new.add(conv.id)
            STATS["recorded"] += 1
    flush()


def clear_memory() -> None:
    """Forget what this process holds (the disk cache stays)."""
    _MEMORY.clear()


def describe() -> dict[str, Any]:
    """Where the cache lives and what this process did with it (for benchmarks and tests)."""
    return {"root": str(cache_root()), "enabled": enabled(), "engine": replay_code_hash(),
            **STATS}
