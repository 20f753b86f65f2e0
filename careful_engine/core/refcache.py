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

Safety: an entry file is ``MAGIC + HMAC-SHA256(key, MAGIC + payload) + payload``, the key being
32 random bytes made once per install (``refcache/key``, mode 0600, owned by this user). The
MAC is checked before anything is decoded, then the payload's version fields (format, bfcl-eval,
engine, category, dataset); anything else (corrupted, truncated, foreign, planted, another
version) is ignored and rebuilt. The payload is ``marshal`` data, never pickle: marshal builds
only built-in values and runs no code while loading (no constructors, no ``__reduce__``); its
parser is not hardened against crafted bytes, which is why only MAC-checked bytes reach it.
Files are read without following links and written to a fresh temporary file then renamed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import marshal
import os
import random
import re
import secrets
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl, calls, environment, process, safe_write
from careful_engine.core.budget import DEFAULT_BUDGET, Budget, BudgetExceeded, Meter
from careful_engine.core.calls import Call, ParseFailure
from careful_engine.core.environment import Environment
from careful_engine.core.fs_capture import MISSING, TreeLog, TreeVersion
from careful_engine.core.process import BfclProcess
from careful_engine.core.state import State
from careful_engine.core.trajectory import CallRecord, SideTrace
from careful_engine.core.user_cache import cache_dir, cache_root

FORMAT = 2  # 2: a recorded entry is kept as its marshal bytes and its templates
MAGIC = b"CRFREF1\n"
MAX_FILE_BYTES = 512 * 2**20
SENTINEL = "carefulrefsentinel"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# engine modules whose code decides a reference's replay or this cache's format


class Uncacheable(Exception):
    """A reference this cache does not hold (it is replayed live)."""


class Diverged(Exception):
    """bfcl's shared objects hold other values than the recorded reference saw at the start of
    a turn: its outcome may differ, so the conversation is replayed again with it live."""


# ---------------------------------------------------------------- keys and location
def enabled() -> bool:
    return os.environ.get("CAREFUL_REFCACHE", "on").strip().lower() not in ("off", "0", "no",
                                                                            "false")


_ENGINE: list[str] = []


def engine_version() -> str:
    """A hash of the engine's replay code, bfcl-eval's simulators and the marshal format."""
    if not _ENGINE:
        h = hashlib.sha256(f"{FORMAT}|{bfcl.BFCL_VERSION}|{sys.version_info[:2]}|"
                           f"{marshal.version}".encode())
        core = Path(__file__).resolve().parent  # every module of the replay core
        for path in sorted(core.rglob("*.py")):
            h.update(path.relative_to(core).as_posix().encode() + b"\0" + path.read_bytes())
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


# ---------------------------------------------------------------- building an entry
def _tree(directory: Any) -> list:
    """A bfcl Directory as a flat pre-order list (iterative), keys and names kept:
    ``[root name, (depth, key, 0, name) | (depth, key, 1, name, content), ...]``."""
    out: list = [directory.name]
    stack = [(iter(directory.contents.items()), 0)]
    while stack:
        it, depth = stack[-1]
        for key, v in it:
            if type(v).__name__ == "Directory":
                out.append((depth, key, 0, v.name))
                if len(out) > DEFAULT_BUDGET.max_tree_entries:
                    raise Uncacheable("tree too large")
                stack.append((iter(v.contents.items()), depth + 1))
                break
            if type(v).__name__ != "File" or type(v.content) is not str:
                raise Uncacheable("unexpected file-system entry")
            out.append((depth, key, 1, v.name, v.content))
        else:
            stack.pop()
    return out


