"""Inference: from distinct observations to one declaration per function (§4).

* success: :func:`careful_engine.core.environment.call_succeeded` (no raise, no error field, no
  false status flag);
* kind: ``write`` if any successful call changed the state, hidden state included, else
  ``read`` (a function with no successful call at all is a read on failing evidence);
* hidden-only: a write none of whose successful calls changed public state (what bfcl
  compares);
* idempotent (writes only): every successful state-changing call, applied once more to the
  state it produced, changed nothing; the evidence is kept per call;
* footprint: the paths its successful calls changed, generalised (see :func:`generalise`);
* signals: how many successful calls raised each consequence signal (:mod:`.signals`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.state import Change
from careful_engine.effects import signals as sig
from careful_engine.effects.observe import SOURCES, Observation

MAX_IDEMPOTENCE_CALLS = 8
MAX_EXAMPLE_CHANGES = 6
MAX_VALUE_CHARS = 160
MAX_PATH_CHARS = 300  # of a path as shown: its start and end, "…" between
_TREE = "__dir__"
_MARKERS = frozenset({"__dir__", "__file__", "__set__"})
_ID_LIKE = re.compile(r"^[0-9][0-9\- ]*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---------------------------------------------------------------- paths


def is_tree(path: tuple) -> bool:
    """A change inside the file system's directory tree."""
    return len(path) > 2 and path[2] == _TREE


def shape(path: tuple) -> tuple:
    """A change path without snapshot markers; a tree path ends at its attribute plus '/**'."""
    if is_tree(path):
        return (*path[:2], "/**")
    return tuple(k for k in path if k not in _MARKERS)


def generalise(path: tuple, collections: set[tuple]) -> tuple:
    """Entity keys replaced by ``[*]``.

    A key below the attribute is an entity key when it is an integer, a string of digits
    (ids, card numbers), or a key of a dict whose key set some observed call changed (a key
    was added or removed there: bookings, users, tweets...). Other keys are field names.
    """
    out = list(path[:2])
    for key in path[2:]:
        if key == "/**":
            out.append(key)
        elif (isinstance(key, int) or (isinstance(key, str) and _ID_LIKE.match(key))
              or tuple(out) in collections):
            out.append("[*]")
        else:
            out.append(key)
    return tuple(out)


def _ends(text: str, cut: int | None) -> str:
    """``text``, or with ``cut`` where it is longer than twice that, its two ends (``…``
    between): in time bounded by ``cut``, never the text's length."""
    return text if cut is None or len(text) <= 2 * cut else text[:cut] + "…" + text[-cut:]


def _key_pieces(keys: Sequence, cut: int | None = None) -> list[str]:
    """:func:`render_path`'s pieces of ``keys``, each key cut to its ends (:func:`_ends`)."""
    pieces = [".".join(_ends(str(k), cut) for k in keys[:2])]
    for key in keys[2:]:
        if key in ("[*]", "/**"):
            pieces.append(key)
        elif isinstance(key, str) and _IDENT.match(key):
            pieces.append(f".{_ends(key, cut)}")
        elif cut is not None and isinstance(key, str) and len(key) > 2 * cut:
            pieces.append(f"[{json.dumps(key[:cut])[:-1]}…{json.dumps(key[-cut:])[1:]}]")
        else:
            pieces.append(f"[{json.dumps(key)}]")
    return pieces


def render_path(path: tuple) -> str:
    """``Class.attr[*].field``, ``Class.attr/**`` for the tree."""
    return "".join(_key_pieces(path))


def _concrete_pieces(path: tuple, cut: int | None = None) -> list[str]:
    """:func:`concrete_path`'s pieces (``cut``: as :func:`_key_pieces` takes it)."""
    if not is_tree(path):
        return _key_pieces([k for k in path if k != "__set__"], cut)
    pieces = [".".join(_ends(str(k), cut) for k in path[:2]) + ":/"]
    for i, k in enumerate(k for k in path[2:] if k not in _MARKERS):
        pieces += ["/", _ends(str(k), cut)] if i else [_ends(str(k), cut)]
    return pieces


