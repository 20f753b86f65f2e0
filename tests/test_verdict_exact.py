"""The engine's verdict against bfcl-eval's own evaluation path, run at test time.

bfcl's path is ``eval_runner._evaluate_single_multi_turn_entry`` with the handler
``eval_runner.get_handler`` builds, over each file in bfcl's order from a fresh process state.
The engine's path is ``careful_engine.scoring.score_file`` (decode, replay, verdict).
Agreement must be exact, entry by entry, valid flag and error type.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from careful_engine import bfcl
from careful_engine.runs import ResultFile, load_result_file
from careful_engine.scoring import score_file

from . import perturb
from .bfcl_oracle import error_type, evaluate_entries, official_handler

FC_DECODER = "claude-sonnet-4-5-20250929-FC"
PROMPTING_DECODER = "Qwen/Qwen3-8B"


def _engine(entries: list[dict], category: str, decoder: str, model: str,
            tmp: Path) -> dict[str, tuple[bool, str | None]]:
    path = tmp / f"BFCL_v4_{category}_result.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    loaded = load_result_file(ResultFile(path, model, category, 4))
    cs = score_file(loaded, bfcl.handler(decoder))
    ids = {e["id"] for e in entries}
    return {r.id: (r.verdict.valid, r.verdict.error_type) for r in cs.results if r.id in ids}


def _oracle(entries: list[dict], category: str, decoder: str,
            model: str) -> dict[str, tuple[bool, str | None]]:
    res = evaluate_entries(entries, category, official_handler(decoder), model)
    return {k: (v["valid"], error_type(v)) for k, v in res.items()}


def _agree(entries, category, decoder, model, tmp) -> Counter:
    ours = _engine(entries, category, decoder, model, tmp)
    theirs = _oracle(entries, category, decoder, model)
    assert ours.keys() == theirs.keys()
    disagree = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    assert not disagree, f"{len(disagree)} disagreements, e.g. {list(disagree.items())[:3]}"
    return Counter(error_type_ or "valid" for _, error_type_ in theirs.values())


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_fc_references_and_perturbations(category: str, tmp_path: Path) -> None:
    total = Counter()
    for kind, entries in perturb.all_fc_entries(category).items():
        counts = _agree(entries, category, FC_DECODER, "careful-perturb", tmp_path)
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
    """Reference strings through a prompting decoder: bfcl drops positional arguments."""
    entries = [perturb.prompting_entry(c.id, c.ground_truth) for c in bfcl.conversations(category)]
    counts = _agree(entries, category, PROMPTING_DECODER, "careful-prompting", tmp_path)
    assert 0 < sum(v for k, v in counts.items() if k != "valid") < 60


def test_inference_errors(tmp_path: Path) -> None:
    convs = bfcl.conversations("multi_turn_base")[:20]
    entries = [{"id": c.id, "result": "Error during inference: boom", "traceback": "..."}
               for c in convs]
    counts = _agree(entries, "multi_turn_base", FC_DECODER, "careful-errors", tmp_path)
    assert counts == {"multi_turn:inference_error": 20}


# ---------------------------------------------------------------- real runs

REAL_RUNS = [
    ("xlam-2-8b-fc-r", None),
    ("gpt-oss-120b-vllm-v0.11.0", "gpt-4o-2024-11-20-FC"),
    ("gpt-oss-120b-vllm-v0.10.2", "gpt-4o-2024-11-20-FC"),
    ("glyphh-ada-1.1", "gpt-4o-2024-11-20-FC"),
    ("deepseek-r1-0528-errors", "deepseek-ai/DeepSeek-R1"),
]


@pytest.mark.parametrize(("run", "decoder"), REAL_RUNS)
def test_real_runs(run: str, decoder: str | None, shared_runs: Path, tmp_path: Path) -> None:
    from careful_engine.scoring import discover

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
            theirs = _oracle(entries, rf.category, key, model)
            disagree = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
            assert not disagree, f"{run} {rf.category}: {list(disagree.items())[:3]}"
            n += len(ours)
    assert n > 0
