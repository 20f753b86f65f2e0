"""Snapshots of simulator instances as plain data, and diffs between snapshots.

A snapshot holds every attribute of an instance, public and private, minus the four artefacts
the paper excludes: random generators (``_random``), wall-clock stamps (``_last_modified`` of
files and directories), the description string (``_api_description``) and TravelAPI's
flight-cost quote memo (``_flight_cost_lookup``). The file system's tree becomes nested dicts
(a directory's parent link is dropped; the private working directory becomes its path).
"""

from __future__ import annotations

from collections.abc import Iterator
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


def snapshot_instance(instance: Any) -> dict[str, Any]:
    """All attributes of one instance, artefacts excluded, as plain data."""
    out: dict[str, Any] = {}
    for key, value in vars(instance).items():
        if key in ARTEFACTS:
            continue
        if key == "_current_dir" and type(value).__name__ == "Directory":
            out[key] = _file_system_path(value)
        else:
            out[key] = _plain(value)
    return out


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


def diff(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """Leaf-level changes between two state snapshots (class name -> attributes)."""
    return list(_diff(before, after, ()))
