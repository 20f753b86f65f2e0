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
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from careful_engine.core.budget import DEFAULT_BUDGET
from careful_engine.core.fs_capture import MISSING, TreeVersion, cwd_path

ARTEFACTS = frozenset({"_random", "_api_description", "_flight_cost_lookup", "_last_modified"})

_ARTEFACT_LIST = tuple(ARTEFACTS)
_PLAIN = (str, int, float, bool, type(None))
_PLAIN_TYPES = frozenset(_PLAIN)


def _file_system_path(directory: Any) -> str:
    return cwd_path(directory)


def _build(kind: str, keys: Any, kids: list) -> Any:
    if kind == "dict":
        return dict(zip(keys, kids, strict=True))
    if kind == "list":
        return kids
    if kind == "tuple":
        return tuple(kids)
    if kind == "set":
        return {"__set__": sorted(kids, key=repr)}
    if kind == "dir":
        return {"__dir__": dict(zip(keys, kids, strict=True))}
    name, keys = keys
    return {"__object__": name, **dict(zip(keys, kids, strict=True))}


def _plain_fast(value: Any) -> Any:
    """:func:`to_plain` by recursion: faster on the shallow states simulators hold."""
    t = type(value)
    if t in _PLAIN_TYPES:
        return value
    # (scalars are taken as they are without a call: most leaves are scalars)
    if t is dict:
        return {k: v if type(v) in _PLAIN_TYPES else _plain_fast(v) for k, v in value.items()}
    if t is list:
        return [v if type(v) in _PLAIN_TYPES else _plain_fast(v) for v in value]
    if t is tuple:
        return tuple([v if type(v) in _PLAIN_TYPES else _plain_fast(v) for v in value])
    if t is set or t is frozenset:
        return {"__set__": sorted((_plain_fast(v) for v in value), key=repr)}
    name = t.__name__
    if name == "Directory":
        raise RecursionError  # trees go the iterative way (any depth, bounded size)
    if name == "File":
        return {"__file__": value.content}
    if hasattr(value, "__dict__"):
        return {"__object__": name,
                **{k: _plain_fast(v) for k, v in vars(value).items() if k not in ARTEFACTS}}
    return repr(value)


def to_plain(value: Any, limit: int | None = None) -> Any:
    """Convert a simulator value to plain, comparable data (dict, list, tuple, scalars).

    Iterative (any depth); with ``limit``, raises :class:`TooLarge` past that many containers
    (a structure that contains itself never ends). Values without a file-system tree in them
    take a recursive fast path first.
    """
    try:
        return _plain_fast(value)
    except RecursionError:
        pass
    if limit is None:  # a structure that contains itself ends here, as recursion would
        limit = 10 * DEFAULT_BUDGET.max_tree_entries
    results: list = []
    work: list = [(value, None)]
    n = 0
    while work:
        v, build = work.pop()
        if build is not None:
            kind, keys, k = build
            kids = results[len(results) - k:] if k else []
            if k:
                del results[len(results) - k:]
            results.append(_build(kind, keys, kids))
            continue
        t = type(v)
        if t in _PLAIN:
            results.append(v)
            continue
        n += 1
        if limit is not None and n > limit:
            raise TooLarge(f"more than {limit:,} containers")
        name = t.__name__
        keys: Any = None
        if t is dict:
            kind, keys, vals = "dict", list(v), list(v.values())
        elif t is list:
            kind, vals = "list", list(v)
        elif t is tuple:
            kind, vals = "tuple", list(v)
        elif t is set or t is frozenset:
            kind, vals = "set", list(v)
        elif name == "Directory":
            kind, keys, vals = "dir", list(v.contents), list(v.contents.values())
        elif name == "File":
            results.append({"__file__": v.content})
            continue
        elif hasattr(v, "__dict__"):
            items = [(k, x) for k, x in vars(v).items() if k not in ARTEFACTS]
            kind, keys, vals = "object", (name, [k for k, _ in items]), [x for _, x in items]
        else:
            results.append(repr(v))
            continue
        work.append((None, (kind, keys, len(vals))))
        work.extend((x, None) for x in reversed(vals))
    return results[0]


class TooLarge(RecursionError):
    """A value too large (or cyclic) to convert to plain data within a limit."""


def _plain_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if key in ARTEFACTS:
            continue
        if type(value) in _PLAIN_TYPES:
            out[key] = value
        elif key == "_current_dir" and type(value).__name__ == "Directory":
            out[key] = _file_system_path(value)
        else:
            out[key] = to_plain(value)
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


