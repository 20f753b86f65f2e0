"""Synthetic probes (source (c) of §4): each function called from sampled states.

For each class, up to :data:`STATES_PER_CLASS` states are sampled (seeded) among the initial
state and the state after each reference turn of the multi_turn_base conversations that
involve the class. Each function is then called from those states until
:data:`TARGET_SUCCESSES` distinct calls succeed or :data:`MAX_ATTEMPTS` calls were made:

1. with the argument sets of the function's reference calls (all four categories), first
   from states of the conversation the set comes from, then from the other sampled states;
2. where there are none, or they run out before the target, with argument sets synthesised
   from the doc's parameter types, drawing values from the sampled state (every key and
   scalar in the class's snapshot: file names, user ids, order ids, symbols...) and a few
   generic ones, or from the values a doc lists (``[Enum]: ...``); optional parameters are
   included with probability 1/2.

Everything is drawn from ``random.Random`` seeded with :data:`SEED` and the function name, so
a function's probes do not depend on which other functions are probed.
"""

from __future__ import annotations

import json
import pickle
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.budget import BudgetExceeded
from careful_engine.core.calls import Call, format_call, parse_call
from careful_engine.core.environment import Environment
from careful_engine.core.state import capture, materialise
from careful_engine.effects.observe import (
    Recorder,
    bound_arguments,
    environment,
    normalise,
    with_instance,
)

SEED = "careful-bench/effects/probes/v1"
PROBE_CATEGORY = "multi_turn_base"
STATES_PER_CLASS = 40
TARGET_SUCCESSES = 20
MAX_ATTEMPTS = 200
MAX_REFERENCE_ATTEMPTS = 160
GENERIC = {
    "string": ("test", "..", "1"),
    "integer": (0, 1, 2, 10),
    "float": (0.0, 1.0, 2.5, 100.0),
}
MAX_POOL_STRING = 200

SETTINGS = {
    "seed": SEED,
    "probe_category": PROBE_CATEGORY,
    "states_per_class": STATES_PER_CLASS,
    "target_successes": TARGET_SUCCESSES,
    "max_attempts": MAX_ATTEMPTS,
    "max_reference_attempts": MAX_REFERENCE_ATTEMPTS,
}


@dataclass(frozen=True)
class SampledState:
    """One class's state in one conversation: initial (``after_turn`` -1) or after a turn."""

    conv: bfcl.Conversation
    after_turn: int
    instance: bytes  # the pickled instance
    captured: bytes  # its capture (state.capture)

    @property
    def index(self) -> str:
        return self.conv.id.rsplit("_", 1)[1]

    @property
    def where(self) -> str:
        if self.after_turn < 0:
            return f"probe from the initial state of {self.conv.id}"
        return f"probe from {self.conv.id} after turn {self.after_turn}"


def sample_points(class_name: str) -> list[tuple[bfcl.Conversation, int]]:
    """The sampled (conversation, after_turn) points of one class, in dataset order."""
    convs = [c for c in bfcl.conversations(PROBE_CATEGORY) if class_name in c.involved_classes]
    points = [(c, k) for c in convs for k in range(-1, len(c.ground_truth))]
    if len(points) > STATES_PER_CLASS:
        order = {c.id: i for i, c in enumerate(convs)}
        chosen = random.Random(f"{SEED}|states|{class_name}").sample(points, STATES_PER_CLASS)
        points = sorted(chosen, key=lambda p: (order[p[0].id], p[1]))
    return points


def sample_states(classes: tuple[str, ...] = bfcl.CLASSES) -> dict[str, list[SampledState]]:
    """Replay the reference turns that lead to every sampled state and keep copies."""
    wanted: dict[str, dict[int, set[str]]] = {}
    convs: dict[str, bfcl.Conversation] = {}
    for cls in classes:
        for conv, k in sample_points(cls):
            wanted.setdefault(conv.id, {}).setdefault(k, set()).add(cls)
            convs[conv.id] = conv
    kept: dict[tuple[str, int, str], SampledState] = {}
    for conv_id, points in wanted.items():
        conv = convs[conv_id]
        env = environment(conv)

        def keep(k: int, env: Environment = env, conv: bfcl.Conversation = conv,
                 points: dict = points) -> None:
            for cls in sorted(points.get(k, ())):
                inst = env.instances[cls]
                kept[(conv.id, k, cls)] = SampledState(
                    conv, k, pickle.dumps(inst, pickle.HIGHEST_PROTOCOL), capture(inst))

        keep(-1)
        for k, turn in enumerate(conv.ground_truth):
            env.execute_all(turn)
            keep(k)
    return {cls: [kept[(c.id, k, cls)] for c, k in sample_points(cls)] for cls in classes}


