"""Snapshots of simulator instances as plain data, and diffs between snapshots.

A snapshot holds every attribute of an instance, public and private, minus the four artefacts
the paper excludes: random generators (``_random``), wall-clock stamps (``_last_modified`` of
files and directories), the description string (``_api_description``) and TravelAPI's
flight-cost quote memo (``_flight_cost_lookup``). The file system's tree becomes nested dicts
(a directory's parent link is dropped; the private working directory becomes its path).
"""

from __future__ import annotations

import io
import marshal
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

ARTEFACTS = frozenset({"_random", "_api_description", "_flight_cost_lookup", "_last_modified"})

_PLAIN = (str, int, float, bool, type(None))


def _file_system_path(directory: Any) -> str:
    parts = []
    while directory is not None and directory.parent is not None:
        parts.append(directory.name)
        directory = directory.parent
    return "/" + "/".join(reversed(parts))


def _plain(value: Any) -> Any:
    """Convert a simulator value to plain, comparable data (dict, list, tuple, scalars)."""
    t = type(value)
    if t in _PLAIN:
        return value
    if t is dict:
        return {k: _plain(v) for k, v in value.items()}
    if t is list:
        return [_plain(v) for v in value]
    if t is tuple:
        return tuple(_plain(v) for v in value)
    if t is set or t is frozenset:
        return {"__set__": sorted((_plain(v) for v in value), key=repr)}
    name = t.__name__
    if name == "Directory":
        return {"__dir__": {k: _plain(v) for k, v in value.contents.items()}}
    if name == "File":
        return {"__file__": value.content}
    if hasattr(value, "__dict__"):
        return {
            "__object__": name,
            **{k: _plain(v) for k, v in vars(value).items() if k not in ARTEFACTS},
        }
    return repr(value)


def _plain_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if key in ARTEFACTS:
            continue
        if key == "_current_dir" and type(value).__name__ == "Directory":
            out[key] = _file_system_path(value)
        else:
            out[key] = _plain(value)
    return out


def snapshot_instance(instance: Any) -> dict[str, Any]:
    """All attributes of one instance, artefacts excluded, as plain data."""
    return _plain_attributes(vars(instance))


# Classes whose state marshal cannot write (objects such as the file system's tree).
_PICKLED: set[str] = set()
_REDUCERS: dict[type, Any] = {}


def _reducers_for(obj: Any) -> dict[type, Any]:
    """Pickle the file system's File and Directory as their plain forms (no parent links,
    no wall-clock stamps), so the pickled tree unpickles straight into plain data."""
    for value in vars(obj).values():
        t = type(value)
        if t.__name__ == "Directory" and t not in _REDUCERS:
            module = __import__(t.__module__, fromlist=["File"])
            _REDUCERS[t] = lambda d: (dict, ([("__dir__", d.contents)],))
            _REDUCERS[module.File] = lambda f: (dict, ([("__file__", f.content)],))
    return _REDUCERS


def _tree(directory: Any) -> dict:
    """A file-system directory as nested dicts: a directory is a dict, a file its content."""
    return {
        k: (_tree(v) if type(v).__name__ == "Directory" else v.content)
        for k, v in directory.contents.items()
    }


def _untree(tree: dict) -> dict:
    return {"__dir__": {k: (_untree(v) if type(v) is dict else {"__file__": v})
                        for k, v in tree.items()}}


def capture(instance: Any) -> bytes:
    """A compact copy of an instance's state (artefacts excluded), taken at C speed.

    Equal bytes imply equal state; the plain form is built from the bytes only when asked.
    Plain data goes through marshal; the file system's tree as nested dicts (``t``);
    anything else through pickle with plain forms for files and directories (``p``).
    """
    attrs = {k: v for k, v in vars(instance).items() if k not in ARTEFACTS}
    name = type(instance).__name__
    if name not in _PICKLED:
        try:
            return b"m" + marshal.dumps(attrs)
        except ValueError:
            _PICKLED.add(name)
    current = attrs.get("_current_dir")
    if current is not None and type(current).__name__ == "Directory":
        attrs["_current_dir"] = _file_system_path(current)
    trees = {k: v for k, v in attrs.items() if type(v).__name__ == "Directory"}
    if trees:
        try:
            plain = {k: v for k, v in attrs.items() if k not in trees}
            return b"t" + marshal.dumps((plain, {k: _tree(v) for k, v in trees.items()}))
        except (ValueError, AttributeError, RecursionError):
            pass  # a tree that contains itself (cp of a directory into itself): pickle copes
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _reducers_for(instance)
    pickler.dump(attrs)
    return b"p" + buffer.getvalue()


