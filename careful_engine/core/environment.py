"""An environment owns the simulator instances of one side of one conversation.

It loads the scenario as bfcl's executor does (``multi_turn_utils.py:13-100``): one instance per
involved class, ``_load_scenario(deepcopy(initial_config[class]), long_context=...)`` except for
stateless classes, and serialises results as bfcl does (str as is, dict through ``json.dumps``
with a ``str`` fallback, anything else through ``str``; exceptions as
``"Error during execution: <message>"``). Calls are parsed by :mod:`careful_engine.core.calls` and
dispatched by name to a bound method of an instance this environment owns; no string is
evaluated.
"""

from __future__ import annotations

import json
import marshal
import pickle
import random
from json.encoder import c_make_encoder as _c_encoder
from json.encoder import encode_basestring_ascii
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.budget import DEFAULT_BUDGET, GUARDED, Budget, BudgetExceeded, Meter, guard
from careful_engine.core.calls import Call, ParseFailure, parse_call
from careful_engine.core.fs_capture import CLASS as FILE_SYSTEM
from careful_engine.core.fs_capture import READS as FS_READS
from careful_engine.core.fs_capture import TreeTracker
from careful_engine.core.process import shared_objects
from careful_engine.core.purity import pure_methods
from careful_engine.core.state import State, capture, comparable
from careful_engine.core.trajectory import CallRecord


def _json_text(value: dict) -> str:
    """``json.dumps(value)`` with its defaults, through the C encoder it uses, without the
    three Python calls around it (the same text; checked at import, else json.dumps).

    The encoder is made once, without json's circular-reference markers: a value that
    contains itself then raises RecursionError instead of ValueError, and either way
    :func:`serialise` falls back to ``str`` as bfcl does."""
    return "".join(_ENCODE(value, 0))


_JSON_DEFAULT = json.JSONEncoder().default
_ENCODE: Any = (_c_encoder(None, _JSON_DEFAULT, encode_basestring_ascii, None, ": ", ", ",
                           False, False, True) if _c_encoder is not None else None)
_dumps: Any = json.dumps
if _c_encoder is not None:
    try:
        _probe = {"a": [1, 2.5, None, True, "é\n"], "b": {"c": float("inf")}}
        if _json_text(_probe) == json.dumps(_probe):
            _dumps = _json_text
    except Exception:  # another json module than this one was written for
        pass


