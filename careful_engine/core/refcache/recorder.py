"""Building a cache entry while a reference side runs: its calls, results and states turn by
turn, encoded as plain data (marshal) when the entry is asked for."""

from __future__ import annotations

import marshal
from typing import Any

from careful_engine.core import bfcl, environment, process
from careful_engine.core.budget import DEFAULT_BUDGET, BudgetExceeded, Meter
from careful_engine.core.calls import Call, ParseFailure
from careful_engine.core.environment import Environment
from careful_engine.core.fs_capture import MISSING, TreeLog, TreeVersion
from careful_engine.core.process import BfclProcess
from careful_engine.core.refcache.scope import (
    Uncacheable,
    depends_on_process,
    guardable,
    process_classes,
)
from careful_engine.core.state import State
from careful_engine.core.trajectory import CallRecord

SENTINEL = "carefulrefsentinel"


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
        # entry: see scope.guardable), and those values: [before, after] per turn
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
    """:func:`build_entry`, with the entry's marshal bytes (see store._Category.encoded). A guarded
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
