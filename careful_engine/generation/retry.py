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
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from careful_engine.core.bounded_http import unreachable
from careful_engine.core.decode import MAX_TOKEN_COUNT
from careful_engine.core.safe_text import clip, visible
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


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


# characters of one answer: bfcl asks for at most 4,096 tokens an answer from open models
# and --max-tokens from Claude; a longer answer is malformed (it would make a result line that
# ``careful score`` does not read, and a conversation of them holds gigabytes)
MAX_ANSWER_CHARS = 2 * 2**20


def _count(value: Any) -> bool:
    """A token count as ``careful score`` reads one (:data:`~careful_engine.core.decode.
    MAX_TOKEN_COUNT` at most), so a run's usage is never logged and then refused."""
    return type(value) is int and 0 <= value <= MAX_TOKEN_COUNT


def _size(value: Any) -> int:
    """Characters of an answer's text or tool input (a bound on its JSON length)."""
    if isinstance(value, str):
        return len(value)
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str))
    except (ValueError, RecursionError):
        return MAX_ANSWER_CHARS + 1


# a tool name as the Messages API takes one (bfcl offers Claude its functions by such names)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_THINKING = ("thinking", "redacted_thinking")  # blocks that carry no answer: passed on as sent


def block_problem(block: Any, tools: frozenset[str] | None = None) -> str | None:
    """Why one content block of an Anthropic answer is not usable (None when it is): a text
    block without text, or a ``tool_use`` block whose ``id`` and ``name`` are not text,
    whose name is none of the ``tools`` offered (when known; else not a tool name at all),
    or whose input is not an object; any other type but thinking."""
    kind = _get(block, "type")
    if kind == "text":
        return None if isinstance(_get(block, "text"), str) else "a text block without text"
    if kind == "tool_use":
        name, call_id = _get(block, "name"), _get(block, "id")
        if not isinstance(call_id, str) or not call_id:
            return "a tool_use block whose id is not text"
        if not isinstance(name, str) or not (name in tools if tools is not None
                                             else _TOOL_NAME.fullmatch(name)):
            what = "not text" if not isinstance(name, str) else repr(clip(visible(name), 60))
            return f"a tool_use block naming no tool offered ({what})"
        if not isinstance(_get(block, "input"), dict):
            return "a tool_use block whose input is not an object"
        return None
    if kind in _THINKING:
        return None
    return f"a content block of type {clip(visible(repr(kind)), 60)}"


def message_problem(response: Any, tools: frozenset[str] | None = None) -> str | None:
    """Why an Anthropic answer is not a usable ``message`` (None when it is); ``tools``:
    the names of the tools offered (:func:`block_problem`)."""
    content = _get(response, "content")
    if not isinstance(content, list):
        return f"the answer is not a message ({type(response).__name__} without content)"
    for block in content:
        if why := block_problem(block, tools):
            return why
    size = sum(_size(_get(b, "text") or _get(b, "input") or "") for b in content)
    if size > MAX_ANSWER_CHARS:
        return f"the answer has more than {MAX_ANSWER_CHARS:,} characters"
    usage = _get(response, "usage")
    if usage is None or not (_count(_get(usage, "input_tokens"))
                             and _count(_get(usage, "output_tokens"))):
        return "the answer's usage is missing or not token counts"
    for key in ("cache_read_input_tokens", "cache_creation_input_tokens"):
        value = _get(usage, key)
        if value is not None and not _count(value):
            return f"the answer's usage {key} is not a token count"
    prompt = sum(_get(usage, k) or 0 for k in ("input_tokens", "cache_read_input_tokens",
                                                "cache_creation_input_tokens"))
    if prompt > MAX_TOKEN_COUNT:  # the step's input count as logged (spend.Volume.prompt)
        return "the answer's usage adds up to more input tokens than a step may log"
    return None


def completion_problem(response: Any) -> str | None:
    """Why an OpenAI-compatible answer is not a usable completion (None when it is)."""
    choices = _get(response, "choices")
    if not isinstance(choices, list) or not choices:
        return f"the answer is not a completion ({type(response).__name__} without choices)"
    if not isinstance(_get(choices[0], "text"), str):
        return "the answer's first choice has no text"
    if len(_get(choices[0], "text")) > MAX_ANSWER_CHARS:
        return f"the answer has more than {MAX_ANSWER_CHARS:,} characters"
    usage = _get(response, "usage")
    if usage is None or not (_count(_get(usage, "prompt_tokens"))
                             and _count(_get(usage, "completion_tokens"))):
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
