"""bfcl's process-global simulator state: reproduced, reset per file, and nothing else shared."""

from __future__ import annotations

import importlib
import pickle
import tempfile
from pathlib import Path

from careful_engine.core import bfcl, process
from careful_engine.core.decode import reference_trajectory
from careful_engine.core.replay import replay
from careful_engine.core.runs import load_result_file
from careful_engine.scoring.score import discover, score_file

from . import perturb
from .verdicts import FC_DECODER, engine_verdicts, oracle_verdicts


def _module_objects() -> dict[str, bytes]:
    """Every module-level container of the simulator modules, pickled, except the ones
    careful_engine.core.process knows are mutated."""
    known = {id(live) for *_, live, _ in process.shared_objects()}
    out = {}
    names = {bfcl.CLASS_FILE_PATH_MAPPING[c] for c in bfcl.CLASSES}
    for name in sorted(names | {f"{bfcl.SIM_PACKAGE}.long_context"}):
        module = importlib.import_module(name)
        for attr, value in sorted(vars(module).items()):
            if isinstance(value, (list, dict, set)) and id(value) not in known:
                out[f"{name}.{attr}"] = pickle.dumps(value)
    return out


def test_no_other_module_object_changes() -> None:
    """Run every perturbation of every category: only the known shared objects may change."""
    before = _module_objects()
    with tempfile.TemporaryDirectory() as tmp:
        for cat in bfcl.CATEGORIES:
            for entries in perturb.all_fc_entries(cat).values():
                engine_verdicts(entries, cat, FC_DECODER, "careful-process", Path(tmp))
    after = _module_objects()
    changed = [k for k in before if before[k] != after[k]]
    assert not changed


def test_mention_grows_the_post_tweet_default() -> None:
    """The quirk itself: post_tweet's default mentions list is stored and extended in place."""
    process.BfclProcess()
    conv = next(c for c in bfcl.conversations("multi_turn_base")
                if "TwitterAPI" in c.involved_classes)
    module = importlib.import_module(bfcl.CLASS_FILE_PATH_MAPPING["TwitterAPI"])
    default = module.TwitterAPI.post_tweet.__defaults__[1]
    assert default == []
    from careful_engine.core.environment import Environment

    env = Environment.for_conversation(conv)
    user = env.instances["TwitterAPI"].username
    env.execute(f"authenticate_twitter(username={user!r}, "
                f"password={env.instances['TwitterAPI'].password!r})")
    posted = env.execute("post_tweet(content='hello')").result
    tweet_id = __import__("json").loads(posted)["id"]
    env.execute(f"mention(tweet_id={tweet_id}, mentioned_usernames=['@bob'])")
    assert default == ["@bob"]  # bfcl's own default object now holds the mention
    process.BfclProcess()  # a fresh process again
    assert default == []


def test_verdicts_do_not_depend_on_what_ran_before(shared_runs: Path, tmp_path: Path) -> None:
    """Scoring a file gives the same verdicts whatever ran earlier in the process, and agrees
    with bfcl's evaluator started from a fresh process state (on the real xLAM run, one base
    verdict flips when the post_tweet default is left contaminated)."""
    by_model, _ = discover(shared_runs / "xlam-2-8b-fc-r")
    rf = next(r for r in by_model["Salesforce_Llama-xLAM-2-8b-fc-r"]
              if r.category == "multi_turn_base")
    loaded = load_result_file(rf)
    handler = bfcl.handler("Salesforce/Llama-xLAM-2-8b-fc-r")

    def verdicts() -> dict:
        cs = score_file(loaded, handler)
        return {r.id: (r.verdict.valid, r.verdict.error_type) for r in cs.results}

    first = verdicts()
    # contaminate the process: extra post_tweet calls, then mentions, in other conversations
    engine_verdicts(perturb.all_fc_entries("multi_turn_base")["extra_write"], "multi_turn_base",
            FC_DECODER, "noise", tmp_path)
    for conv in bfcl.conversations("multi_turn_base")[:50]:
        replay(conv, reference_trajectory(conv.id, conv.ground_truth))
    assert verdicts() == first
    theirs = oracle_verdicts(list(loaded.entries.values()), rf.category,
                     "Salesforce/Llama-xLAM-2-8b-fc-r", rf.model)
    assert {k: first[k] for k in theirs} == theirs
    assert sum(v for v, _ in first.values()) == 114