def _untree(flat: list) -> Any:
    """bfcl Directory and File objects from :func:`_tree` (nothing but name, parent and
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


def _view(instance: Any, end: bytes | TreeVersion, live: bool = False) -> Any:
    """What bfcl's state checker reads of an instance (its public attributes, in ``vars``
    order) at the end of a turn: None where the end-state capture holds them exactly (a
    marshal capture: the same values and types), else a copy of them as of now (always
    for a ``live`` instance: shared objects can change it after its last capture)."""
    if not live and type(end) is bytes and end[:1] == b"m":
        return None
    out = []
    for attr, value in vars(instance).items():
        if attr.startswith("_"):
            continue
        if type(value).__name__ == "Directory":
            out.append((attr, 1, _tree(value)))
        else:
            # a copy as of now (ValueError: not plain data -> uncacheable)
            out.append((attr, 0, marshal.loads(marshal.dumps(value))))
    return out


def _view_from_capture(blob: bytes) -> list:
    attrs = marshal.loads(blob[1:])
    return [(k, 0, v) for k, v in attrs.items() if not k.startswith("_")]


class _Logs:
    """The file-system change logs (careful_engine.core.fs_capture) an entry's states refer to,
    kept as they are, so that a cached state diffs exactly as a live one (the same logs,
    the same order of changes)."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.logs: list[TreeLog] = []

    def blob(self, blob: bytes | TreeVersion) -> Any:
        if type(blob) is TreeVersion:
            n = self.index.get(id(blob.log))
            if n is None:
                n = self.index[id(blob.log)] = len(self.logs)
                self.logs.append(blob.log)
            return ("v", n, blob.index, blob.cwd, blob.key)
        if blob[:1] == b"p":
            raise Uncacheable("state held by pickle")
        return blob

    def encode(self) -> list:
        return [(log.base, [[(names, old is MISSING, None if old is MISSING else old,
                              new is MISSING, None if new is MISSING else new)
                             for names, old, new in group] for group in log.groups], log.salt)
                for log in self.logs]


def _decode_logs(encoded: list) -> list[TreeLog]:
    logs = []
    for base, groups, *salt in encoded:  # the salt of the recording process's keys
        log = TreeLog(base, salt[0] if len(salt) == 1 and type(salt[0]) is int else None)
        log.groups = [tuple((tuple(names), MISSING if gone else old, MISSING if absent else new)
                            for names, gone, old, absent, new in group) for group in groups]
        logs.append(log)
    return logs


def _call(call: Call | ParseFailure) -> tuple:
    if isinstance(call, ParseFailure):
        return ("f", call.text, call.reason, call.name)
    kwargs = call.kwargs  # a dict as it is: nothing changes a call's kwargs (a method gets
    return ("c", call.name, call.args,  # its own copy)
            kwargs if type(kwargs) is dict else dict(kwargs), call.text)


class _Recorder:
    """Records a reference side turn by turn as it runs, and encodes it when the entry is
    asked for (states shared by identity, as the live side shares them; file-system logs
    kept whole). What a turn leaves is kept as it is: its records and end state never
    change, and only what bfcl's state check reads of instances that no capture holds is
    copied then. Encoding many entries at once, when the cache is written, costs a third of
    encoding each between the replays' calls."""

    def __init__(self, initial: State, templates: dict[str, tuple] | None = None,
                 guarded: tuple[str, ...] = ()) -> None:
        self.templates = templates or {}  # the plain-data templates of the loaded instances
        # the classes whose shared objects' values are recorded around every turn (a guarded
        # entry: see guardable), and those values: [before, after] per turn
        self.guarded = guarded
        self.guards: list[list[bytes]] = []
        self._before: bytes | None = None
        self.states: list[dict] = []
        self.logs = _Logs()
        self._index: dict[int, int] = {}
        self._keep: list[State] = []  # keeps ids unique while the entry is built
        self._initial = initial
        self.initial = -1
        self.raw: list[tuple[list[CallRecord], State]] = []  # per turn, until encoded
        self.turns: list[list] = []
        self.ends: list[int] = []
        self.views: list[list] = []
        self._viewed: dict[str, tuple] = {}  # class -> (capture, view) at the last turn's end
        self.data: bytes | None = None  # the finished entry's marshal bytes (no templates)

    def _id(self, state: State) -> int:
        n = self._index.get(id(state))
        if n is None:
            n = self._index[id(state)] = len(self.states)
            self._keep.append(state)
            blobs = encoded = state._blobs  # bytes as they are (the usual case: the dict is
            for c, blob in blobs.items():  # shared, as a State never changes its own)
                if type(blob) is not bytes or blob[:1] == b"p":
                    if encoded is blobs:
                        encoded = dict(blobs)
                    encoded[c] = self.logs.blob(blob)
            self.states.append(encoded)
        return n

    def begin(self) -> None:
        """Before a turn runs: a guarded entry's shared values it starts from (ValueError
        where they are not what a guard can hold)."""
        if self.guarded:
            self._before = process.values(self.guarded)

    def turn(self, records: list[CallRecord], end: State, instances: dict[str, Any]) -> None:
        """One turn's records, after it ran (:meth:`begin` before it)."""
        self.raw.append((list(records), end))
        blobs, live, seen = end._blobs, self.guarded, self._viewed
        views = []
        for c, inst in instances.items():
            blob = blobs[c]
            got = seen.get(c)
            # an instance whose capture is the one it had at an earlier turn's end is as it
            # was then: its view is shared (marshal writes it once)
            if got is None or got[0] is not blob or c in live:
                got = seen[c] = (blob, _view(inst, blob, c in live))
            views.append((c, got[1]))
        self.views.append(views)
        if live:
            if self._before is None:
                raise Uncacheable("no shared values")
            self.guards.append([self._before, process.values(live)])
            self._before = None

    @property
    def n_turns(self) -> int:
        return len(self.views)

    def _encode(self) -> None:
        """The turns kept so far, as plain data: records as tuples, states by number."""
        sid = self._id
        if self.initial < 0:
            self.initial = sid(self._initial)
        for records, end in self.raw:
            out = []
            last: Any = None  # a record's state before is mostly the previous one's after
            n = -1
            for r in records:
                before, after = r.state_before, r.state_after
                if before is not last:
                    n = sid(before)
                m = n if after is before else sid(after)
                out.append((r.text, _call(r.call), r.result, r.success, r.class_name, n, m))
                last, n = after, m
            self.turns.append(out)
            self.ends.append(n if end is last else sid(end))
        self.raw = []

    def entry(self, conv: bfcl.Conversation, model_name: str) -> dict:
        """The finished entry; Uncacheable where it holds an instance name of ``model_name``
        (bfcl's rewrite put it into an argument: another model would see its own name)."""
        self._encode()
        entry = {"states": self.states, "logs": self.logs.encode(), "initial": self.initial,
                 "turns": self.turns, "ends": self.ends, "views": self.views}
        if self.guarded:
            entry["guards"] = {"classes": list(self.guarded), "turns": self.guards}
        try:
            # the templates are marshal blobs and random states made from the loaded
            # instances alone (no call reached them): what the replay recorded is checked
            data = marshal.dumps(entry)
        except ValueError:
            raise Uncacheable("not plain data") from None
        entry["templates"] = self.templates
        prefix = f"{model_name}_ground_truth_eval"
        if b"_ground_truth_eval_" in data and any(  # (in every such name)
                bfcl.instance_name(prefix, conv.id, c).encode() in data
                for c in conv.involved_classes):
            raise Uncacheable("the model name reaches an argument (bfcl's rewrite)")
        self.data = data
        return entry


