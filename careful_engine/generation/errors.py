"""Why a generation run stops early; every such stop leaves a resumable run."""

from __future__ import annotations


class StopRun(Exception):
    """Stop the whole run: the conversation in flight is not written and can be resumed."""


class BudgetExhausted(StopRun):
    """The next request could cross the dollar budget."""


class ApiUnavailable(StopRun):
    """The API kept failing (rate limits, overload, server or connection errors)."""


class MalformedAnswers(ApiUnavailable):
    """Every attempt of one request was answered, never usably (a malformed answer): the
    runner records the conversation as an inference error while other conversations get
    usable answers, and stops the run as unavailable while none do."""


class FatalApiError(StopRun):
    """The API refuses every request (authentication, credit balance, spend limit)."""


class GenerationError(ValueError):
    """Bad input for a run (unknown model, mismatched resume, missing key ...)."""