@cache
def reference_arguments() -> dict[str, tuple[tuple[dict, frozenset[str]], ...]]:
    """function -> distinct argument sets of its reference calls, with the conversation
    numbers (the id's index, shared by the four categories) that use each."""
    names = frozenset(bfcl.function_class())
    found: dict[str, dict[str, tuple[dict, set[str]]]] = {}
    for category in bfcl.CATEGORIES:
        for conv in bfcl.conversations(category):
            index = conv.id.rsplit("_", 1)[1]
            for turn in conv.ground_truth:
                for text in turn:
                    call = parse_call(text, methods=names)
                    if not isinstance(call, Call):
                        continue
                    args = bound_arguments(call)
                    if args is None:
                        continue
                    entry = found.setdefault(call.name, {}).setdefault(
                        normalise(call), (args, set()))
                    entry[1].add(index)
    return {
        name: tuple((args, frozenset(ids)) for _, (args, ids) in sorted(sets.items()))
        for name, sets in sorted(found.items())
    }


@dataclass
class Pools:
    """Values present in a sampled state, by type."""

    strings: list[str]
    integers: list[int]
    floats: list[float]


_MARKERS = frozenset({"__dir__", "__file__", "__set__", "__object__"})


def state_pools(snapshot: dict[str, Any]) -> Pools:
    strings: set[str] = set()
    integers: set[int] = set()
    floats: set[float] = set()

    def add(v: Any) -> None:
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, str):
            if v and len(v) <= MAX_POOL_STRING and v not in _MARKERS:
                strings.add(v)
        elif isinstance(v, int):
            integers.add(v)
        elif isinstance(v, float):
            floats.add(v)

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                add(k)
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        else:
            add(v)

    for key, value in snapshot.items():
        if not key.startswith("_"):
            walk(value)
    return Pools(sorted(strings), sorted(integers), sorted(floats))


_ENUM = re.compile(r"\[Enum\]:\s*(.+?)\s*$", re.S)


def doc_enum(spec: dict) -> list | None:
    """Allowed values: an ``enum`` key, or the ``[Enum]: ...`` list bfcl's docs write in the
    description (a JSON list or comma-separated names)."""
    if spec.get("enum"):
        return list(spec["enum"])
    m = _ENUM.search(spec.get("description") or "")
    if not m:
        return None
    text = m.group(1)
    if text.startswith("["):
        try:
            values = json.loads(text[: text.index("]") + 1])
        except (ValueError, json.JSONDecodeError):
            return None
        return values if isinstance(values, list) and values else None
    values = [v.strip() for v in text.rstrip(".").split(",") if v.strip()]
    return values or None


def synthesise(spec: dict, pools: Pools, rng: random.Random) -> Any:
    """A value for one parameter of a function doc."""
    kind = spec.get("type")
    enum = doc_enum(spec)
    if enum and kind in ("array", "tuple"):
        return rng.sample(enum, rng.randint(1, len(enum)))
    if enum:
        return rng.choice(enum)
    if kind == "string":
        return rng.choice(pools.strings + list(GENERIC["string"]))
    if kind == "integer":
        return rng.choice(pools.integers + list(GENERIC["integer"]))
    if kind == "float":
        return rng.choice(pools.floats + [float(i) for i in pools.integers]
                          + list(GENERIC["float"]))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("array", "tuple"):
        items = spec.get("items") or {"type": "string"}
        return [synthesise(items, pools, rng) for _ in range(rng.randint(1, 3))]
    if kind in ("dict", "object"):
        props = spec.get("properties") or {}
        out = {k: synthesise(v, pools, rng) for k, v in props.items() if rng.random() < 0.5}
        if props and not out:
            k = rng.choice(sorted(props))
            out[k] = synthesise(props[k], pools, rng)
        return out
    return rng.choice(pools.strings + list(GENERIC["string"]))


