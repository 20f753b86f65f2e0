"""The engine's verdicts beside bfcl-eval's own, entry by entry: the helpers every exactness
test shares (test_verdict_exact, test_process, test_shapes, agreement_report)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.core.runs import ResultFile, load_result_file
from careful_engine.scoring.score import score_file

from .bfcl_oracle import error_type, evaluate_entries, official_handler

FC_DECODER = "claude-sonnet-4-5-20250929-FC"
PROMPTING_DECODER = "Qwen/Qwen3-8B"


def engine_verdicts(entries: list[dict], category: str, decoder: str, model: str,
                    tmp: Path) -> dict[str, tuple[bool, str | None]]:
    path = tmp / f"BFCL_v4_{category}_result.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    loaded = load_result_file(ResultFile(path, model, category, 4))
    cs = score_file(loaded, bfcl.handler(decoder))
    ids = {e["id"] for e in entries}
    return {r.id: (r.verdict.valid, r.verdict.error_type) for r in cs.results if r.id in ids}


def oracle_verdicts(entries: list[dict], category: str, decoder: str,
                    model: str) -> dict[str, tuple[bool, str | None]]:
    res = evaluate_entries(entries, category, official_handler(decoder), model)
    return {k: (v["valid"], error_type(v)) for k, v in res.items()}


def agree(entries, category, decoder, model, tmp) -> Counter:
    ours = engine_verdicts(entries, category, decoder, model, tmp)
    theirs = oracle_verdicts(entries, category, decoder, model)
    assert ours.keys() == theirs.keys()
    disagree = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    assert not disagree, f"{len(disagree)} disagreements, e.g. {list(disagree.items())[:3]}"
    return Counter(error_type_ or "valid" for _, error_type_ in theirs.values())


# the logged runs under /work/shared/runs the exactness tests replay, with the decoder of
# each (None: the run's own registered handler)
REAL_RUNS = [
    ("xlam-2-8b-fc-r", None),
    ("gpt-oss-120b-vllm-v0.11.0", "gpt-4o-2024-11-20-FC"),
    ("gpt-oss-120b-vllm-v0.10.2", "gpt-4o-2024-11-20-FC"),
    ("glyphh-ada-1.1", "gpt-4o-2024-11-20-FC"),
    ("deepseek-r1-0528-errors", "deepseek-ai/DeepSeek-R1"),
]
