"""API runs through bfcl's own Claude handler, with the paper's three changes (§7).

:class:`CarefulClaudeHandler` is bfcl-eval's ``ClaudeHandler`` (message building, tools,
prompt-caching markers, parsing and decoding all unchanged) with:

1. no sampling temperature (the current API accepts none for these models);
2. an explicit output limit (``max_tokens``; bfcl knows it only for three model ids);
3. the full prompt logged as input tokens (``input_tokens + cache_read_input_tokens +
   cache_creation_input_tokens``; bfcl logs the uncached part only), with cache reads and
   writes also recorded per step as ``cache_read_input_token_count`` and
   ``cache_creation_input_token_count`` (shaped like ``input_token_count``).

Prompt caching is left on. bfcl's retry wrapper (tenacity, rate limits only, waits of 6-120 s,
no stop) is replaced by :class:`Requester`: bounded retries of 429, 529, other transient
errors and malformed answers that honour ``retry-after`` up to a cap (:mod:`.retry`), with the
spend guard consulted before every attempt; a refused connection stops the run at once. The
SDK's own retries are off so that no request escapes the guard, and its HTTP client bounds
every request (:mod:`.bounded`: connect timeout, total deadline, size cap).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from careful_engine.core import bfcl, bounded_http
from careful_engine.generation import results
from careful_engine.generation.errors import ApiUnavailable, FatalApiError, GenerationError
from careful_engine.generation.retry import (
    FATAL,
    RETRYABLE,
    RetryPolicy,
    classify,
    exhausted,
    message_problem,
    retry_after,
)
from careful_engine.generation.spend import (
    SpendGuard,
    estimate_prompt_tokens,
    load_prices,
    usage_volume,
    worst_case,
)

if TYPE_CHECKING:
    from careful_engine.generation.runner import RunOptions

DEFAULT_MAX_TOKENS = 4096
PUBLIC_API = "https://api.anthropic.com"
__all__ = ["FATAL", "RETRYABLE", "Requester", "RetryPolicy", "build", "make_handler_class",
           "prepare", "retry_after"]


class Requester:
    """``client.messages.create`` behind the spend guard, with bounded retries
    (:mod:`.retry`)."""

    def __init__(self, client: Any, guard: SpendGuard | None = None,
                 policy: RetryPolicy | None = None) -> None:
        self.client = client
        self.guard = guard
        self.policy = policy or RetryPolicy()

    @property
    def endpoint(self) -> str:
        return str(getattr(self.client, "base_url", "") or "the API")

    def create(self, request: dict[str, Any], context: dict[str, Any] | None = None
               ) -> tuple[Any, float]:
        """The response and the latency of the attempt that succeeded."""
        guard, policy = self.guard, self.policy
        worst = 0.0
        if guard is not None:
            worst = worst_case(estimate_prompt_tokens(request), int(request["max_tokens"]),
                               guard.price)
        tools = offered_tools(request)
        last, malformed = "no attempt", 0
        for attempt in range(1, policy.max_attempts + 1):
            ctx = {**(context or {}), "attempt": attempt}
            ticket = guard.reserve(worst, ctx) if guard is not None else None
            start = time.time()
            try:
                response = self.client.messages.create(**request)
            except Exception as e:  # noqa: BLE001 - classified below
                kind, message = classify(e)
                if kind == "bug":
                    if ticket is not None:
                        guard.charge_unknown(ticket, f"unknown: {type(e).__name__}", ctx)
                    raise
                if kind in ("request", "fatal", "http", "unreachable") and ticket is not None:
                    status = getattr(e, "status_code", None)
                    guard.release(ticket, f"http {status}" if kind != "unreachable"
                                  else "not sent: unreachable", ctx)
                if kind == "request":
                    raise  # the model's request is at fault: an inference error, as in bfcl
                if kind == "fatal":
                    if guard is not None:
                        guard.stop(message)
                    raise FatalApiError(message) from e
                if kind == "unreachable":
                    raise ApiUnavailable(f"endpoint unavailable: {self.endpoint}: {message}"
                                         ) from e
                if kind == "transient" and ticket is not None:  # outcome unknown
                    guard.charge_unknown(ticket, f"unknown: {type(e).__name__}", ctx)
                last = message
                wait = policy.wait(attempt, retry_after(e) if kind == "http" else None)
            else:
                latency = time.time() - start
                problem = message_problem(response, tools)
                if problem is None:
                    if ticket is not None:
                        guard.settle(ticket, response.usage, ctx)
                    return response, latency
                if ticket is not None:  # answered, but what was billed is not known for sure
                    guard.charge_unknown(ticket, "unknown: malformed answer", ctx,
                                         usage=getattr(response, "usage", None))
                last, wait = f"malformed answer: {problem}", policy.wait(attempt, None)
                malformed += 1
            if attempt < policy.max_attempts:
                policy.sleep(wait)
        raise exhausted("", policy, last, malformed)


def offered_tools(request: dict[str, Any]) -> frozenset[str]:
    """The names of the tools a Messages request offers (none: no tool call is usable)."""
    tools = request.get("tools")
    return frozenset(t["name"] for t in tools if isinstance(t, dict)
                     and isinstance(t.get("name"), str)) if isinstance(tools, list) else frozenset()


def make_handler_class() -> type:
    """The handler class (built lazily: importing bfcl's Claude module needs anthropic)."""
    base = bfcl.claude_handler_class()

    class CarefulClaudeHandler(base):  # type: ignore[misc, valid-type]
        """bfcl's ClaudeHandler with no temperature, an output limit and full-prompt tokens."""

        def __init__(self, model_name: str, temperature: float, registry_name: str,
                     is_fc_model: bool, *, max_output_tokens: int = DEFAULT_MAX_TOKENS,
                     client: Any = None, requester: Requester | None = None,
                     **kwargs: Any) -> None:
            super().__init__(model_name, temperature, registry_name, is_fc_model, **kwargs)
            if client is not None:
                self.client = client
            self.max_output_tokens = max_output_tokens
            self.requester = requester or Requester(self.client)
            self._careful_local = threading.local()

        # -- the three changes -------------------------------------------------------

        def _get_max_tokens(self) -> int:
            return self.max_output_tokens

        def generate_with_backoff(self, **kwargs: Any) -> tuple[Any, float]:
            kwargs.pop("temperature", None)
            kwargs["max_tokens"] = self.max_output_tokens
            context = {"id": getattr(self._careful_local, "entry_id", None)}
            return self.requester.create(kwargs, context)

        def _parse_query_response_FC(self, api_response: Any) -> dict:
            return self._full_prompt(super()._parse_query_response_FC(api_response),
                                     api_response)

        def _parse_query_response_prompting(self, api_response: Any) -> dict:
            return self._full_prompt(super()._parse_query_response_prompting(api_response),
                                     api_response)

        def _full_prompt(self, data: dict, api_response: Any) -> dict:
            v = usage_volume(api_response.usage)
            data["input_token"] = v.prompt
            steps = getattr(self._careful_local, "steps", None)
            if steps is not None:
                steps.append((v.cache_read, v.cache_write + v.cache_write_1h))
            return data

        # -- per-conversation bookkeeping (called by the runner) ----------------------

        def careful_begin(self, entry_id: str) -> None:
            self._careful_local.entry_id = entry_id
            self._careful_local.steps = []

        def careful_end(self, metadata: dict[str, Any]) -> None:
            """Add the per-step cache reads and writes, shaped like ``input_token_count``."""
            steps = getattr(self._careful_local, "steps", None) or []
            self._careful_local.steps = None
            shape = metadata.get("input_token_count")
            if not isinstance(shape, list):
                return
            it = iter(steps)
            reads, writes = [], []
            for turn in shape:
                pairs = [next(it, (0, 0)) for _ in turn]
                reads.append([p[0] for p in pairs])
                writes.append([p[1] for p in pairs])
            metadata["cache_read_input_token_count"] = reads
            metadata["cache_creation_input_token_count"] = writes

    CarefulClaudeHandler.__qualname__ = "CarefulClaudeHandler"
    return CarefulClaudeHandler


def build(key: str, *, max_output_tokens: int = DEFAULT_MAX_TOKENS, api_model: str | None = None,
          base_url: str | None = None, api_key: str | None = None,
          guard: SpendGuard | None = None, policy: RetryPolicy | None = None,
          client: Any = None, limits: bounded_http.Limits | None = None) -> Any:
    """A CarefulClaudeHandler for a registry key whose handler is bfcl's ClaudeHandler."""
    import anthropic

    entry = bfcl.registry().get(key)
    if entry is None:
        raise GenerationError(f"{key!r} is not in bfcl-eval's model registry")
    if entry.handler_class != "ClaudeHandler":
        raise GenerationError(f"{key!r} uses {entry.handler_class}; the anthropic backend runs "
                              "models registered with bfcl's ClaudeHandler")
    if client is None:
        limits = limits or bounded_http.Limits.from_env()
        client = anthropic.Anthropic(
            api_key=api_key or os.getenv("ANTHROPIC_API_KEY"),
            base_url=base_url or os.getenv("ANTHROPIC_BASE_URL") or None,
            max_retries=0, timeout=limits.total, http_client=bounded_http.client(limits),
        )
    cls = make_handler_class()
    return cls(
        model_name=api_model or entry.model_name, temperature=0.0, registry_name=key,
        is_fc_model=entry.is_fc_model, max_output_tokens=max_output_tokens, client=client,
        requester=Requester(client, guard, policy),
    )


def prepare(options: RunOptions, folder: Path, *, budget: float | None,
            max_tokens: int = DEFAULT_MAX_TOKENS, api_model: str | None = None,
            base_url: str | None = None, prices: Path | None = None,
            policy: RetryPolicy, limits: bounded_http.Limits) -> tuple[Any, SpendGuard]:
    """An API run's handler and its spend guard (resumed from ``folder``'s ledger), with the
    backend's settings recorded in ``options.settings`` for the manifest. GenerationError
    without a budget, a key, or a price for the model sent."""
    if budget is None:
        raise GenerationError("an API run needs a --budget in US dollars (finite, positive)")
    if not (os.getenv("ANTHROPIC_API_KEY") or os.getenv("ANTHROPIC_AUTH_TOKEN")):
        raise GenerationError("ANTHROPIC_API_KEY is not set")
    entry = bfcl.registry().get(options.model)
    if entry is None:
        raise GenerationError(f"{options.model!r} is not in bfcl-eval's model registry")
    sent = api_model or entry.model_name
    price = load_prices(prices).get(sent)
    guard = SpendGuard.resume(budget, price, folder / results.LEDGER)
    handler = build(options.model, max_output_tokens=max_tokens, api_model=api_model,
                    base_url=base_url, guard=guard, policy=policy, limits=limits)
    options.settings.update({
        "api_model": sent, "max_tokens": max_tokens, "temperature": None,
        "base_url": base_url or os.getenv("ANTHROPIC_BASE_URL") or PUBLIC_API,
        "budget_usd": budget, "price_model": price.model,
        "retries": policy.describe(),
        "limits": limits.describe(),
    })
    return handler, guard
