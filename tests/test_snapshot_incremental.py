"""The file system's incremental snapshots equal a full capture after every call.

The tracker predicts from each method which entries a call can change; these tests check the
prediction against a full plain snapshot of the live instance after every call: on random
call sequences over a small pool of names (so copies share children, moves share contents,
and changes to shared objects show at several paths), on every reference conversation, and on
the real runs' decoded model calls. The per-call diff taken from the log must equal the diff
of the two full snapshots.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from careful_engine.core import bfcl
from careful_engine.core.budget import BudgetExceeded, Meter
from careful_engine.core.environment import Environment
from careful_engine.core.fs_capture import CLASS, TreeVersion
from careful_engine.core.state import State, diff, snapshot_instance

NAMES = ["a", "b", "c", "f.txt", "g", ".", ".."]


def _changes(before: dict, after: dict) -> list:
    return sorted(((c.path, c.kind) for c in diff({CLASS: before}, {CLASS: after})), key=repr)


def _check_call(env: Environment, text: str) -> None:
    before_state = env.state
    before_plain = snapshot_instance(env.instances[CLASS])
    rec = env.execute(text)
    after_plain = snapshot_instance(env.instances[CLASS])
    assert env.state[CLASS] == after_plain, text
    if rec.class_name == CLASS:
        got = sorted(((c.path, c.kind) for c in rec.diff() if c.path[0] == CLASS), key=repr)
        assert got == _changes(before_plain, after_plain), text
        # equality through the content hash agrees with plain equality
        fresh = State({CLASS: env.state.blob(CLASS)})
        assert fresh.same_as(before_state, CLASS) == (before_plain == after_plain), text


def _random_call(rng: random.Random) -> str:
    name = rng.choice(["mkdir", "cd", "touch", "echo", "mv", "cp", "rm", "rmdir", "ls", "cat"])
    n1, n2 = rng.choice(NAMES), rng.choice(NAMES)
    if name in ("mkdir", "rmdir"):
        return f"{name}(dir_name={n1!r})"
    if name == "cd":
        return f"cd(folder={rng.choice(NAMES + ['/'])!r})"
    if name in ("touch", "rm", "cat"):
        return f"{name}(file_name={n1!r})"
    if name == "echo":
        return f"echo(content={rng.choice(['x', 'y', ''])!r}, file_name={n1!r})"
    if name in ("mv", "cp"):
        if n1 in (".", "..") and rng.random() < 0.9:  # copying "." copies the directory itself
            n1 = rng.choice(NAMES[:5])
        while n2 == n1 and rng.random() < 0.95:  # a copy into itself ends the sequence
            n2 = rng.choice(NAMES)
        return f"{name}(source={n1!r}, destination={n2!r})"
    return "ls(a=True)"


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_match_a_full_capture(seed: int) -> None:
    rng = random.Random(seed)
    conv = bfcl.conversation(rng.choice(["multi_turn_base_1", "multi_turn_base_0",
                                         "multi_turn_long_context_2"]))
    env = Environment.for_conversation(conv, "model", model_name=f"fuzz{seed}", meter=Meter())
    for _ in range(250):
        try:
            _check_call(env, _random_call(rng))
        except BudgetExceeded:
            return  # a copy into itself: the conversation stops there


def _fs_conversations() -> list[bfcl.Conversation]:
    return [c for cat in bfcl.CATEGORIES for c in bfcl.conversations(cat)
            if CLASS in c.involved_classes]


def test_reference_conversations_match_a_full_capture() -> None:
    for conv in _fs_conversations():
        env = Environment.for_conversation(conv, "reference", model_name="incremental")
        for turn in conv.ground_truth:
            for text in turn:
                _check_call(env, text)
        assert type(env.state.blob(CLASS)) in (TreeVersion, bytes)


RUNS = Path(__file__).resolve().parents[2] / "shared" / "runs"


@pytest.mark.skipif(not RUNS.is_dir(), reason="no real runs")
def test_real_runs_match_a_full_capture() -> None:
    from careful_engine.core.decode import decode_entry
    from careful_engine.core.runs import load_result_file
    from careful_engine.scoring.score import discover

    checked = 0
    for run in sorted(p for p in RUNS.iterdir() if p.is_dir()):
        by_model, _ = discover(run)
        for model, files in by_model.items():
            key = {"openai_gpt-oss-120b": "gpt-4o-2024-11-20-FC",
                   "glyphh-ada-1.1": "gpt-4o-2024-11-20-FC",
                   "deepseek-ai_DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1"}.get(
                model, bfcl.registry_key_for_dir(model))
            handler = bfcl.handler(key)
            for rf in files:
                for entry_id, entry in load_result_file(rf).entries.items():
                    conv = bfcl.conversation(entry_id)
                    if CLASS not in conv.involved_classes:
                        continue
                    traj = decode_entry(entry, handler)
                    env = Environment.for_conversation(conv, "model", model_name="runs")
                    for turn in traj.turns or []:
                        for step in turn:
                            for text in step.calls:
                                _check_call(env, text)
                                checked += 1
    assert checked > 1000
