"""The engine's executor against bfcl-eval's ``execute_multi_turn_func_call``, run at test time.

All 800 reference trajectories, call by call (result strings) and after every turn (the full
state of every instance, private attributes included, and bfcl's own public-attribute
comparison).
"""

from __future__ import annotations

import pytest

from careful_engine.core import bfcl
from careful_engine.core.checker import compare_instances
from careful_engine.core.environment import Environment
from careful_engine.core.process import BfclProcess
from careful_engine.core.state import snapshot_instance

from .bfcl_oracle import fresh_process_state, multi_turn_utils

TAG = "careful_oracle"


def _bfcl_side(category: str) -> list[list[tuple[list[str], dict[str, dict], dict]]]:
    """bfcl's executor over the category in one fresh process state: per conversation, per
    turn, the results, the state of every instance and the instances themselves."""
    execute = multi_turn_utils().execute_multi_turn_func_call
    fresh_process_state()
    out = []
    for conv in bfcl.conversations(category):
        turns = []
        for gt_turn in conv.ground_truth:
            results, instances = execute(gt_turn, conv.initial_config,
                                         list(conv.involved_classes), TAG, conv.id,
                                         long_context=conv.long_context)
            states = {n: snapshot_instance(i) for n, i in instances.items()}
            turns.append((results, states, dict(instances)))
        out.append(turns)
    return out


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_reference_replay_matches_bfcl_executor(category: str) -> None:
    theirs_all = _bfcl_side(category)
    BfclProcess()  # the engine's run starts, like bfcl's, from a fresh process state
    calls = turns = 0
    for conv, theirs_turns in zip(bfcl.conversations(category), theirs_all, strict=True):
        # the second environment of a conversation is cloned from the first one's templates:
        # the clone is what every replay uses, so it is the one checked against bfcl
        kw = dict(long_context=conv.long_context, name_prefix=TAG, entry_id=conv.id,
                  template_key=f"{conv.id}|{conv.long_context}")
        Environment(conv.initial_config, conv.involved_classes, **kw)
        env = Environment(conv.initial_config, conv.involved_classes, **kw)
        for t, (gt_turn, (theirs, states, _instances)) in enumerate(
                zip(conv.ground_truth, theirs_turns, strict=True)):
            ours = [env.execute(c).result for c in gt_turn]
            assert ours == theirs, f"{conv.id} turn {t}: results differ"
            for name, theirs_state in states.items():
                mine = env.instances[name]
                assert snapshot_instance(mine) == theirs_state, (
                    f"{conv.id} turn {t}: {name} state differs")
                # the compact per-call capture materialises to the same plain state
                assert env.state[name] == theirs_state, f"{conv.id} turn {t}: {name} capture"
            calls += len(gt_turn)
            turns += 1
        # bfcl's own public-attribute comparison on the final instances
        for name, inst in theirs_turns[-1][2].items():
            assert compare_instances(env.instances[name], inst) == {}, f"{conv.id}: {name}"
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