def materialise(blob: bytes) -> dict[str, Any]:
    """The plain snapshot held by a :func:`capture` blob."""
    kind = blob[:1]
    if kind == b"t":
        attrs, trees = marshal.loads(blob[1:])
        out = _plain_attributes(attrs)
        out.update({k: _untree(t) for k, t in trees.items()})
        return out
    attrs = marshal.loads(blob[1:]) if kind == b"m" else pickle.loads(blob[1:])
    return _plain_attributes(attrs)


class State(Mapping):
    """The state of an environment (class name -> plain snapshot), materialised lazily.

    Immutable: an executed call yields a new State sharing every class it did not touch.
    """

    __slots__ = ("_blobs", "_cache")

    def __init__(self, blobs: dict[str, bytes], cache: dict[str, dict] | None = None) -> None:
        self._blobs = blobs
        self._cache = cache if cache is not None else {}

    @classmethod
    def of(cls, instances: Mapping[str, Any]) -> State:
        return cls({name: capture(inst) for name, inst in instances.items()})

    def replace(self, class_name: str, blob: bytes) -> State:
        if self._blobs.get(class_name) == blob:
            return self
        blobs = dict(self._blobs)
        blobs[class_name] = blob
        cache = {k: v for k, v in self._cache.items() if k != class_name}
        return State(blobs, cache)

    def __getitem__(self, class_name: str) -> dict[str, Any]:
        plain = self._cache.get(class_name)
        if plain is None:
            plain = self._cache[class_name] = materialise(self._blobs[class_name])
        return plain

    def __iter__(self) -> Iterator[str]:
        return iter(self._blobs)

    def __len__(self) -> int:
        return len(self._blobs)

    def blob(self, class_name: str) -> bytes:
        """The captured bytes of one class (equal bytes imply equal state)."""
        return self._blobs[class_name]

    def same_as(self, other: State, class_name: str) -> bool:
        a, b = self._blobs.get(class_name), other._blobs.get(class_name)
        return a == b or (a is not None and b is not None and self[class_name] == other[class_name])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, State):
            return self._blobs.keys() == other._blobs.keys() and all(
                self.same_as(other, c) for c in self._blobs)
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def plain(self) -> dict[str, dict[str, Any]]:
        return {c: self[c] for c in self._blobs}


def public_view(snap: dict[str, Any]) -> dict[str, Any]:
    """The part of a snapshot bfcl's state checker compares (no leading underscore)."""
    return {k: v for k, v in snap.items() if not k.startswith("_")}


@dataclass(frozen=True)
class Change:
    """One leaf-level difference: ``path`` is a tuple of keys from the class name down."""

    path: tuple
    kind: str  # "added" | "removed" | "changed"
    before: Any = None
    after: Any = None

    @property
    def hidden(self) -> bool:
        """True when the change is to private state, which bfcl never compares."""
        return len(self.path) > 1 and str(self.path[1]).startswith("_")

    def dotted(self) -> str:
        return ".".join(str(p) for p in self.path)


def _diff(a: Any, b: Any, path: tuple) -> Iterator[Change]:
    if a is b:
        return
    if type(a) is dict and type(b) is dict:
        for k in a:
            if k not in b:
                yield Change(path + (k,), "removed", a[k], None)
            elif a[k] is not b[k] and a[k] != b[k]:
                yield from _diff(a[k], b[k], path + (k,))
        for k in b:
            if k not in a:
                yield Change(path + (k,), "added", None, b[k])
        return
    if a != b:
        yield Change(path, "changed", a, b)


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """Leaf-level changes between two states (class name -> attributes)."""
    if isinstance(before, State) and isinstance(after, State):
        changes: list[Change] = []
        for c in before:
            if c in after and before.same_as(after, c):
                continue
            changes.extend(_diff({c: before[c]} if c in before else {},
                                 {c: after[c]} if c in after else {}, ()))
        return changes
    return list(_diff(dict(before.items()), dict(after.items()), ()))