def build_entry(conv: bfcl.Conversation, model_name: str = SENTINEL) -> dict:
    """Replay one reference alone; raises Uncacheable."""
    return _build(conv, model_name)[0]


def _build(conv: bfcl.Conversation, model_name: str = SENTINEL) -> tuple[dict, bytes | None]:
    """:func:`build_entry`, with the entry's marshal bytes (see _Category.encoded). A guarded
    reference is built as in a fresh process (its shared objects pristine, then put back)."""
    if depends_on_process(conv) and not guardable(conv):
        raise Uncacheable("process-global state")
    guarded = process_classes(conv)
    saved = BfclProcess.checkpoint(guarded) if guarded else None
    if guarded:
        process.reset_to_pristine(guarded)
    try:
        env = Environment.for_conversation(conv, "reference", model_name=model_name,
                                           snapshots=True, meter=Meter(DEFAULT_BUDGET))
        rec = _Recorder(env.initial_state, environment.plain_templates(conv), guarded)
        try:
            for t, texts in enumerate(conv.ground_truth):
                rec.begin()
                rec.turn([env.execute(text, t, -1) for text in texts], env.state,
                         env.instances)
        except (BudgetExceeded, RecursionError) as e:
            raise Uncacheable(f"budget: {e}") from None
        return rec.entry(conv, model_name), rec.data
    finally:
        if saved is not None:
            BfclProcess.restore(guarded, saved)


# ---------------------------------------------------------------- the cached side
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
    if "data" in entry:  # as written (see _write): the marshal bytes of the rest
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


