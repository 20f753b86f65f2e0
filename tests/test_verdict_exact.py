"""The engine's verdict against bfcl-eval's own evaluation path, run at test time.

bfcl's path is ``eval_runner._evaluate_single_multi_turn_entry`` with the handler
``eval_runner.get_handler`` builds, over each file in bfcl's order from a fresh process state.
The engine's path is ``careful_engine.scoring.score.score_file`` (decode, replay, verdict).
Agreement must be exact, entry by entry, valid flag and error type.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from careful_engine.core import bfcl
from careful_engine.core.runs import load_result_file
from careful_engine.scoring.score import score_file

from . import perturb
from .verdicts import (
    FC_DECODER,
    PROMPTING_DECODER,
    REAL_RUNS,
    agree,
    engine_verdicts,
    oracle_verdicts,
)


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_fc_references_and_perturbations(category: str, tmp_path: Path) -> None:
    total = Counter()
    for kind, entries in perturb.all_fc_entries(category).items():
        counts = agree(entries, category, FC_DECODER, "careful-perturb", tmp_path)
        if kind.startswith("reference"):
            assert counts == {"valid": 200}, kind
        total += counts
    # the suite must exercise every way bfcl can fail an executed entry
    for et in ("multi_turn:force_terminated", "multi_turn:empty_turn_model_response",
               "multi_turn:instance_state_mismatch", "multi_turn:execution_response_mismatch"):
        assert total[et] > 0, et
    assert total["valid"] > 400


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_prompting_decoder_drops_positional_arguments(category: str, tmp_path: Path) -> None:
    """Reference strings through a prompting decoder: bfcl drops positional arguments, so
    exactly the conversations whose reference uses a positional argument fail (how many is
    read from bfcl's data here, not written down)."""
    convs = bfcl.conversations(category)
    entries = [perturb.prompting_entry(c.id, c.ground_truth) for c in convs]
    ours = engine_verdicts(entries, category, PROMPTING_DECODER, "careful-prompting", tmp_path)
    assert ours == oracle_verdicts(entries, category, PROMPTING_DECODER, "careful-prompting")
    positional = {c.id for c in convs
                  if any(ast.parse(call, mode="eval").body.args
                         for turn in c.ground_truth for call in turn)}
    assert positional
    assert {k for k, (valid, _) in ours.items() if not valid} == positional


def test_inference_errors(tmp_path: Path) -> None:
    convs = bfcl.conversations("multi_turn_base")[:20]
    entries = [{"id": c.id, "result": "Error during inference: boom", "traceback": "..."}
               for c in convs]
    counts = agree(entries, "multi_turn_base", FC_DECODER, "careful-errors", tmp_path)
    assert counts == {"multi_turn:inference_error": 20}


# ---------------------------------------------------------------- real runs

@pytest.mark.parametrize(("run", "decoder"), REAL_RUNS)
def test_real_runs(run: str, decoder: str | None, shared_runs: Path, tmp_path: Path) -> None:
    from careful_engine.scoring.score import discover

    by_model, _ = discover(shared_runs / run)
    assert by_model
    n = 0
    for model, files in by_model.items():
        key = decoder or bfcl.registry_key_for_dir(model)
        for rf in files:
            loaded = load_result_file(rf)
            entries = list(loaded.entries.values())
            cs = score_file(loaded, bfcl.handler(key))
            ours = {r.id: (r.verdict.valid, r.verdict.error_type) for r in cs.results
                    if r.id in loaded.entries}
            theirs = oracle_verdicts(entries, rf.category, key, model)
            disagree = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
            assert not disagree, f"{run} {rf.category}: {list(disagree.items())[:3]}"
            n += len(ours)
    assert n > 0
