"""The reference sides :mod:`careful_engine.core.replay` is handed: from the cache
(:class:`CachedSide`), live and recorded for it (:class:`RecordingSide`), or live with its
instances cloned from kept templates (:class:`LoadedSide`); :func:`reference_side` chooses."""

from __future__ import annotations

from typing import Any

from careful_engine.core import bfcl, calls, environment, process
from careful_engine.core.budget import Budget, Meter
from careful_engine.core.environment import Environment
from careful_engine.core.refcache.disk import STATS
from careful_engine.core.refcache.entry import _Decoded, _Env, _templates
from careful_engine.core.refcache.recorder import _Recorder
from careful_engine.core.refcache.scope import (
    Uncacheable,
    depends_on_process,
    enabled,
    guardable,
    process_classes,
    usable_for,
)
from careful_engine.core.refcache.store import (
    _ABSENT,
    _Category,
    _category,
    _decoded,
    _hold,
    _Pending,
    _settled,
)
from careful_engine.core.state import State
from careful_engine.core.trajectory import CallRecord, SideTrace


class Diverged(Exception):
    """bfcl's shared objects hold other values than the recorded reference saw at the start of
    a turn: its outcome may differ, so the conversation is replayed again with it live."""


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
            # encoded when first asked for (see store._settled), as a rule when the cache is written
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

    A guarded reference (see :func:`.scope.guardable`; ``guarded=False``: never from the cache)
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