class CachedSide:
    """The reference side of :mod:`careful_engine.core.replay`, from the cache: the same calls,
    results and states as a live replay, turn by turn (the meter still counts every call and
    looks at the clock as often as the live side does)."""

    def __init__(self, decoded: _Decoded, meter: Meter | None,
                 conv: bfcl.Conversation | None = None, cat: _Category | None = None) -> None:
        self._d = decoded
        self._meter = meter
        self._conv, self._cat = conv, cat
        self.env = _Env(decoded)
        self.turns: list[list[CallRecord]] = []
        self.ends: list[State] = []

    def run(self, turn: int, step: int, texts: list[str]) -> list[CallRecord]:
        """The recorded turn (a guarded entry's only where bfcl's shared objects hold the
        values it saw: else :class:`Diverged`; they are left as the turn left them)."""
        env, meter = self.env, self._meter
        guards = self._d.guards
        if guards is not None:
            before, after = guards[1][turn]
            try:
                same = process.values(guards[0]) == before
            except ValueError:
                same = False
            if not same:
                STATS["diverged"] += 1
                raise Diverged(f"turn {turn}")
            if after != before:
                process.set_values(guards[0], after)
        records = self._d.records(turn, step)
        for r in records:
            env.state = r.state_before
            if meter is not None:  # as the live side counts its calls (Meter.tick, inlined)
                meter.calls += 1
                if meter.calls % meter.EVERY == 0:
                    meter.check()
        env.state = self._d.ends[turn]
        env._turn = turn
        return list(records)

    def trace(self) -> SideTrace:
        if self._cat is not None and self._conv is not None:
            _hold(self._cat, self._conv)
        return SideTrace(self.turns, self._d.initial, self.ends)


# ---------------------------------------------------------------- categories: memory and disk
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
    # id -> the checked plain-data templates of a "loads" entry (see LoadedSide)
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
# recorded: references recorded from a live replay; loaded/rejected/written: entry files;
# diverged: guarded references given up on (see CachedSide.run)
STATS = {"recorded": 0, "loaded": 0, "rejected": 0, "written": 0, "diverged": 0}


def _key_file(folder: Path) -> bytes | None:
    """This install's MAC key (made on first use); None if it cannot be had safely."""
    path = folder / "key"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO: no wait
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            except OSError:
                return None
            key = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
            return key
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read(33)
        if (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
                and not st.st_mode & 0o077 and len(key) == 32):
            return key
        return None  # someone else's or tampered: no disk cache (memory only)
    return None


def _folder() -> Path | None:
    """``<cache root>/refcache``, a real directory of this user's (None if it cannot be)."""
    try:
        return cache_dir("refcache")
    except OSError:
        return None


def _path(folder: Path, category: str) -> Path:
    return folder / f"{category}-{dataset_version(category)}-{engine_version()}.bin"


def _header(category: str) -> dict:
    return {"format": FORMAT, "bfcl": bfcl.BFCL_VERSION, "engine": engine_version(),
            "category": category, "dataset": dataset_version(category)}


def _read(path: Path, key: bytes, category: str) -> dict[str, dict | None] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO: no wait
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            STATS["rejected"] += 1
            return None
        data = f.read(MAX_FILE_BYTES + 1)
    n = len(MAGIC)
    if len(data) < n + 32 or data[:n] != MAGIC:
        STATS["rejected"] += 1
        return None
    mac, payload = data[n:n + 32], memoryview(data)[n + 32:]
    if not hmac.compare_digest(mac, _mac(key, payload)):
        STATS["rejected"] += 1
        return None
    try:  # MAC-checked bytes only; marshal runs no code
        doc = marshal.loads(payload)
        ok = (type(doc) is dict and doc.get("header") == _header(category)
              and type(doc.get("entries")) is dict)
    except (ValueError, EOFError, TypeError):
        ok = False
    if not ok:
        STATS["rejected"] += 1
        return None
    STATS["loaded"] += 1
    return doc["entries"]


def _mac(key: bytes, payload: bytes | memoryview) -> bytes:
    """HMAC-SHA256(key, MAGIC + payload), without joining them first."""
    h = hmac.new(key, MAGIC, hashlib.sha256)
    h.update(payload)
    return h.digest()


def _write(path: Path, key: bytes, category: str, entries: dict[str, dict | None],
           encoded: dict[str, tuple[dict, bytes]] | None = None) -> None:
    if encoded:  # recorded entries as the bytes their check made (see _Category.encoded)
        entries = dict(entries)
        for i, (entry, data) in encoded.items():
            if entries.get(i) is entry:
                entries[i] = {"data": data, "templates": entry["templates"]}
    payload = marshal.dumps({"header": _header(category), "entries": entries})
    mac = _mac(key, payload)
    try:  # private; a planted link at the name is replaced itself, never its target
        safe_write.write_bytes(path, MAGIC + mac + payload, mode=0o600, fsync=False,
                               replace_link=True)
    except OSError:
        return
    STATS["written"] += 1


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


def _disk() -> tuple[Path, bytes] | None:
    folder = _folder()
    key = _key_file(folder) if folder is not None else None
    return (folder, key) if key is not None else None