def _preorder(directory: Any, limit: int) -> list:
    """A file-system directory as a flat pre-order list (iterative, any depth):
    ``(depth, name, 0)`` for a directory, ``(depth, name, 1, content)`` for a file.

    Raises ValueError past ``limit`` entries or the default depth limit (a directory copied
    into itself never ends), AttributeError for an entry that is neither."""
    out: list = []
    stack = [(iter(directory.contents.items()), 0)]
    while stack:
        it, depth = stack[-1]
        for k, v in it:
            if type(v).__name__ == "Directory":
                out.append((depth, k, 0))
                if len(out) > limit or depth >= DEFAULT_BUDGET.max_tree_depth:
                    raise ValueError("tree too large")
                stack.append((iter(v.contents.items()), depth + 1))
                break
            out.append((depth, k, 1, v.content))
        else:
            stack.pop()
        if len(out) > limit:
            raise ValueError("tree too large")
    return out


def _untree(flat: list) -> dict:
    top: dict = {}
    stack = [top]  # stack[d]: the contents dict of the directory at depth d
    for item in flat:
        depth, name = item[0], item[1]
        del stack[depth + 1:]
        if item[2] == 0:
            sub: dict = {}
            stack[depth][name] = {"__dir__": sub}
            stack.append(sub)
        else:
            stack[depth][name] = {"__file__": item[3]}
    return {"__dir__": top}


def may_hold_nan(blob: bytes) -> bool:
    """Whether marshal data may hold a NaN float: a binary double (little-endian) whose
    exponent is all ones ends in a byte 0xf0-0xff then 0x7f or 0xff (infinities too)."""
    for byte in (0x7F, 0xFF):
        i = blob.find(byte, 1)
        while i != -1:
            if blob[i - 1] >= 0xF0:
                return True
            i = blob.find(byte, i + 1)
    return False


_NAN_FREE: dict[bytes, bool] = {}  # capture -> not may_hold_nan (captures recur unchanged)


def nan_free(blob: bytes) -> bool:
    """``not may_hold_nan(blob)``, remembered for the captures seen last (a capture left
    unchanged by a call is the same object, checked again at every turn's end)."""
    got = _NAN_FREE.get(blob)
    if got is None:
        if len(_NAN_FREE) >= 4096:
            _NAN_FREE.clear()
        got = _NAN_FREE[blob] = not may_hold_nan(blob)
    return got


def comparable(blob: Any) -> bool:
    """Whether ``blob`` is a marshal capture holding no NaN: two such captures are equal bytes
    exactly when their values are equal (bfcl's simulators hold only built-in values; a NaN is
    unequal to itself)."""
    return type(blob) is bytes and blob[:1] == b"m" and nan_free(blob)


def capture(instance: Any) -> bytes:
    """A compact copy of an instance's state (artefacts excluded), taken at C speed.

    Equal bytes imply equal state; the plain form is built from the bytes only when asked.
    Plain data goes through marshal; the file system's tree as a flat pre-order list
    (``t``); anything else through pickle with plain forms for files and directories
    (``p``); what none of them can hold is kept as its reason (``x``).
    """
    attrs = vars(instance).copy()  # the artefacts left out, the order kept
    for k in _ARTEFACT_LIST:
        if k in attrs:
            del attrs[k]
    name = type(instance).__name__
    if name not in _PICKLED:
        try:
            blob = marshal.dumps(attrs, 2)
        except ValueError:
            _PICKLED.add(name)
        else:
            if not may_hold_nan(blob):
                return b"m" + blob
            # version 4 as it always was (its back-references follow reference counts)
            return b"m" + marshal.dumps(attrs)
    current = attrs.get("_current_dir")
    if current is not None and type(current).__name__ == "Directory":
        attrs["_current_dir"] = _file_system_path(current)
    trees = {k: v for k, v in attrs.items() if type(v).__name__ == "Directory"}
    if trees:
        try:
            plain = {k: v for k, v in attrs.items() if k not in trees}
            return b"t" + marshal.dumps((plain, {k: _preorder(v, DEFAULT_BUDGET.max_tree_entries)
                                                 for k, v in trees.items()}))
        except (ValueError, AttributeError):
            pass  # a tree that contains itself (cp of a directory into itself): pickle copes
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _reducers_for(instance)
    try:
        pickler.dump(attrs)
    except (RecursionError, ValueError, pickle.PicklingError) as e:
        return b"x" + marshal.dumps(f"state not representable: {type(e).__name__}")
    return b"p" + buffer.getvalue()