def serialise(result: Any) -> str:
    """bfcl's serialisation of a call result (multi_turn_utils.py:85-94)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return _dumps(result)
        except Exception:
            return str(result)
    return str(result)


def call_succeeded(name: str | None, raw: Any, raised: bool) -> bool:
    """The paper's success: it did not raise, return an error field or a false status flag.

    Status flags are ``*_status`` / ``status`` / ``success`` keys holding ``False``; the
    ``*_get_login_status`` queries report a status rather than fail, so they are exempt.
    """
    if raised:
        return False
    if type(raw) is str:  # the usual result, first
        return not raw.startswith("Error")
    if isinstance(raw, dict):
        if "error" in raw:
            return False
        if name and name.endswith("get_login_status"):
            return True
        for key, value in raw.items():
            if value is False and (key.endswith("_status") or key in ("status", "success")):
                return False
        return True
    if isinstance(raw, list) and raw and isinstance(raw[0], str) and raw[0].startswith("Error"):
        return False
    if isinstance(raw, str) and raw.startswith("Error"):
        return False
    return True


_PROCESS_BOUND: list[tuple[frozenset[str], frozenset[str]]] = []


def process_bound() -> tuple[frozenset[str], frozenset[str]]:
    """(classes whose shared state always carries over, classes whose shared state carries
    over in long context only: the module-level data of long_context.py)."""
    if not _PROCESS_BOUND:
        always, long_only = set(), set()
        for class_name, label, _, _ in shared_objects():
            (always if ".__defaults__" in label or ".__kwdefaults__" in label
             else long_only).add(class_name)
        _PROCESS_BOUND.append((frozenset(always), frozenset(long_only)))
    return _PROCESS_BOUND[0]


_REACH: dict[tuple[tuple[str, ...], bool], tuple[str, ...]] = {}


def process_classes(classes: tuple[str, ...], long_context: bool) -> tuple[str, ...]:
    """The classes among ``classes`` whose process-global objects a conversation can reach
    (careful_engine.core.process): those with shared mutable defaults always, those with
    shared module data in long context only (bfcl's simulators read and merge that data only
    when loaded with ``long_context``)."""
    key = (tuple(classes), bool(long_context))
    got = _REACH.get(key)
    if got is None:
        always, long_only = process_bound()
        got = _REACH[key] = tuple(c for c in key[0]
                                  if c in always or (key[1] and c in long_only))
    return got


_PURE: dict[str, frozenset[str]] = {}


def _pure(class_name: str) -> frozenset[str]:
    """The methods of a simulator class proven never to change an instance
    (careful_engine.core.purity); none for the file system, which has its own tracking."""
    got = _PURE.get(class_name)
    if got is None:
        got = _PURE[class_name] = (frozenset() if class_name == FILE_SYSTEM else
                                   pure_methods(bfcl.simulator_class(class_name)))
    return got


# The outcome of one executed call: what ``Environment.execute`` returns (turn and step are
# -1 unless the caller places the call in a trajectory).
Execution = CallRecord

_TEMPLATES: dict[tuple[str, bool, str], tuple] = {}
_METHOD_CLASS = bfcl.function_class()  # the 128 method names are unique across classes
_CONFIG_KEYS: dict[tuple[str, str], tuple[str, bool, str]] = {}
_INITIAL_STATES: dict[str, State] = {}
_READ: Any = object()  # a file-system read: no snapshot to take  # snapshots are never mutated, so shared


# a few words of a random state -> the distinct states seen with them
_RANDOM_STATES: dict[tuple, list[tuple]] = {}


def _shared(state: tuple) -> tuple:
    """One object per distinct random state (most simulators seed a constant), so that the
    reference cache's files hold each once (marshal writes a shared object once).

    Found by a few of its words, then compared whole (a dict keyed by the whole state
    hashes its 625 words before comparing them: half as long again per template)."""
    words = state[1]
    probe = (state[0], state[2], words[1], words[2], words[-2], words[-1])
    known = _RANDOM_STATES.get(probe)
    if known is None:
        if len(_RANDOM_STATES) < 1_000:
            _RANDOM_STATES[probe] = [state]
        return state
    for seen in known:
        if seen == state:
            return seen
    if len(known) < 8:
        known.append(state)
    return state


_CANONICAL: dict[int, tuple[tuple, tuple]] = {}  # id(a seed's state) -> (it, _shared(it))


def _rng_state(rng: random.Random) -> tuple:
    """The state of a freshly loaded instance's generator, one object per distinct state:
    read, unless the load seeded it from a state kept per seed (bfcl.seeded_state)."""
    state = bfcl.seeded_state(rng)
    if state is None:
        return _shared(rng.getstate())
    got = _CANONICAL.get(id(state))
    if got is None or got[0] is not state:
        got = (state, _shared(state))
        if len(_CANONICAL) < 1_000:  # (the states kept per seed: a few)
            _CANONICAL[id(state)] = got
    return got[1]


def _template(instance: Any) -> tuple:
    """A frozen copy of a freshly loaded instance, to clone from.

    Plain-data states are kept with marshal and the random generator's state (cloning one
    is then a few microseconds); anything else (the file system's objects) with pickle.
    """
    attrs = dict(vars(instance))
    rng = attrs.pop("_random", None)
    if rng is None or type(rng) is random.Random:
        try:
            return ("m", type(instance), marshal.dumps(attrs), _rng_state(rng)
                    if rng else None)
        except ValueError:
            pass
    return ("p", pickle.dumps(instance, pickle.HIGHEST_PROTOCOL))


def _config_key(template_key: str, class_name: str, long_context: bool,
                initial_config: dict) -> tuple[str, bool, str]:
    """The key of a class's template: by content (base, miss_func and miss_param share
    initial configs)."""
    ck = (template_key, class_name)
    key = _CONFIG_KEYS.get(ck)
    if key is None:
        key = _CONFIG_KEYS[ck] = (class_name, long_context,
                                  json.dumps(initial_config.get(class_name, {})))
    return key


def conversation_key(conv: bfcl.Conversation) -> str:
    """The template key of a conversation's environments."""
    return f"{conv.id}|{conv.long_context}"


def held_templates(conv: bfcl.Conversation) -> dict[str, tuple]:
    """The templates of ``conv``'s classes made so far in this process, by class name."""
    out = {}
    long_context, key = conv.long_context, conversation_key(conv)
    for c in conv.involved_classes:
        if c == "TravelAPI" and long_context:
            continue  # never cloned (see Environment._create)
        t = _TEMPLATES.get(_config_key(key, c, long_context, conv.initial_config))
        if t is not None:
            out[c] = t
    return out


def plain_templates(conv: bfcl.Conversation,
                    held: dict[str, tuple] | None = None) -> dict[str, tuple[bytes, Any]]:
    """The plain-data templates (marshal blob, random state) of ``conv``'s classes made so
    far, by class name (what the reference cache keeps, so that a later process clones the
    model side's instances instead of loading them); ``held``: :func:`held_templates`'s
    answer, if at hand."""
    held = held_templates(conv) if held is None else held
    return {c: (t[2], t[3]) for c, t in held.items() if t[0] == "m"}