def _category(category: str) -> _Category:
    mkey = (category, dataset_version(category), engine_version())
    got = _MEMORY.get(mkey)
    if got is None:
        disk = _disk()
        entries = _read(_path(disk[0], category), disk[1], category) if disk else None
        got = _MEMORY[mkey] = _Category(entries or {}, {})
    return got


class RecordingSide:
    """The reference side replayed live, as :mod:`careful_engine.core.replay` does it, recorded
    for the cache as it goes (a reference the cache does not hold yet)."""

    def __init__(self, conv: bfcl.Conversation, model_name: str, env: Environment,
                 cat: _Category, guarded: tuple[str, ...] = ()) -> None:
        self.env = env
        self.turns: list[list[CallRecord]] = []
        self.ends: list[State] = []
        self._conv, self._model, self._cat = conv, model_name, cat
        # (its templates are taken when the entry is made: see trace)
        self._rec: _Recorder | None = _Recorder(env.initial_state, guarded=guarded)

    def run(self, turn: int, step: int, texts: list[str]) -> list[CallRecord]:
        execute = self.env.execute
        rec = self._rec
        if rec is not None:
            try:
                rec.begin()
            except ValueError:
                self._rec = rec = None
        out = [execute(text, turn, step) for text in texts]
        if rec is not None:
            try:
                rec.turn(out, self.env.state, self.env.instances)
            except (Uncacheable, ValueError, RecursionError):
                self._rec = None
        return out

    def trace(self) -> SideTrace:
        rec, conv = self._rec, self._conv
        if rec is not None and rec.n_turns == len(conv.ground_truth):
            self._rec = None
            # the plain-data templates of the instances as loaded: made when the reference
            # side was (the first of this conversation's environments); the model side's
            # were cloned from them
            held = environment.held_templates(conv)
            rec.templates = environment.plain_templates(conv, held)
            # encoded when first asked for (see _settled), as a rule when the cache is written
            self._cat.entries[conv.id] = _Pending(rec, conv, self._model)
            self._cat.new.add(conv.id)
            STATS["recorded"] += 1
            _hold(self._cat, conv, held)
        return SideTrace(self.turns, self.env.initial_state, self.ends)


class LoadedSide(RecordingSide):
    """A reference the cache cannot hold (its classes reach bfcl's process-global objects),
    replayed live as usual. Only the instances as loaded are process-independent (loading
    reads the conversation's initial config alone), so their plain-data templates are kept
    (an entry ``{"loads": templates}``, and in memory every template this process made):
    a later replay clones both sides' instances from them instead of loading them."""

    def __init__(self, conv: bfcl.Conversation, model_name: str, env: Environment,
                 cat: _Category) -> None:
        self.env = env
        self.turns = []
        self.ends = []
        self._conv, self._model, self._cat = conv, model_name, cat
        self._rec = None

    def trace(self) -> SideTrace:
        conv, cat = self._conv, self._cat
        _hold(cat, conv)
        if conv.id not in cat.entries:
            cat.entries[conv.id] = {"loads": environment.plain_templates(conv)}
            cat.new.add(conv.id)
        return SideTrace(self.turns, self.env.initial_state, self.ends)


def _loaded_side(conv: bfcl.Conversation, model_name: str, snapshots: bool,
                 meter: Meter | None, env_kw: dict,
                 record: tuple[str, ...] = ()) -> LoadedSide | RecordingSide:
    """A process-bound reference replayed live, its instances cloned from kept templates
    (``record``: recorded as a guarded entry of these classes as it goes)."""
    cat = _category(conv.category)
    loads = cat.loads.get(conv.id)
    if loads is None:
        entry = cat.entries.get(conv.id)
        loads = {}
        if type(entry) is dict and "loads" in entry:
            try:
                loads = _templates(entry["loads"])
            except (KeyError, IndexError, TypeError, ValueError, EOFError):
                cat.entries.pop(conv.id, None)  # malformed: made again
        cat.loads[conv.id] = loads
    held = cat.held.get(conv.id)
    if loads or held:
        environment.adopt(conv, loads, None, held)
    env = Environment.for_conversation(conv, "reference", model_name=model_name,
                                       snapshots=snapshots, meter=meter, **env_kw)
    if record:
        return RecordingSide(conv, model_name, env, cat, record)
    return LoadedSide(conv, model_name, env, cat)