def concrete_path(path: tuple) -> str:
    """A change path as shown in an example: the tree as a file path, other keys as is."""
    return "".join(_concrete_pieces(path))


def short_path(path: tuple, width: int = MAX_PATH_CHARS) -> str:
    """:func:`concrete_path` in at most ``width`` characters, cut in the middle (``…``), in
    time bounded by the path's number of keys and ``width``, never its length (a path 2000
    folders deep of long names, or one key of a million characters, was joined whole for
    every row shown)."""
    half = max(width // 2, 1)
    pieces = _concrete_pieces(path, width)
    if sum(len(p) for p in pieces) <= width:
        return "".join(pieces)
    head, tail = "", ""
    for p in pieces:
        if len(head) >= half:
            break
        head += p
    for p in reversed(pieces):
        if len(tail) >= half:
            break
        tail = p + tail
    keep = width - 1 - half
    return head[:keep] + "…" + tail[-half:]


def render_value(value: Any) -> str:
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # mixed or non-JSON keys: keep the (deterministic) order
        try:
            text = json.dumps(value, ensure_ascii=False, default=repr)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return text


def render_changes(changes: Sequence[Change], limit: int = MAX_EXAMPLE_CHANGES,
                   hidden: bool = False) -> list[dict]:
    """State changes as text rows (path, kind, before, after); ``hidden`` also marks changes
    to private state. Past ``limit`` a last row says how many more there are."""
    out = []
    for c in changes[:limit]:
        item: dict = {"path": short_path(c.path), "kind": c.kind}
        if hidden:
            item["hidden"] = c.hidden
        if c.kind != "added":
            item["before"] = render_value(c.before)
        if c.kind != "removed":
            item["after"] = render_value(c.after)
        out.append(item)
    if len(changes) > limit:
        out.append({"path": f"... {len(changes) - limit} more", "kind": "more"})
    return out


def example(obs: Observation, changes: list[Change] | None = None) -> dict[str, Any]:
    return {
        "source": obs.source,
        "where": obs.where,
        "call": obs.call,
        "success": obs.success,
        "changes": render_changes(obs.changes if changes is None else changes),
    }


# ---------------------------------------------------------------- evidence


@dataclass
class FunctionEvidence:
    """What the distinct observations of one function showed."""

    name: str
    class_name: str
    counts: dict[str, Counter] = field(default_factory=lambda: {s: Counter() for s in SOURCES})
    paths: set[tuple] = field(default_factory=set)  # shapes of successful changes
    public_calls: int = 0  # successful calls that changed public state
    hidden_only_calls: int = 0  # successful calls that changed private state only
    signal_counts: Counter = field(default_factory=Counter)
    repeats: dict[str, list[int]] = field(default_factory=dict)  # call -> [checks, changed]
    examples: list[dict] = field(default_factory=list)
    example_keys: set[tuple] = field(default_factory=set)
    counterexample: dict | None = None
    first_call: dict | None = None

    @property
    def total(self) -> Counter:
        out: Counter = Counter()
        for c in self.counts.values():
            out.update(c)
        return out

    @property
    def is_write(self) -> bool:
        return self.public_calls + self.hidden_only_calls > 0

    @property
    def hidden_only(self) -> bool:
        return self.is_write and self.public_calls == 0

    @property
    def idempotent(self) -> bool | None:
        if not self.is_write:
            return None
        return all(changed == 0 for _, changed in self.repeats.values())


class Evidence:
    """Per-function evidence, fed one observation at a time."""

    def __init__(self) -> None:
        classes = bfcl.function_class()
        self.functions = {n: FunctionEvidence(n, c) for n, c in classes.items()}
        self.added_or_removed: set[tuple] = set()  # shapes of added / removed keys

    def add(self, obs: Observation) -> None:
        fe = self.functions[obs.function]
        counts = fe.counts[obs.source]
        counts["calls"] += 1
        counts["successful"] += obs.success
        if fe.first_call is None or (obs.success and not fe.first_call["success"]):
            fe.first_call = example(obs, [])
        if not obs.changes:
            return
        if not obs.success:
            counts["failed_changing"] += 1
            return
        counts["changing"] += 1
        public = [c for c in obs.changes if not c.hidden]
        if public:
            fe.public_calls += 1
        else:
            fe.hidden_only_calls += 1
        for c in obs.changes:
            s = shape(c.path)
            fe.paths.add(s)
            if c.kind in ("added", "removed") and not is_tree(c.path):
                self.added_or_removed.add(s)
        raised = sig.detect(obs.changes, obs.state_after)
        for name in raised:
            fe.signal_counts[name] += 1
        checks = fe.repeats.setdefault(obs.call, [0, 0])
        checks[0] += 1
        if obs.repeat_changes:
            checks[1] += 1
            if fe.counterexample is None:
                fe.counterexample = example(obs, obs.repeat_changes)
        key = (frozenset(shape(c.path) for c in obs.changes), frozenset(raised))
        if len(fe.examples) < 2 and key not in fe.example_keys:
            fe.example_keys.add(key)
            fe.examples.append(example(obs))

    def collections(self) -> set[tuple]:
        """Generalised dict paths whose key set some observed call changed."""
        found: set[tuple] = set()
        while True:
            new = {generalise(p[:-1], found) for p in self.added_or_removed}
            if new <= found:
                return found
            found |= new


def footprint(fe: FunctionEvidence, collections: set[tuple]) -> list[str]:
    return sorted({render_path(generalise(p, collections)) for p in fe.paths})


def idempotence_calls(fe: FunctionEvidence) -> list[dict[str, Any]]:
    """Per-call evidence: calls whose repeat changed the state first, then the most checked."""
    items = sorted(fe.repeats.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))
    return [{"call": call, "checks": n, "repeat_changed": changed}
            for call, (n, changed) in items[:MAX_IDEMPOTENCE_CALLS]]