def adopt(conv: bfcl.Conversation, templates: dict[str, tuple[bytes, Any]],
          initial: State | None, held: dict[str, tuple] | None = None) -> None:
    """Clone ``conv``'s instances from ``templates`` (from :func:`plain_templates`) and from
    ``held`` (from :func:`held_templates`, earlier in this process), and take ``initial`` (if
    given) as their initial state, as if this process had loaded them (the reference cache's
    entry was recorded from such a load)."""
    key, long_context, config = conversation_key(conv), conv.long_context, conv.initial_config
    for c, template in (held or {}).items():
        _TEMPLATES.setdefault(_config_key(key, c, long_context, config), template)
    for c, (blob, rng_state) in templates.items():
        tk = _config_key(key, c, long_context, config)
        if tk not in _TEMPLATES:
            _TEMPLATES[tk] = ("m", bfcl.simulator_class(c), blob, rng_state)
    if initial is not None and key not in _INITIAL_STATES and not (
            long_context and "TravelAPI" in conv.involved_classes):
        _INITIAL_STATES[key] = initial


def _clone(template: tuple) -> Any:
    if template[0] == "p":
        return pickle.loads(template[1])
    _, cls, blob, rng_state = template
    instance = cls.__new__(cls)
    attrs = marshal.loads(blob)
    if rng_state is not None:
        rng = random.Random.__new__(random.Random)
        rng.setstate(rng_state)
        attrs["_random"] = rng
    instance.__dict__ = attrs  # a fresh dict of its own (the same items, in order)
    return instance


