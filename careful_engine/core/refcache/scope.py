"""Whether the reference cache is on, the versions its entries are keyed by, and which
references it holds.

When a reference is NOT taken from the cache (replayed live instead, as before):

* its classes hold the long-context data of ``TravelAPI`` and ``VehicleControlAPI`` (in long
  context), which loading reads and merges by reference: see :func:`guardable`;
* bfcl's rewrite put the instance name, which holds the model name, into an argument (a method
  name followed by ``(`` inside a string literal): an entry in which the recording model's
  instance names show anywhere is marked not cacheable (any other model would see its own
  name there); the cache is used only for model names that give plain identifiers;
* the conversation is not the installed dataset's own object (a variant built by a probe or a
  test under a dataset id is replayed live and never recorded);
* the replay is not the default one (no snapshots, tree or argument limits other than the
  default budget's), or building it exceeded the budget or met something the format cannot
  hold.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from careful_engine.core import bfcl, environment
from careful_engine.core.budget import DEFAULT_BUDGET, Budget

FORMAT = 2  # 2: a recorded entry is kept as its marshal bytes and its templates
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Uncacheable(Exception):
    """A reference this cache does not hold (it is replayed live)."""


# ---------------------------------------------------------------- on, and versions
def enabled() -> bool:
    return os.environ.get("CAREFUL_REFCACHE", "on").strip().lower() not in ("off", "0", "no",
                                                                            "false")


_ENGINE: list[str] = []
_CORE = Path(__file__).resolve().parent.parent  # careful_engine/core, the replay core


def _engine_files() -> list[Path]:
    """The engine modules whose code decides a reference's replay or this cache's format: every
    module of the replay core (this package's own included), in a fixed order."""
    return sorted(_CORE.rglob("*.py"))


def replay_code_hash() -> str:
    """A hash of the engine's replay code, bfcl-eval's simulators and the marshal format."""
    if not _ENGINE:
        h = hashlib.sha256(f"{FORMAT}|{bfcl.BFCL_VERSION}|{sys.version_info[:2]}|"
                           f"{marshal.version}".encode())
        for path in _engine_files():
            h.update(path.relative_to(_CORE).as_posix().encode() + b"\0" + path.read_bytes())
        sims = sorted(Path(bfcl.PACKAGE_DIR, "eval_checker", "multi_turn_eval",
                           "func_source_code").glob("*.py"))
        for path in sims:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        _ENGINE.append(h.hexdigest()[:24])
    return _ENGINE[0]


_DATASETS: dict[str, str] = {}


def dataset_version(category: str) -> str:
    """A hash of the category's prompts and reference answers as installed."""
    if category not in _DATASETS:
        h = hashlib.sha256()
        for folder in (bfcl.DATA_DIR, bfcl.ANSWER_DIR):
            h.update((folder / f"BFCL_v4_{category}.json").read_bytes())
        _DATASETS[category] = h.hexdigest()[:24]
    return _DATASETS[category]


# ---------------------------------------------------------------- which references
def _process_bound() -> tuple[frozenset[str], frozenset[str]]:
    """(classes whose shared state always carries over, classes whose shared state carries
    over in long context only: the module-level data of long_context.py)."""
    return environment.process_bound()


def process_classes(conv: bfcl.Conversation) -> tuple[str, ...]:
    """The involved classes whose process-global objects this conversation can reach: those
    with shared mutable defaults always, those with shared module data in long context only
    (bfcl's simulators read and merge that data only when loaded with ``long_context``)."""
    return environment.process_classes(conv.involved_classes, bool(conv.long_context))


def depends_on_process(conv: bfcl.Conversation) -> bool:
    """Whether what the reference computes can depend on what ran before it in the process."""
    return bool(process_classes(conv))


def guardable(conv: bfcl.Conversation) -> bool:
    """Whether ``conv``'s reference depends on the process only through the values of shared
    mutable defaults (``post_tweet``'s lists), which it reads turn by turn: the cache holds
    it with those values at the start and end of every turn (a guarded entry), and uses it
    only while they are the same. Long-context data, which loading reads, is never cached."""
    classes = process_classes(conv)
    return bool(classes) and not (conv.long_context and set(classes) & _process_bound()[1])


_PLAIN_NAMES: dict[tuple[str, str, str], bool] = {}
_DEFAULT_LIMITS: dict[Budget, bool] = {}


def usable_for(conv: bfcl.Conversation, model_name: str, snapshots: bool,
               budget: Budget | None, process_bound: bool = False) -> bool:
    """Whether the cache holds ``conv``'s reference for this replay (``process_bound``: the
    same, except for the classes that reach bfcl's process-global objects)."""
    if not snapshots or (depends_on_process(conv) and not process_bound):
        return False
    if bfcl.conversation_index().get(conv.id) is not conv:
        return False  # not the dataset's own conversation (a probe, a test's variant): live
    key = (model_name, conv.id, conv.involved_classes[0] if conv.involved_classes else "X")
    plain = _PLAIN_NAMES.get(key)
    if plain is None:
        plain = bool(_IDENTIFIER.fullmatch(bfcl.instance_name(f"{model_name}_ground_truth_eval",
                                                              key[1], key[2])))
        if len(_PLAIN_NAMES) < 100_000:
            _PLAIN_NAMES[key] = plain
    if not plain:
        return False
    if budget is not None:
        default = _DEFAULT_LIMITS.get(budget)
        if default is None:
            default = replace(budget, seconds=DEFAULT_BUDGET.seconds,
                              megabytes=DEFAULT_BUDGET.megabytes) == DEFAULT_BUDGET
            if len(_DEFAULT_LIMITS) < 1_000:
                _DEFAULT_LIMITS[budget] = default
        if not default:
            return False
    return True
