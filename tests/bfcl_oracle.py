"""bfcl-eval's own code, run at test time: the oracle every exactness test compares against.

Nothing here re-implements bfcl: it calls ``execute_multi_turn_func_call`` and
``eval_runner._evaluate_single_multi_turn_entry`` as they are, in a fresh process-global state
(the executor's cached ``*_instance`` globals removed, TravelAPI's module-level long-context
data restored to pristine values), which is the state a new ``bfcl evaluate`` process starts in.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable

from careful_engine.core import (
    bfcl,  # sets BFCL_PROJECT_ROOT before bfcl_eval's config is imported
    process,
)


def multi_turn_utils():
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return multi_turn_utils


def fresh_process_state() -> None:
    """Forget bfcl's cached instances and restore its shared long-context data."""
    process.reset_bfcl_process_state()


def eval_runner():
    from bfcl_eval.eval_checker import eval_runner

    return eval_runner


def official_handler(registry_key: str):
    """The handler exactly as ``bfcl evaluate`` builds it (eval_runner.get_handler).

    OpenAI handlers refuse to build without a key, even for ``bfcl evaluate``; a dummy works.
    """
    os.environ.setdefault("OPENAI_API_KEY", "careful-test-dummy")
    return eval_runner().get_handler(registry_key)


def evaluate_entries(
    entries: Iterable[dict], category: str, handler, model_name: str
) -> dict[str, dict]:
    """bfcl's verdict per entry, as ``bfcl evaluate`` computes it on one category file.

    Entries are processed in bfcl's order (sorted by id) in one fresh process state; missing
    ids are simply absent (bfcl would refuse the file without --partial-eval).
    """
    fresh_process_state()
    runner = eval_runner()
    convs = {c.id: c for c in bfcl.conversations(category)}
    out = {}
    for entry in sorted(entries, key=lambda e: bfcl.sort_key(e["id"])):
        conv = convs[entry["id"]]
        res = runner._evaluate_single_multi_turn_entry(
            handler,
            entry["id"],
            copy.deepcopy(entry["result"]),
            copy.deepcopy(conv.ground_truth),
            copy.deepcopy(conv.raw),
            model_name,
            category,
        )
        out[entry["id"]] = res
    fresh_process_state()
    return out


def error_type(res: dict) -> str | None:
    return None if res["valid"] else res["error"]["error_type"]