class Environment:
    """The simulator instances of one conversation side, with a state snapshot per call."""

    def __init__(
        self,
        initial_config: dict,
        involved_classes: tuple[str, ...] | list[str],
        *,
        long_context: bool = False,
        name_prefix: str = "careful",
        entry_id: str = "entry",
        snapshots: bool = True,
        template_key: str | None = None,
        budget: Budget | None = None,
        meter: Meter | None = None,
        **_ignored: Any,
    ) -> None:
        self.involved_classes = tuple(involved_classes)
        self.budget = budget or (meter.budget if meter else DEFAULT_BUDGET)
        self.meter = meter  # time and memory, checked before every call (None: unchecked)
        self._tracker: TreeTracker | None = None
        self._untracked = False  # a tree beyond the limits outside a replay: full captures
        self.long_context = long_context
        self.snapshots = snapshots
        # classes whose state other code can change through process-global objects: their
        # captures are always taken again
        self._process_bound = process_classes(self.involved_classes, long_context)
        self.instances: dict[str, Any] = {}
        self.mapping: dict[str, str] = {}  # method -> instance name (bfcl's naming)
        for class_name in self.involved_classes:
            self.instances[class_name] = self._create(class_name, initial_config, template_key)
            inst_name = bfcl.instance_name(name_prefix, entry_id, class_name)
            self.mapping.update(dict.fromkeys(bfcl.public_methods(class_name), inst_name))
        self.state: State = State({})
        if snapshots:
            # the initial state is the same for every environment of a conversation, except
            # where the long-context TravelAPI data carries what earlier conversations did
            cacheable = template_key is not None and not (
                long_context and "TravelAPI" in self.instances)
            initial = _INITIAL_STATES.get(template_key) if cacheable else None
            if initial is None:
                initial = State.of(self.instances)
                if cacheable:
                    _INITIAL_STATES[template_key] = initial
            self.state = initial
        self.initial_state = self.state

    @classmethod
    def for_conversation(
        cls, conv: bfcl.Conversation, side: str = "model", model_name: str = "careful", **kw: Any
    ) -> Environment:
        prefix = f"{model_name}_ground_truth_eval" if side == "reference" else f"{model_name}_eval"
        return cls(
            conv.initial_config,
            conv.involved_classes,
            long_context=conv.long_context,
            name_prefix=prefix,
            entry_id=conv.id,
            template_key=conversation_key(conv),
            **kw,
        )

    def _create(self, class_name: str, initial_config: dict, template_key: str | None) -> Any:
        shared = class_name == "TravelAPI" and self.long_context
        if template_key is not None and not shared:
            # A loaded instance is cloned from a pickled template: the same object graph
            # (random generator state included) as a fresh _load_scenario, without bfcl's
            # two deep copies per instance. TravelAPI in long context is never cloned: its
            # extension dicts must stay shared (see careful_engine.core.process).
            # keyed by content: base, miss_func and miss_param share initial configs
            key = _config_key(template_key, class_name, self.long_context, initial_config)
            template = _TEMPLATES.get(key)
            if template is None:
                instance = self._load(class_name, initial_config)
                _TEMPLATES[key] = _template(instance)
                return instance  # the first user takes the loaded instance itself
            return _clone(template)
        return self._load(class_name, initial_config)

    def _load(self, class_name: str, initial_config: dict) -> Any:
        """Create and load one instance exactly as bfcl's executor does."""
        instance = bfcl.simulator_class(class_name)()
        if bfcl.is_stateless(class_name):
            return instance
        # initial configs are JSON data: a pickle round trip is a deep copy at C speed
        config = pickle.loads(pickle.dumps(initial_config.get(class_name, {}), -1))
        load = bfcl.scenario_loader(class_name)  # its deepcopy of plain data at C speed
        if load is None:
            instance._load_scenario(config, long_context=self.long_context)
        else:
            load(instance, config, long_context=self.long_context)
        return instance

    def _tree_tracker(self) -> TreeTracker:
        """The file system's incremental capture, in step with ``self.state``."""
        tracker = self._tracker
        current = self.state._blobs.get(FILE_SYSTEM)
        instance = self.instances[FILE_SYSTEM]
        # (a copy of this environment with its own instance, as effects.observe.fork makes,
        # must not follow the original's tracker)
        if tracker is None or tracker.version is not current or tracker.fs is not instance:
            base = current if type(current) is bytes else capture(instance)
            # as loaded (or cloned from a loaded template), no directory is shared yet
            fresh = current is self.initial_state._blobs.get(FILE_SYSTEM) and tracker is None
            tracker = self._tracker = TreeTracker(instance, base, self.budget, fresh)
            # the tracker's first version stands for the capture it starts from
            if type(current) is not bytes or current != base:
                self.state = self.state.replace(FILE_SYSTEM, tracker.version)
            else:
                self.state = State({**self.state._blobs, FILE_SYSTEM: tracker.version},
                                   dict(self.state._cache))
        return tracker

    def execute(self, text: str, turn: int = -1, step: int = -1) -> CallRecord:
        """Parse and run one call string; record result, success and the states around it.

        Raises :class:`~careful_engine.core.budget.BudgetExceeded` (before the call runs) when
        its arguments ask for unbounded work or the meter's budget is spent, and (after it
        ran) when the state it left exceeds the budget's tree limits.
        """
        call = parse_call(text, self.mapping)
        if type(call) is not Call:
            if isinstance(call, ParseFailure):
                return CallRecord(turn, step, text, call, call.result, False, None, self.state,
                                  self.state)
        name = call.name
        if name in GUARDED:
            reason = guard(name, call.args, call.kwargs, self.budget)
            if reason is not None:
                raise BudgetExceeded(f"{name}: {reason}")
        meter = self.meter
        if meter is not None:
            meter.calls += 1
            if meter.calls % meter.EVERY == 0:  # Meter.tick, inlined: this runs on every call
                meter.check()
        class_name = _METHOD_CLASS[name]
        tracked = None
        snapshots = self.snapshots
        if class_name == FILE_SYSTEM and snapshots:
            if name in FS_READS:
                tracked = _READ  # reads change nothing (tests/test_snapshot_incremental.py)
            elif not self._untracked:
                try:
                    tracker = self._tree_tracker()
                    paths = tracker.plan(name, call.args, call.kwargs)
                    tracked = tracker.before(paths) if paths is not None else None
                except BudgetExceeded:
                    if meter is not None:
                        raise
                    self._untracked, self._tracker = True, None  # unmetered: capture in full
        before = self.state
        instance = self.instances[class_name]
        method = getattr(instance, name)
        raised = False
        try:
            raw = method(*call.args, **call.kwargs)
            result = serialise(raw)
        except Exception as e:  # the simulators raise on bad input; bfcl records the message
            raw, raised = None, True
            result = f"Error during execution: {e}"
        if snapshots and tracked is not _READ:
            new = None
            if tracked is not None:
                try:
                    new = tracker.after(tracked)
                except BudgetExceeded:
                    # under a replay's meter the conversation stops; elsewhere (the effects
                    # probes) a tree beyond the limits is captured in full, as it always was
                    if meter is not None:
                        raise
                    self._untracked, self._tracker = True, None
            if new is None:
                self._tracker = None
                if name in _pure(class_name) and class_name not in self._process_bound:
                    # a method that never changes its instance: the capture would be the
                    # same bytes (marshal version 2 of built-in values without a NaN)
                    blob = before._blobs.get(class_name)
                    if comparable(blob):
                        new = blob
                if new is None:
                    new = capture(instance)
            self.state = before.replace(class_name, new)
        return CallRecord(turn, step, text, call, result, call_succeeded(name, raw, raised),
                          class_name, before, self.state)

    def execute_all(self, texts: list[str]) -> list[Execution]:
        return [self.execute(t) for t in texts]


def clear_caches() -> None:
    """Forget the instance templates and initial states kept for this process (a benchmark's
    cold start)."""
    _TEMPLATES.clear()
    _INITIAL_STATES.clear()