def declaration(fe: FunctionEvidence, collections: set[tuple], cyclic: int = 0
                ) -> dict[str, Any]:
    """The effects.json entry of one function."""
    total = fe.total
    signal_counts = {name: fe.signal_counts[name] for name in sig.SIGNALS}
    raised = [name for name in sig.SIGNALS if signal_counts[name]]
    checks = sum(n for n, _ in fe.repeats.values())
    changed = sum(c for _, c in fe.repeats.values())
    evidence = {
        "calls": total["calls"],
        "successful": total["successful"],
        "failed": total["calls"] - total["successful"],
        "changing": total["changing"],
        "failed_changing": total["failed_changing"],
        "hidden_only_calls": fe.hidden_only_calls,
        "by_source": {
            s: {k: fe.counts[s][k] for k in ("calls", "successful", "changing")}
            for s in SOURCES
        },
        "repeat_checks": checks,
        "repeat_changed": changed,
        "cyclic_state_calls": cyclic,
    }
    if fe.is_write:
        examples = fe.examples
    else:
        examples = [fe.first_call] if fe.first_call else []
    note = None
    if not total["successful"]:
        note = (f"no successful call in {total['calls']} observation(s): a read on failing "
                "evidence" if total["calls"] else "never observed")
    return {
        "class": fe.class_name,
        "kind": "write" if fe.is_write else "read",
        "hidden_only": fe.hidden_only,
        "idempotent": fe.idempotent,
        "footprint": footprint(fe, collections),
        "signals": raised,
        "signal_counts": signal_counts,
        "proposed": bool(raised),
        "evidence": evidence,
        "idempotence_evidence": idempotence_calls(fe) if fe.is_write else [],
        "idempotence_counterexample": fe.counterexample,
        "example": examples[0] if examples else None,
        "example_2": examples[1] if len(examples) > 1 else None,
        "note": note,
    }


def declarations(evidence: Evidence, cyclic: Counter | None = None
                 ) -> dict[str, dict[str, Any]]:
    """All declarations; ``cyclic`` counts calls whose resulting state contains itself (a
    directory copied into itself), which cannot be diffed and are left out of the evidence."""
    collections = evidence.collections()
    cyclic = cyclic or Counter()
    return {name: declaration(fe, collections, cyclic[name])
            for name, fe in sorted(evidence.functions.items())}
