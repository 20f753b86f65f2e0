"""A cache entry decoded: its states, call records and end states as a live replay makes
them, the stand-ins bfcl's state check reads, its guards and its instance templates, all
checked (a malformed entry raises ValueError, KeyError, IndexError, TypeError or EOFError)."""

from __future__ import annotations

import marshal
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from careful_engine.core import bfcl, calls, process
from careful_engine.core.calls import Call, ParseFailure
from careful_engine.core.fs_capture import MISSING, TreeLog, TreeVersion
from careful_engine.core.state import State
from careful_engine.core.trajectory import CallRecord


def _untree(flat: list) -> Any:
    """bfcl Directory and File objects from :func:`.recorder._tree` (nothing but name, parent and
    contents, which is what their ``==`` and the verdict's details read)."""
    module = sys.modules[bfcl.simulator_class("GorillaFileSystem").__module__]
    dcls, fcls = module.Directory, module.File

    def directory(name: str, parent: Any) -> Any:
        d = dcls.__new__(dcls)
        d.name, d.parent, d.contents = name, parent, {}
        return d

    root = directory(flat[0], None)
    stack = [root]
    for item in flat[1:]:
        depth, key = item[0], item[1]
        del stack[depth + 1:]
        parent = stack[depth]
        if item[2] == 0:
            sub = directory(item[3], parent)
            parent.contents[key] = sub
            stack.append(sub)
        else:
            f = fcls.__new__(fcls)
            f.name, f.content = item[3], item[4]
            parent.contents[key] = f
    return root


def _view_from_capture(blob: bytes) -> list:
    attrs = marshal.loads(blob[1:])
    return [(k, 0, v) for k, v in attrs.items() if not k.startswith("_")]


def _decode_logs(encoded: list) -> list[TreeLog]:
    logs = []
    for base, groups, *salt in encoded:  # the salt of the recording process's keys
        log = TreeLog(base, salt[0] if len(salt) == 1 and type(salt[0]) is int else None)
        log.groups = [tuple((tuple(names), MISSING if gone else old, MISSING if absent else new)
                            for names, gone, old, absent, new in group) for group in groups]
        logs.append(log)
    return logs


class _View:
    """Stands for a reference instance in bfcl's state check: its public attributes."""

    def __init__(self, attrs: list | None, end: bytes | TreeVersion) -> None:
        for attr, kind, value in attrs if attrs is not None else _view_from_capture(end):
            setattr(self, attr, _untree(value) if kind == 1 else value)


class _Env:
    """What replay reads of a side's environment: its state, and (lazily, for bfcl's state
    check) its instances at the end of the last turn run."""

    __slots__ = ("state", "_decoded", "_turn")

    def __init__(self, decoded: _Decoded) -> None:
        self.state = decoded.initial
        self._decoded = decoded
        self._turn = -1

    @property
    def instances(self) -> dict[str, Any]:
        return self._decoded.instances(self._turn)


@dataclass
class _Decoded:
    states: list[State]
    initial: State
    turns: list[list[tuple]]
    ends: list[State]
    views: list[list]
    templates: dict[str, tuple]  # class -> (marshal blob, random state): see _templates
    # a guarded entry's classes, and the shared values before and after each turn
    guards: tuple[tuple[str, ...], list[tuple[bytes, bytes]]] | None = None
    built: dict[int, dict[str, Any]] = field(default_factory=dict)
    made: dict[int, list[CallRecord]] = field(default_factory=dict)  # records of step -1
    parsed: dict[str, Call] | None = None  # text -> call, those parse_call may hand out

    def reusable_calls(self) -> dict[str, Call]:
        """The reference's calls that :func:`calls.reusable` accepts, by text (the model
        side's identical call strings need not be parsed again)."""
        got = self.parsed
        if got is None:
            got = self.parsed = {rec[2].text: rec[2] for turn in self.turns for rec in turn
                                 if calls.reusable(rec[2]) and rec[2].text == rec[1]}
        return got

    def records(self, turn: int, step: int) -> list[CallRecord]:
        """The call records of ``turn`` placed at ``step`` (those of the replay's step -1 made
        once: nothing changes a record)."""
        got = self.made.get(turn) if step == -1 else None
        if got is None:
            got = [CallRecord(t, step, text, call, result, success, class_name, before, after)
                   for t, text, call, result, success, class_name, before, after
                   in self.turns[turn]]
            if step == -1:
                self.made[turn] = got
        return got

    def instances(self, turn: int) -> dict[str, Any]:
        """The stand-ins for the reference instances after ``turn`` (built once: bfcl's
        state check only reads them)."""
        got = self.built.get(turn)
        if got is None:
            end = self.ends[turn]
            got = self.built[turn] = {c: _View(attrs, end.blob(c))
                                      for c, attrs in self.views[turn]}
        return got


def _decode(entry: dict) -> _Decoded:
    if "data" in entry:  # as written (see disk._write): the marshal bytes of the rest
        body = marshal.loads(entry["data"])
        if type(body) is not dict:
            raise ValueError("not an entry")
        body["templates"] = entry.get("templates", {})
        entry = body
    logs = _decode_logs(entry["logs"])
    states = []
    for blobs in entry["states"]:
        states.append(State({c: TreeVersion(logs[b[1]], b[2], b[3], b[4]) if type(b) is tuple
                             else b for c, b in blobs.items()}))
    turns = []
    for t, turn in enumerate(entry["turns"]):
        recs = []
        for text, enc, result, success, class_name, b, a in turn:
            if enc[0] == "f":
                call: Call | ParseFailure = ParseFailure(enc[1], enc[2], enc[3])
            else:
                call = Call(name=enc[1], args=enc[2], kwargs=enc[3], text=enc[4])
            recs.append((t, text, call, result, success, class_name, states[b], states[a]))
        turns.append(recs)
    return _Decoded(states, states[entry["initial"]], turns, [states[i] for i in entry["ends"]],
                    entry["views"], _templates(entry.get("templates", {})),
                    _guards(entry.get("guards"), len(turns)))


def _guards(encoded: Any, n_turns: int) -> tuple[tuple[str, ...], list[tuple[bytes, bytes]]] | None:
    """A guarded entry's classes and values, checked (ValueError when malformed)."""
    if encoded is None:
        return None
    classes, turns = tuple(encoded["classes"]), encoded["turns"]
    if not classes or any(c not in process.shared_classes() for c in classes) \
            or type(turns) is not list or len(turns) != n_turns:
        raise ValueError("bad guards")
    out = []
    for pair in turns:
        before, after = pair
        if type(before) is not bytes or type(after) is not bytes:
            raise ValueError("bad guards")
        process.fitting_values(classes, before)
        process.fitting_values(classes, after)
        out.append((before, after))
    return classes, out


def _templates(encoded: dict) -> dict[str, tuple]:
    """The entry's instance templates, checked (ValueError / TypeError when malformed): each
    blob holds a dict of attributes and each random state is one ``Random`` accepts."""
    out = {}
    for c, (blob, rng_state) in encoded.items():
        if c not in bfcl.function_class().values() or type(blob) is not bytes \
                or type(marshal.loads(blob)) is not dict:
            raise ValueError("bad template")
        if rng_state is not None:
            random.Random().setstate(rng_state)
        out[c] = (blob, rng_state)
    return out