def reference_side(conv: bfcl.Conversation, model_name: str, snapshots: bool,
                   budget: Budget | None, meter: Meter | None, guarded: bool = True,
                   **env_kw: Any) -> CachedSide | RecordingSide | None:
    """The reference side of ``conv`` for this replay: from the cache; or live and recorded
    for it (``env_kw``: how replay makes the environment); or live with its instances cloned
    from kept templates (:class:`LoadedSide`); or None (replay it live as usual).

    A guarded reference (see :func:`guardable`; ``guarded=False``: never from the cache)
    raises :class:`Diverged` from its ``run`` where bfcl's shared objects hold other values
    than it recorded: the caller then replays the conversation again from its start."""
    if not enabled():
        return None
    bound = depends_on_process(conv)
    if not usable_for(conv, model_name, snapshots, budget, process_bound=bound):
        return None
    classes = process_classes(conv)
    start = _start_values(classes) if bound and guarded and guardable(conv) else None
    if bound and start is None:
        return _loaded_side(conv, model_name, snapshots, meter, env_kw)
    cat = _category(conv.category)
    decoded = cat.decoded.get(conv.id)
    if decoded is None:
        entry = _settled(cat, conv.id, _ABSENT)
        if bound:
            if entry is _ABSENT or (type(entry) is dict and "loads" in entry):
                # a guarded reference is recorded the second time it is replayed (the first
                # keeps its instance templates), from shared objects as a fresh process has
                # them (what other runs are likely to meet again)
                record = entry is not _ABSENT and start == process.pristine_values(classes)
                return _loaded_side(conv, model_name, snapshots, meter, env_kw,
                                    classes if record else ())
        elif entry is _ABSENT:
            env = Environment.for_conversation(conv, "reference", model_name=model_name,
                                               snapshots=snapshots, meter=meter, **env_kw)
            return RecordingSide(conv, model_name, env, cat)
        decoded = _decoded(cat, conv.id)
        if decoded is None:
            return _loaded_side(conv, model_name, snapshots, meter, env_kw) if bound else None
    guards = decoded.guards
    if (guards is not None) != bound or (bound and (guards[0] != classes or not guards[1]
                                                    or guards[1][0][0] != start)):
        # (a guarded one whose shared objects already differ: it would diverge at once)
        return _loaded_side(conv, model_name, snapshots, meter, env_kw) if bound else None
    # the model side clones its instances from the templates the reference was loaded from
    environment.adopt(conv, decoded.templates, decoded.initial, cat.held.get(conv.id))
    calls.remember(decoded.reusable_calls())  # and its call strings the reference makes, parsed
    return CachedSide(decoded, meter, conv, cat)


def _start_values(classes: tuple[str, ...]) -> bytes | None:
    """The shared values a conversation starts from (None: not what a guard can hold)."""
    try:
        return process.values(classes)
    except ValueError:
        return None


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


STALE_SECONDS = 7 * 24 * 3600
_ENTRY_FILE = re.compile(r"[a-z_]+-[0-9a-f]{6,64}-([0-9a-f]{6,64})\.bin")


def _prune(folder: Path, keep: Path) -> None:
    """Remove the cache files of other engine versions (every upgrade of careful or
    bfcl-eval leaves its files behind; the engine version covers bfcl-eval's data) that
    nothing has written for :data:`STALE_SECONDS` (a file of another install still in use is
    kept); a link is removed itself, never what it points to; ``keep``: the file just
    written."""
    cutoff, mine = time.time() - STALE_SECONDS, engine_version()
    try:
        with os.scandir(folder) as it:
            for e in it:
                m = _ENTRY_FILE.fullmatch(e.name)
                if m is None or m.group(1) == mine or e.name == keep.name:
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                    if st.st_mtime < cutoff and not stat.S_ISDIR(st.st_mode):
                        os.unlink(e.path)
                except OSError:
                    continue
    except OSError:
        return


@contextmanager
def _locked(folder: Path, wait: float = 5.0) -> Iterator[None]:
    """The cache folder's write lock (``flock`` on its ``lock`` file), waited for at most
    ``wait`` seconds; without it (no flock, a planted link, a holder that never lets go) the
    write goes ahead unlocked: an entry lost then is only recorded again later."""
    try:
        import fcntl
    except ImportError:  # not on POSIX
        yield
        return
    try:
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # releases the lock


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
    return {"root": str(cache_root()), "enabled": enabled(), "engine": engine_version(),
            **STATS}


if __name__ == "__main__":  # python -m careful_engine.core.refcache: where it is, what it holds
    print(json.dumps(describe(), indent=2))
