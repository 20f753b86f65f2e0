"""The reference side replayed once per (dataset version, engine version, category) and reused.

The reference trajectory of a conversation is the same for every model scored, so its replay
(calls, results, states after every call, and the instance attributes bfcl's state checker
compares at the end of every turn) is recorded the first time it runs live (as part of an
ordinary replay: no extra pass), kept in this process as it ran (encoded when first needed, as
a rule all at once by :func:`flush`), and written by :func:`flush` to disk under
``$CAREFUL_CACHE_DIR`` or ``$XDG_CACHE_HOME/careful`` (``~/.cache/careful``) in ``refcache/``,
one file per category; later replays take it from there. ``CAREFUL_REFCACHE=off`` turns the
cache off (every reference replayed live). :func:`warm` records whole categories ahead.

A reference whose classes hold bfcl process-global state that earlier conversations or the
model side can change (:mod:`careful_engine.core.process`) is cached only where that state is
the values of shared mutable defaults (``TwitterAPI``: ``post_tweet``'s lists), as a *guarded*
entry: it also holds those values at the start and end of every reference turn, and a replay
takes a turn from it only while the live objects hold the recorded start values (then gives
them the recorded end values, in place); otherwise :class:`Diverged` makes the replay start the
conversation again with the reference live. Such an entry is recorded the second time the
reference is replayed, from the values a fresh process has (the first replay keeps only the
instance templates), and a conversation that starts from other values does not use it.

The submodules hold the parts: :mod:`.scope` (on or off, the versions entries are keyed by,
and which references are NOT taken from the cache), :mod:`.recorder` (an entry built while a
reference runs), :mod:`.entry` (an entry decoded and checked), :mod:`.disk` (the entry files
and their safety: HMAC, marshal, no links followed), :mod:`.store` (what this process holds,
per category; :func:`flush`, :func:`warm`, :func:`preload`) and :mod:`.sides` (the reference
sides handed to :mod:`careful_engine.core.replay`). Other code uses this package's names
(``from careful_engine.core import refcache; refcache.reference_side(...)``).
``python -m careful_engine.core.refcache`` prints where the cache lives and what it holds.
"""

from careful_engine.core.refcache.disk import MAGIC, MAX_FILE_BYTES, STALE_SECONDS, STATS
from careful_engine.core.refcache.recorder import SENTINEL, build_entry
from careful_engine.core.refcache.scope import (
    FORMAT,
    Uncacheable,
    dataset_version,
    depends_on_process,
    enabled,
    guardable,
    process_classes,
    replay_code_hash,
    usable_for,
)
from careful_engine.core.refcache.sides import (
    CachedSide,
    Diverged,
    LoadedSide,
    RecordingSide,
    reference_side,
)
from careful_engine.core.refcache.store import clear_memory, describe, flush, preload, warm
from careful_engine.core.user_cache import cache_root  # where describe() says the cache lives

__all__ = [
    "FORMAT", "MAGIC", "MAX_FILE_BYTES", "SENTINEL", "STALE_SECONDS", "STATS", "CachedSide",
    "Diverged", "LoadedSide", "RecordingSide", "Uncacheable", "build_entry", "cache_root",
    "clear_memory", "dataset_version", "depends_on_process", "describe", "enabled",
    "flush", "guardable", "preload", "process_classes", "reference_side", "replay_code_hash",
    "usable_for", "warm",
]
