"""The scoring fast paths give exactly what the slow paths give, on real runs and edge cases.

Each fast path is checked against the computation it replaces: bfcl's result serialisation
(``json.dumps`` with a ``str`` fallback), the blame's differing public attributes (the full
diff of the public states), the rules' shortcuts (a finder that cannot count anything, a call
that cannot have errored), the process-global objects a conversation can reach, and the
instance templates kept for references the cache cannot hold.
"""

from __future__ import annotations

import json
import pickle
import random  # (the loaders below read it as a global, as bfcl's do)
from pathlib import Path

import pytest

from careful_engine.core import bfcl, calls, environment, process, refcache
from careful_engine.core.decode import decode_entry, reference_trajectory
from careful_engine.core.environment import serialise
from careful_engine.core.process import BfclProcess
from careful_engine.core.refcache import scope, store
from careful_engine.core.replay import replay
from careful_engine.core.runs import load_result_file
from careful_engine.core.state import State, capture, diff
from careful_engine.scoring import rules
from careful_engine.scoring.blame import _differing, _public
from careful_engine.scoring.score import discover, load_effects
from tests.traces import fingerprint, reference_sides

CATEGORY = "multi_turn_base"


def _bfcl_serialise(result: object) -> str:
    """multi_turn_utils.py:85-94 as written there."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except Exception:
            return str(result)
    return str(result)


def _outcome(fn, value):  # noqa: ANN001, ANN202
    try:
        return fn(value)
    except Exception as e:  # the same exception type is part of the same behaviour
        return type(e).__name__


def test_serialise_is_bfcls() -> None:
    circular: dict = {}
    circular["self"] = circular
    inner: list = []
    through_list = {"l": inner}
    inner.append(through_list)
    deep = node = {}
    for _ in range(5_000):
        node["a"] = {}
        node = node["a"]
    nested = node = {}
    for _ in range(500):
        node["a"] = {}
        node = node["a"]
    values = [circular, through_list, deep, nested, {"n": float("nan"), "i": float("-inf")},
              {1: 2, 2.5: 3, False: 1, None: 2}, {(1, 2): 3}, {"s": {1, 2}}, {"o": object()},
              {"é": "ü\x00"}, {"k": [1, {"x": (1, 2)}]}, {"big": 10**30}, "text", 3, None,
              [1, 2], {"nan": [float("nan")]}]
    for value in values:
        assert _outcome(serialise, value) == _outcome(_bfcl_serialise, value)


@pytest.fixture(scope="module")
def traces(shared_runs: Path) -> list:
    by_model, _ = discover(shared_runs / "xlam-2-8b-fc-r")
    model, files = next(iter(by_model.items()))
    handler = bfcl.handler(bfcl.registry_key_for_dir(model))
    out = []
    for rf in files:
        loaded = load_result_file(rf)
        proc = BfclProcess()
        out += [replay(bfcl.conversation(e["id"]), decode_entry(e, handler), model_name=model,
                       process=proc) for e in loaded.entries.values()]
    return out


def _slow_differing(a: State, b: State) -> list[tuple]:
    return [ch.path for ch in diff(_public(a), _public(b))]


def test_differing_attributes_are_the_full_public_diff(traces: list) -> None:
    compared = 0
    for trace in traces:
        if trace.model is None:
            continue
        for ref_end, model_end in zip(trace.reference.turn_end_states,
                                      trace.model.turn_end_states, strict=False):
            fresh = [State(dict(s._blobs)) for s in (ref_end, model_end)]  # nothing cached
            assert _differing(*fresh) == _slow_differing(ref_end, model_end), trace.id
            compared += 1
    assert compared > 1_000


def test_changes_of_some_classes_are_those_of_the_full_diff() -> None:
    """``diff(..., classes)`` (blame reads a call's changes in the differing classes only)
    keeps exactly the full diff's changes in those classes, in its order."""

    class Sim:
        pass

    sims = {name: Sim() for name in ("A", "B", "C")}
    for k, sim in enumerate(sims.values()):
        sim.items, sim._hidden = {"x": k, "y": [k]}, k
    before = State.of(sims)
    for sim in sims.values():
        sim.items, sim._hidden = {"x": 9, "z": 1}, 7
    after = State.of(sims)
    full = diff(before, after)
    assert {ch.path[0] for ch in full} == {"A", "B", "C"}
    for classes in ({"A"}, {"B", "C"}, set(), {"D"}):
        assert diff(before, after, classes) == [ch for ch in full if ch.path[0] in classes]


def test_equal_captures_holding_a_nan_still_differ_as_bfcl_compares() -> None:
    """Plain forms made twice from one capture with a NaN compare unequal (``nan != nan``):
    the fast path may skip equal captures only where no NaN can be."""

    class Sim:
        pass

    sim = Sim()
    sim.balance, sim.name = float("nan"), "x"
    a, b = State({"Sim": capture(sim)}), State({"Sim": capture(sim)})
    assert a._blobs == b._blobs
    slow = _slow_differing(a, b)
    assert slow == [("Sim", "balance")]
    assert _differing(State(dict(a._blobs)), State(dict(b._blobs))) == slow
    sim.balance = 2.0  # no NaN: equal captures are skipped, as the slow path finds nothing
    a, b = State({"Sim": capture(sim)}), State({"Sim": capture(sim)})
    assert _differing(a, b) == _slow_differing(a, b) == []


def test_rule_shortcuts_skip_only_what_counts_nothing(traces: list) -> None:
    """A turn with fewer than two non-idempotent writes (reads) has no duplicate write
    (redundant read); a successful parsed call whose result is no error message has not
    errored."""
    effects = rules._Kinds(load_effects())
    turns = 0
    for trace in traces:
        for model in trace.model.turns if trace.model else []:
            writes = sum(effects.non_idempotent_write(r.call.name) for r in model)
            reads = sum(effects.pure_read(r.call.name) for r in model)
            if writes < 2:
                assert rules._duplicates(model, effects) == ({}, {})
            if reads < 2:
                assert rules._redundant(model, effects) == ({}, {})
            for r in model:
                if r.success and isinstance(r.call, calls.Call) \
                        and not r.result.startswith("Error"):
                    assert not rules.errored(r)
            turns += 1
    assert turns > 500


def _long_only_objects() -> bytes:
    long_only = scope._process_bound()[1]
    return pickle.dumps([live for c, _, live, _ in process.shared_objects() if c in long_only])


def test_conversations_reach_only_their_process_objects(shared_runs: Path) -> None:
    """Outside long context, TravelAPI and VehicleControlAPI never read or change bfcl's
    long-context module data: every such reference, and the real run's model calls, leave it
    as it was (replay checkpoints and restores only what a conversation can reach)."""
    BfclProcess()
    before = _long_only_objects()
    long_only = scope._process_bound()[1]
    by_model, _ = discover(shared_runs / "xlam-2-8b-fc-r")
    model, files = next(iter(by_model.items()))
    handler = bfcl.handler(bfcl.registry_key_for_dir(model))
    checked = 0
    for rf in files:
        if rf.category == "multi_turn_long_context":
            continue
        proc = BfclProcess(fresh=False)
        for e in load_result_file(rf).entries.values():
            conv = bfcl.conversation(e["id"])
            if not set(conv.involved_classes) & long_only:
                continue
            assert not conv.long_context
            assert not set(refcache.process_classes(conv)) & long_only
            replay(conv, decode_entry(e, handler), model_name=model, process=proc)
            replay(conv, reference_trajectory(conv.id, conv.ground_truth), process=proc)
            checked += 1
    assert checked > 100
    assert _long_only_objects() == before
    travel = next(c for c in bfcl.conversations("multi_turn_long_context")
                  if "TravelAPI" in c.involved_classes)
    assert "TravelAPI" in refcache.process_classes(travel)


@pytest.mark.parametrize(("category", "guarded"), [("multi_turn_base", True),
                                                   ("multi_turn_long_context", False)])
def test_process_bound_references_clone_kept_templates(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path, category: str,
                                                       guarded: bool) -> None:
    """A process-bound reference is replayed live the first time; after its first load its
    instances are cloned from the kept templates (in memory, then from the disk entry), and
    the replay is the same as a fresh load's. A guarded one (TwitterAPI's) is recorded the
    second time and then taken from the cache; long-context data's are always live. A
    malformed kept entry is made again."""
    monkeypatch.setenv("CAREFUL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CAREFUL_REFCACHE", "on")
    convs = [c for c in bfcl.conversations(category) if refcache.depends_on_process(c)
             and refcache.guardable(c) == guarded][:6]
    assert convs
    kinds = reference_sides(monkeypatch)
    loads = []
    real_load = environment.Environment._load

    def counting(self, class_name, initial_config):  # noqa: ANN001, ANN202
        loads.append(class_name)
        return real_load(self, class_name, initial_config)

    monkeypatch.setattr(environment.Environment, "_load", counting)

    def run() -> list[str]:
        environment.clear_caches()
        calls.clear_caches()
        proc = BfclProcess()
        return [fingerprint(replay(c, reference_trajectory(c.id, c.ground_truth),
                                    model_name="m", process=proc)) for c in convs]

    refcache.clear_memory()
    monkeypatch.setenv("CAREFUL_REFCACHE", "off")
    live = run()
    assert loads
    monkeypatch.setenv("CAREFUL_REFCACHE", "on")
    kinds.clear()
    first = run()
    loads.clear()
    again = run()  # in memory
    kept = [c for c in loads if c != "GorillaFileSystem"]  # pickled trees: memory only
    assert not loads, loads
    refcache.flush()
    refcache.clear_memory()
    loads.clear()
    disk = run()
    assert not [c for c in loads if c != "GorillaFileSystem"], kept
    assert live == first == again == disk
    n = len(convs)
    assert kinds == ["LoadedSide"] * n + (["RecordingSide"] * n + ["CachedSide+guards"] * n
                                          if guarded else ["LoadedSide"] * 2 * n)
    # a malformed entry: dropped, loaded again, the same replay
    cat = store._category(category)
    cat.loads.clear()
    cat.held.clear()
    cat.decoded.pop(convs[0].id, None)
    cat.entries[convs[0].id] = {"loads": {"TwitterAPI": (b"not marshal", None)}}
    loads.clear()
    assert run() == live
    assert loads and cat.entries[convs[0].id] != {"loads": {"TwitterAPI": (b"not marshal",
                                                                          None)}}
    refcache.clear_memory()


def test_state_check_skips_only_classes_bfcl_finds_equal(shared_runs: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With the states given, bfcl's state check skips classes whose captures are equal
    and hold no NaN: its verdict is the full check's at every checkpoint of a real run."""
    from careful_engine.core import checker

    full = checker.state_check
    seen = {"checks": 0, "mismatches": 0}

    def both(model, reference, turn, same=None):  # noqa: ANN001, ANN202
        fast = full(model, reference, turn, same)
        slow = full(model, reference, turn)
        assert (fast.to_json() if fast else None) == (slow.to_json() if slow else None)
        seen["checks"] += 1
        seen["mismatches"] += slow is not None
        return fast

    monkeypatch.setattr(checker, "state_check", both)
    for run in ("xlam-2-8b-fc-r", "gpt-oss-120b-vllm-v0.11.0"):
        by_model, _ = discover(shared_runs / run)
        model, files = next(iter(by_model.items()))
        handler = bfcl.handler(bfcl.registry_key_for_dir(model) if run.startswith("xlam")
                               else "gpt-4o-2024-11-20-FC")
        for rf in files:
            proc = BfclProcess()
            for e in load_result_file(rf).entries.values():
                replay(bfcl.conversation(e["id"]), decode_entry(e, handler), model_name=model,
                       process=proc)
    assert seen["checks"] > 2_000 and seen["mismatches"] > 100


_BUFFERS = (bytes, bytearray, memoryview)


def _buffers(root: object) -> list[str]:
    """Bytes-like values anywhere in a simulator's state (marshal writes any as bytes)."""
    found, seen, work = [], set(), [root]
    while work:
        value = work.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, _BUFFERS) or type(value).__name__ == "array":
            found.append(type(value).__name__)
        elif isinstance(value, dict):
            work.extend(value)
            work.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            work.extend(value)
        elif hasattr(value, "__dict__"):
            work.extend(vars(value).values())
    return found


def test_simulators_hold_no_bytes_like_values() -> None:
    """What the state check's shortcut relies on: after every reference call of every
    category, no simulator instance holds a bytes-like value."""
    for category in bfcl.CATEGORIES:
        for conv in bfcl.conversations(category):
            env = environment.Environment.for_conversation(conv, "reference")
            for t, texts in enumerate(conv.ground_truth):
                for text in texts:
                    env.execute(text, t, -1)
                for name, instance in env.instances.items():
                    assert not _buffers(vars(instance)), (conv.id, name)


def test_scenario_loader_loads_as_bfcls_own() -> None:
    """bfcl's ``_load_scenario`` with its deepcopy of plain data done by marshal gives every
    instance of every category what bfcl's own method gives (values, types, random state,
    attribute order); bfcl's module keeps copy.deepcopy."""
    import copy
    import sys

    n = 0
    for category in bfcl.CATEGORIES:
        for conv in bfcl.conversations(category):
            for c in conv.involved_classes:
                load = bfcl.scenario_loader(c)
                if load is None:
                    continue
                cls = bfcl.simulator_class(c)
                assert sys.modules[cls.__module__].deepcopy is copy.deepcopy
                own, fast = cls(), cls()
                config = conv.initial_config.get(c, {})
                own._load_scenario(copy.deepcopy(config), long_context=conv.long_context)
                load(fast, copy.deepcopy(config), long_context=conv.long_context)
                assert list(vars(own)) == list(vars(fast))
                assert capture(own) == capture(fast), (conv.id, c)
                if c != "GorillaFileSystem":  # (its files carry wall-clock stamps)
                    a, b = dict(vars(own)), dict(vars(fast))
                    ra, rb = a.pop("_random", None), b.pop("_random", None)
                    assert pickle.dumps(a, 4) == pickle.dumps(b, 4), (conv.id, c)
                    assert (ra is None) == (rb is None)
                    assert ra is None or ra.getstate() == rb.getstate()
                n += 1
    assert n > 1000


def test_seeded_state_is_the_loaded_generators_state() -> None:
    """Every generator a loader of bfcl.scenario_loader creates is in the state
    ``random.Random(seed)`` has, and the state bfcl.seeded_state gives for it (instead of
    reading it) is the one it holds when the load returns: for every class of every
    conversation of every category, and for an environment's templates."""
    import copy

    n = 0
    for category in bfcl.CATEGORIES:
        for conv in bfcl.conversations(category):
            for c in conv.involved_classes:
                load = bfcl.scenario_loader(c)
                if load is None:
                    continue
                own, fast = bfcl.simulator_class(c)(), bfcl.simulator_class(c)()
                config = conv.initial_config.get(c, {})
                own._load_scenario(copy.deepcopy(config), long_context=conv.long_context)
                load(fast, copy.deepcopy(config), long_context=conv.long_context)
                rng = vars(fast).get("_random")
                if rng is None:
                    continue
                state = bfcl.seeded_state(rng)
                assert state is not None, (conv.id, c)  # (every loader is draw-free)
                assert state == rng.getstate() == vars(own)["_random"].getstate()
                assert bfcl.seeded_state(rng) is None  # asked once
                n += 1
        environment.clear_caches()
        for conv in bfcl.conversations(category)[:40]:
            ref = environment.Environment.for_conversation(conv, "reference")
            model = environment.Environment.for_conversation(conv, "model")
            for c, inst in ref.instances.items():
                rng = vars(inst).get("_random")
                if rng is not None:
                    assert vars(model.instances[c])["_random"].getstate() == rng.getstate()
    assert n > 500


def test_seeded_state_needs_a_draw_free_loader() -> None:
    """A loader that draws from its generator, in its own code, in a method it calls (from a
    comprehension too), that hands ``self`` or the generator elsewhere, or whose seed takes a
    branch (beyond the check), is not draw-free: bfcl.seeded_state
    gives nothing for what it creates, and the state is read."""
    from careful_engine.core.bfcl import simulators

    def hand_on(obj: object) -> None:
        obj._random.random()

    def hand_on_rng(rng: random.Random) -> None:
        rng.random()

    class Draws:
        def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
            self._random = random.Random(5)
            self.x = self._random.randint(1, 9)

    class Helper:
        def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
            self._random = random.Random(5)
            self.y = [x for x in self._pick()]

        def _pick(self) -> list:
            return [self._random.choice([1, 2])]

    class HandsOn:
        def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
            self._random = random.Random(5)
            hand_on(self)

    class Stashes:
        def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
            rng = random.Random(5)
            hand_on_rng(rng)
            self._random = rng

    class Branches:
        def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
            self._random = random.Random(scenario.get("seed") if scenario else 5)

    class Clean:
        def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
            self._random = random.Random(scenario.get("seed", 5))
            self.z = [k for k in scenario if self.z0 != k]
            self._set()

        z0 = 0

        def _set(self) -> None:
            self.w = 1

    for cls in (Draws, Helper, HandsOn, Stashes, Branches):
        assert not simulators._draw_free(cls, cls._load_scenario), cls.__name__
    assert simulators._draw_free(Clean, Clean._load_scenario)
    shim = simulators._SeedingRandom(False)  # as a loader that draws gets it
    rng = shim.Random(5)
    assert rng.getstate() == random.Random(5).getstate()
    assert bfcl.seeded_state(rng) is None
    rng = simulators._SeedingRandom(True).Random(5)
    rng.random()  # (a draw after the load: what the proof rules out)
    assert bfcl.seeded_state(rng) == random.Random(5).getstate()
    assert simulators._SeedingRandom(True).Random("text").getstate() == \
        random.Random("text").getstate()


def test_random_states_shared_by_value() -> None:
    """Equal random states of instance templates become one object (a cache file holds it
    once); a state that differs stays its own, one found by the same few words included."""
    import random

    a, b = random.Random(7).getstate(), random.Random(7).getstate()
    assert a is not b and environment._shared(a) is environment._shared(b)
    words = list(a[1])
    words[300] ^= 1  # (the words the lookup starts from are a's)
    odd = (a[0], tuple(words), a[2])
    assert environment._shared(odd) is odd
    assert environment._shared((odd[0], tuple(words), odd[2])) is odd
    assert environment._shared(a) == a and environment._shared(a) is not odd
    other = random.Random(8).getstate()
    assert environment._shared(other) == other and environment._shared(other) is not a


def test_plain_deepcopy_is_deepcopy() -> None:
    """The same values, types and sharing as copy.deepcopy; what is not plain data (a
    subclass, bytes-like values, objects) is copy.deepcopy's own."""
    import copy
    from collections import OrderedDict

    shared = [1, 2.5, float("nan"), -0.0]
    plain = {"a": shared, "b": shared, "c": (shared, "x"), "d": {1: None, "e": True}}
    got = bfcl.plain_deepcopy(plain)
    assert got is not plain and got["a"] is got["b"] is got["c"][0] and got["a"] is not shared
    assert pickle.dumps(got, 4) == pickle.dumps(copy.deepcopy(plain), 4)
    # a set keeps the order its items went in where they collide (9 and 1 share a slot):
    # deepcopy's copy iterates as the original does; a marshal round trip would not (marshal
    # sorts a set's items), so sets are not plain data here (MessageAPI's generated_ids)
    ids = set()
    ids.add(9)
    ids.add(1)
    assert list(bfcl.plain_deepcopy({"ids": ids})["ids"]) == list(copy.deepcopy(ids)) == [9, 1]
    for odd in ({"b": bytearray(b"x")}, OrderedDict(a=[1]), {"s": {1, 2}}, [Path("/x")],
                {"m": memoryview(b"y")}):
        got = _outcome(bfcl.plain_deepcopy, odd)
        want = _outcome(copy.deepcopy, odd)
        if type(want) is str:  # the same exception
            assert got == want
        else:
            assert type(got) is type(odd) and pickle.dumps(got) == pickle.dumps(want)
