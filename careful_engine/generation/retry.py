"""Bounded retries of endpoint failures, shared by both backends.

A failed attempt is one of:

* ``unreachable`` — the connection was refused or the host is unknown: nothing was sent, and
  the run stops at once as "endpoint unavailable" (no retries);
* ``transient`` — a timeout (connect or the request's total deadline), a connection lost or
  reset, an answer over the size cap, not HTTP or not JSON: the outcome is unknown, retried;
* ``malformed`` — an answer that is not shaped like one (not a message or a completion, more
  than :data:`MAX_ANSWER_CHARS` characters, usage that is not token counts, a content block
  that is not one, a tool call of no tool offered): retried;
* ``http`` — a status the endpoint may get over (408, 409, 429, 5xx, 529, redirects):
  retried, honouring ``retry-after`` up to a cap;
* ``fatal`` — 401, 402, 403 or an exhausted credit balance: the run stops at once;
* ``request`` — another 4xx: the model's request is at fault; an inference error, as in bfcl.

After ``max_attempts`` failed attempts the request fails: with
:class:`~.errors.MalformedAnswers` when every attempt was a malformed answer (the runner
records that conversation as an inference error while others get usable answers), else with
:class:`~.errors.ApiUnavailable` (the run stops).
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Any

from careful_engine.core import anthropic_answers
from careful_engine.core.anthropic_answers import get, is_token_count
from careful_engine.core.bounded_http import unreachable
from careful_engine.generation.errors import ApiUnavailable, FatalApiError, MalformedAnswers

RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
FATAL = frozenset({401, 402, 403})


@dataclass
class RetryPolicy:
    """Bounded retries: ``retry-after`` honoured up to ``max_wait``; else exponential."""

    max_attempts: int = 8
    max_wait: float = 60.0
    base_wait: float = 2.0
    sleep: Any = time.sleep

    def describe(self) -> dict[str, Any]:
        """The policy as a run's manifest records it."""
        return {"max_attempts": self.max_attempts, "max_wait_s": self.max_wait}

    def wait(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_wait))
        return min(self.max_wait, self.base_wait * 2 ** (attempt - 1))


def retry_after(error: Any) -> float | None:
    """Seconds from a response's ``retry-after-ms`` / ``retry-after`` header, if any."""
    headers = getattr(getattr(error, "response", None), "headers", None) or {}
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None
    return seconds if seconds == seconds else None  # NaN: no usable value


def describe(error: BaseException) -> str:
    """The error and its cause in one line (the SDKs' own messages hide the cause)."""
    text = f"{type(error).__name__}: {error}"
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text[:500]


def _transient(error: BaseException) -> bool:
    import httpcore2
    import httpx2

    names = {c.__name__ for c in type(error).__mro__}
    return bool(names & {"APIConnectionError", "APITimeoutError", "APIResponseValidationError"}
                ) or isinstance(error, httpx2.HTTPError | httpcore2.NetworkError
                                | httpcore2.TimeoutException | httpcore2.ProtocolError
                                | OSError | ValueError)


def classify(error: BaseException) -> tuple[str, str]:
    """(kind, message) of a failed attempt; kinds as in the module docstring, plus ``bug``
    for an exception no endpoint could cause (raised as it is)."""
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and not 200 <= status < 300:
        message = f"HTTP {status}: {str(getattr(error, 'message', error))[:300]}"
        if status in FATAL or "credit balance" in str(error).lower():
            return "fatal", message
        if status in RETRYABLE or status >= 500 or 300 <= status < 400:
            return "http", message
        return "request", message
    why = unreachable(error)
    if why is not None:
        return "unreachable", why
    if _transient(error):
        return "transient", describe(error)
    return "bug", describe(error)


# characters of one answer: bfcl asks for at most 4,096 tokens an answer from open models
# and --max-tokens from Claude; a longer answer is malformed (it would make a result line that
# ``careful score`` does not read, and a conversation of them holds gigabytes)
MAX_ANSWER_CHARS = 2 * 2**20


def message_problem(response: Any, tools: frozenset[str] | None = None) -> str | None:
    """Why an Anthropic answer is not a usable message (None when it is), at most
    :data:`MAX_ANSWER_CHARS` characters; ``tools``: the names of the tools offered."""
    return anthropic_answers.message_problem(response, MAX_ANSWER_CHARS, tools)


def completion_problem(response: Any) -> str | None:
    """Why an OpenAI-compatible answer is not a usable completion (None when it is)."""
    choices = get(response, "choices")
    if not isinstance(choices, list) or not choices:
        return f"the answer is not a completion ({type(response).__name__} without choices)"
    if not isinstance(get(choices[0], "text"), str):
        return "the answer's first choice has no text"
    if len(get(choices[0], "text")) > MAX_ANSWER_CHARS:
        return f"the answer has more than {MAX_ANSWER_CHARS:,} characters"
    usage = get(response, "usage")
    if usage is None or not (is_token_count(get(usage, "prompt_tokens"))
                             and is_token_count(get(usage, "completion_tokens"))):
        return "the answer's usage is missing or not token counts"
    return None


def call_with_retries(call: Any, *, policy: RetryPolicy, endpoint: str,
                      problem: Any = lambda response: None) -> Any:
    """``call()`` until it gives an answer without a ``problem``, under ``policy``."""
    last, malformed = "no attempt", 0
    for attempt in range(1, policy.max_attempts + 1):
        try:
            response = call()
        except Exception as e:  # noqa: BLE001 - classified below
            kind, message = classify(e)
            if kind in ("request", "bug"):
                raise
            if kind == "fatal":
                raise FatalApiError(message) from e
            if kind == "unreachable":
                raise ApiUnavailable(f"endpoint unavailable: {endpoint}: {message}") from e
            last = message
            wait = policy.wait(attempt, retry_after(e) if kind == "http" else None)
        else:
            why = problem(response)
            if why is None:
                return response
            last, wait = f"malformed answer: {why}", policy.wait(attempt, None)
            malformed += 1
        if attempt < policy.max_attempts:
            policy.sleep(wait)
    raise exhausted(f"{endpoint}: ", policy, last, malformed)


def exhausted(where: str, policy: RetryPolicy, last: str, malformed: int) -> ApiUnavailable:
    """Why a request failed after ``policy.max_attempts`` attempts, ``malformed`` of them
    malformed answers (:class:`~.errors.MalformedAnswers` when all were)."""
    error = MalformedAnswers if malformed == policy.max_attempts else ApiUnavailable
    return error(f"{where}{policy.max_attempts} attempts failed; last: {last}")
