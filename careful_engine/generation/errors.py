"""Why a generation run stops early; every such stop leaves a resumable run."""

from __future__ import annotations


class StopRun(Exception):
    """Stop the whole run: the conversation in flight is not written and can be resumed."""


class BudgetExhausted(StopRun):
    """The next request could cross the dollar budget."""


class ApiUnavailable(StopRun):
    """The API kept failing (rate limits, overload, server or connection errors)."""


class FatalApiError(StopRun):
    """The API refuses every request (authentication, credit balance, spend limit)."""


class GenerationError(ValueError):
    """Bad input for a run (unknown model, mismatched resume, missing key ...)."""
