"""Headless generation of BFCL multi-turn runs (paper §7): open models through vLLM, Claude
through the Anthropic API, under the standard, effect-hints and confirmation-aware conditions.

* :mod:`.runner` — the run: bfcl's handlers on bfcl's entries, resumable, with a manifest
  (bfcl's loops call :mod:`careful_engine.core.executor`, the engine's executor, no eval;
  HTTP is bounded by :mod:`careful_engine.core.bounded_http`);
* :mod:`.retry` — bounded retries and what counts as an endpoint failure;
* :mod:`.files` — run folders and writes that never follow a planted link;
* :mod:`.results` — result files in bfcl's layout (append, fsync, repair, sort) and totals;
* :mod:`.dataset` — entries loaded as ``bfcl generate`` loads them; categories and ids;
* :mod:`.anthropic_backend` — bfcl's Claude handler with the paper's three changes;
* :mod:`.vllm_backend` — bfcl's OSS handlers on an OpenAI-compatible endpoint; ``vllm serve``;
* :mod:`.spend` — price table, conservative accounting, the spend guard and its ledger;
* :mod:`.cost` — pricing a logged run and estimating it on other models.
"""

from careful_engine.generation.errors import (
    ApiUnavailable,
    BudgetExhausted,
    FatalApiError,
    GenerationError,
    MalformedAnswers,
    StopRun,
)
from careful_engine.generation.runner import CONDITIONS, RunOptions, RunReport, generate

__all__ = [
    "CONDITIONS",
    "ApiUnavailable",
    "BudgetExhausted",
    "FatalApiError",
    "GenerationError",
    "MalformedAnswers",
    "RunOptions",
    "RunReport",
    "StopRun",
    "generate",
]