def materialise(blob: bytes | TreeVersion) -> dict[str, Any]:
    """The plain snapshot held by a :func:`capture` blob (or a file-system version)."""
    if type(blob) is TreeVersion:
        return blob.materialise()
    kind = blob[:1]
    if kind == b"t":
        attrs, trees = marshal.loads(blob[1:])
        out = _plain_attributes(attrs)
        out.update({k: _untree(t) for k, t in trees.items()})
        return out
    if kind == b"x":
        return {"__unrepresentable__": marshal.loads(blob[1:])}
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

    def replace(self, class_name: str, blob: bytes | TreeVersion) -> State:
        current = self._blobs.get(class_name)
        if current is blob or (type(blob) is bytes and current == blob):
            return self
        blobs = dict(self._blobs)
        blobs[class_name] = blob
        cache = self._cache
        if cache:
            cache = {k: v for k, v in cache.items() if k != class_name}
        return State(blobs, cache if cache else {})

    def __getitem__(self, class_name: str) -> dict[str, Any]:
        plain = self._cache.get(class_name)
        if plain is None:
            plain = self._cache[class_name] = materialise(self._blobs[class_name])
        return plain

    def __contains__(self, class_name: object) -> bool:
        """Whether the state holds ``class_name`` (Mapping's own would materialise it)."""
        return class_name in self._blobs

    def __iter__(self) -> Iterator[str]:
        return iter(self._blobs)

    def __len__(self) -> int:
        return len(self._blobs)

    def blob(self, class_name: str) -> bytes | TreeVersion:
        """The capture of one class: bytes, or a file-system version (hashable; equal
        captures imply equal state)."""
        return self._blobs[class_name]

    def same_as(self, other: State, class_name: str) -> bool:
        a, b = self._blobs.get(class_name), other._blobs.get(class_name)
        if a is b:
            return True
        if a is None or b is None:
            return False
        if type(a) is TreeVersion and type(b) is TreeVersion:
            return a.same(b)
        return a == b or self[class_name] == other[class_name]

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
    """Leaf-level changes from ``a`` to ``b``, in key order (iterative: any depth)."""
    stack: list = [(a, b, path)]
    while stack:
        a, b, path = stack.pop()
        if type(a) is _Emit:
            yield from a.changes
            continue
        if a is b:
            continue
        if type(a) is dict and type(b) is dict:
            tasks: list = []
            for k in a:
                if k not in b:
                    tasks.append((_Emit([Change(path + (k,), "removed", a[k], None)]), None, ()))
                elif a[k] is not b[k] and a[k] != b[k]:
                    tasks.append((a[k], b[k], path + (k,)))
            added = [Change(path + (k,), "added", None, b[k]) for k in b if k not in a]
            if added:
                tasks.append((_Emit(added), None, ()))
            stack.extend(reversed(tasks))
            continue
        if a != b:
            yield Change(path, "changed", a, b)


class _Emit:
    """Changes to yield once the nested ones before them are done (keeps recursive order)."""

    __slots__ = ("changes",)

    def __init__(self, changes: list[Change]) -> None:
        self.changes = changes


def _class_diff(before: State, after: State, c: str) -> list[Change]:
    a, b = before._blobs.get(c), after._blobs.get(c)
    if type(a) is TreeVersion and type(b) is TreeVersion:
        entries = b.changes_since(a)
        if entries is not None:  # consecutive versions: the call's own changes, no walk
            out: list[Change] = []
            for path, old, new in entries:
                full = (c, *path)
                if old is MISSING:
                    out.append(Change(full, "added", None, new))
                elif new is MISSING:
                    out.append(Change(full, "removed", old, None))
                else:
                    out.extend(_diff(old, new, full))
            return out
    return list(_diff({c: before[c]} if c in before else {},
                      {c: after[c]} if c in after else {}, ()))


def diff(before: Mapping[str, Any], after: Mapping[str, Any],
         classes: Collection[str] | None = None) -> list[Change]:
    """Leaf-level changes between two states (class name -> attributes); with ``classes``
    (two States), only the changes of those classes."""
    if isinstance(before, State) and isinstance(after, State):
        changes: list[Change] = []
        for c in before:
            if classes is not None and c not in classes:
                continue
            if c in after and before.same_as(after, c):
                continue
            changes.extend(_class_diff(before, after, c))
        return changes
    return list(_diff(dict(before.items()), dict(after.items()), ()))
