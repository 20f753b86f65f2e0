"""The engine's executor against bfcl-eval's ``execute_multi_turn_func_call``, run at test time.

All 800 reference trajectories, call by call (result strings) and after every turn (the full
state of every instance, private attributes included, and bfcl's own public-attribute
comparison).
"""

from __future__ import annotations

import pytest

from careful_engine import bfcl
from careful_engine.checker import compare_instances
from careful_engine.environment import Environment, TravelExtensions
from careful_engine.state import snapshot_instance

from .bfcl_oracle import fresh_process_state, multi_turn_utils

TAG = "careful_oracle"


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_reference_replay_matches_bfcl_executor(category: str) -> None:
    execute = multi_turn_utils().execute_multi_turn_func_call
    fresh_process_state()
    pool = TravelExtensions()  # stands for bfcl's module-level data over the whole category
    calls = turns = 0
    for conv in bfcl.conversations(category):
        env = Environment(conv.initial_config, conv.involved_classes,
                          long_context=conv.long_context, name_prefix=TAG,
                          entry_id=conv.id, extensions=pool)
        for t, gt_turn in enumerate(conv.ground_truth):
            theirs, instances = execute(gt_turn, conv.initial_config, list(conv.involved_classes),
                                        TAG, conv.id, long_context=conv.long_context)
            ours = [env.execute(c).result for c in gt_turn]
            assert ours == theirs, f"{conv.id} turn {t}: results differ"
            for name, inst in instances.items():
                mine = env.instances[name]
                theirs_state = snapshot_instance(inst)
                assert snapshot_instance(mine) == theirs_state, (
                    f"{conv.id} turn {t}: {name} state differs")
                # the compact per-call capture materialises to the same plain state
                assert env.state[name] == theirs_state, f"{conv.id} turn {t}: {name} capture"
                assert compare_instances(mine, inst) == {}, f"{conv.id} turn {t}: {name}"
            calls += len(gt_turn)
            turns += 1
    fresh_process_state()
    expected_turns = 734 if category in ("multi_turn_base", "multi_turn_long_context") else 934
    assert turns == expected_turns
    assert calls == sum(len(t) for c in bfcl.conversations(category) for t in c.ground_truth)


def test_dataset_counts() -> None:
    """The paper's counts on this data: 200 conversations, 734 turns, 1,142 calls in base."""
    base = bfcl.conversations("multi_turn_base")
    assert len(base) == 200
    assert sum(len(c.ground_truth) for c in base) == 734
    assert sum(len(t) for c in base for t in c.ground_truth) == 1142
    assert sum(len(bfcl.conversations(c)) for c in bfcl.CATEGORIES) == 800
    assert len(bfcl.all_func_docs()) == 128
    assert sum(len(bfcl.public_methods(c)) for c in bfcl.CLASSES) == 128
    for c in bfcl.CLASSES:
        assert bfcl.public_methods(c) == {d["name"] for d in bfcl.func_docs(c)}
