"""Print the verdict-agreement counts that tests/test_verdict_exact.py asserts.

    .venv/bin/python -m tests.agreement_report [--shared ../shared]

For every suite (FC references and perturbations, the prompting-decoder references, every real
run in ../shared/runs), per category: entries compared, entries where the engine and bfcl-eval's
own evaluator agree on valid flag and error type, and bfcl's verdicts by error type.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.core.runs import load_result_file
from careful_engine.scoring.score import discover, score_file

from . import perturb
from .bfcl_oracle import evaluate_entries, official_handler
from .verdicts import FC_DECODER, PROMPTING_DECODER, REAL_RUNS, engine_verdicts, oracle_verdicts

SHORT = {
    "valid": "valid",
    "multi_turn:force_terminated": "force_term",
    "multi_turn:empty_turn_model_response": "empty_turn",
    "multi_turn:instance_state_mismatch": "state",
    "multi_turn:execution_response_mismatch": "response",
    "multi_turn:inference_error": "inference",
}


def _row(name: str, ours: dict, theirs: dict) -> tuple[int, int]:
    agree = sum(ours[k] == theirs[k] for k in theirs)
    dist = Counter(SHORT.get(t or "valid", t) for _, t in theirs.values())
    detail = " ".join(f"{k}={v}" for k, v in sorted(dist.items()))
    print(f"  {name:42} {len(theirs):5} {agree:5}   {detail}")
    return len(theirs), agree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = ap.parse_args()
    total = agree = 0
    print(f"  {'suite':42} {'n':>5} {'agree':>5}   bfcl verdicts")
    with tempfile.TemporaryDirectory() as tmp:
        for cat in bfcl.CATEGORIES:
            for kind, entries in perturb.all_fc_entries(cat).items():
                n, a = _row(f"{bfcl.SHORT_NAMES[cat]} FC {kind}",
                            engine_verdicts(entries, cat, FC_DECODER, "careful-perturb", Path(tmp)),
                            oracle_verdicts(entries, cat, FC_DECODER, "careful-perturb"))
                total, agree = total + n, agree + a
            entries = [perturb.prompting_entry(c.id, c.ground_truth)
                       for c in bfcl.conversations(cat)]
            n, a = _row(f"{bfcl.SHORT_NAMES[cat]} prompting references (Qwen3-8B)",
                        engine_verdicts(entries, cat, PROMPTING_DECODER, "careful-prompting", Path(tmp)),
                        oracle_verdicts(entries, cat, PROMPTING_DECODER, "careful-prompting"))
            total, agree = total + n, agree + a
    runs = args.shared / "runs"
    for run, decoder in REAL_RUNS if runs.is_dir() else []:
        by_model, _ = discover(runs / run)
        for model, files in by_model.items():
            key = decoder or bfcl.registry_key_for_dir(model)
            for rf in files:
                loaded = load_result_file(rf)
                cs = score_file(loaded, bfcl.handler(key))
                ours = {r.id: (r.verdict.valid, r.verdict.error_type) for r in cs.results
                        if r.id in loaded.entries}
                res = evaluate_entries(list(loaded.entries.values()), rf.category,
                                       official_handler(key), model)
                theirs = {k: (v["valid"], None if v["valid"] else v["error"]["error_type"])
                          for k, v in res.items()}
                n, a = _row(f"{run} {bfcl.SHORT_NAMES[rf.category]}", ours, theirs)
                total, agree = total + n, agree + a
    print(f"  {'all':42} {total:5} {agree:5}   agreement {100 * agree / total:.2f} %")


if __name__ == "__main__":
    main()