def synthesise_arguments(doc: dict, pools: Pools, rng: random.Random) -> dict[str, Any]:
    params = doc.get("parameters") or {}
    required = set(params.get("required") or ())
    out = {}
    for name, spec in (params.get("properties") or {}).items():
        if name in required or rng.random() < 0.5:
            out[name] = synthesise(spec, pools, rng)
    return out


@dataclass
class ProbeStats:
    attempts: int = 0
    successful: int = 0
    synthesised: int = 0


def probe_function(name: str, states: list[SampledState], recorder: Recorder,
                   envs: dict[str, Environment], pools: dict[tuple[str, int], Pools]
                   ) -> ProbeStats:
    """Call one function from the sampled states until the target is reached."""
    cls = bfcl.function_class()[name]
    doc = bfcl.all_func_docs()[name]
    rng = random.Random(f"{SEED}|{name}")
    refs = reference_arguments().get(name, ())
    own = [(s, a) for s in states for a, ids in refs if s.index in ids]
    cross = [(s, a) for s in states for a, ids in refs if s.index not in ids]
    rng.shuffle(own)
    rng.shuffle(cross)
    planned = (own + cross)[:MAX_REFERENCE_ATTEMPTS]
    stats = ProbeStats()
    tried: set[tuple[str, int, str]] = set()

    def attempts():
        for s, a in planned:
            yield s, a, False
        i = 0
        while True:
            s = states[i % len(states)]
            key = (s.conv.id, s.after_turn)
            if key not in pools:
                pools[key] = state_pools(materialise(s.captured))
            yield s, synthesise_arguments(doc, pools[key], rng), True
            i += 1

    for state, args, synthetic in attempts():
        if stats.successful >= TARGET_SUCCESSES or stats.attempts >= MAX_ATTEMPTS:
            break
        stats.attempts += 1
        stats.synthesised += synthetic
        text = format_call(name, args)
        key = (state.conv.id, state.after_turn, text)
        if key in tried:
            continue
        tried.add(key)
        if state.conv.id not in envs:
            envs[state.conv.id] = environment(state.conv)
        env = with_instance(envs[state.conv.id], cls, pickle.loads(state.instance),
                            state.captured)
        before = env.state
        try:
            ex = env.execute(text)
            if not ex.parsed:
                continue
            stats.successful += ex.success
            recorder.record("probes", state.where, before, ex,
                            lambda env=env, text=text: env.execute(text))
        except BudgetExceeded:  # a folder copied into itself: a state with no snapshot
            recorder.unrepresentable[name] += 1
            envs.pop(state.conv.id, None)
            continue
    return stats


def run_probes(recorder: Recorder, progress: Callable[[int], None] | None = None
               ) -> tuple[dict[str, Any], dict[str, ProbeStats]]:
    """Probe all 128 functions; returns the source summary and per-function stats."""
    states = sample_states()
    envs: dict[str, Environment] = {}
    pools: dict[tuple[str, int], Pools] = {}
    per_function: dict[str, ProbeStats] = {}
    for cls in bfcl.CLASSES:
        for doc in bfcl.func_docs(cls):
            name = doc["name"]
            per_function[name] = probe_function(name, states[cls], recorder, envs, pools)
            if progress:
                progress(1)
    counts = Counter()
    for st in per_function.values():
        counts["calls"] += st.attempts
        counts["successful"] += st.successful
        counts["synthesised_argument_sets"] += st.synthesised
        counts["functions_reaching_target"] += st.successful >= TARGET_SUCCESSES
    summary = {
        **SETTINGS,
        "sampled_states": {cls: len(states[cls]) for cls in bfcl.CLASSES},
        **{k: counts[k] for k in sorted(counts)},
        "observations": recorder.new_by_source["probes"],
    }
    return summary, per_function
