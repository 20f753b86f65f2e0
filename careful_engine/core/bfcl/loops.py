"""What generation and the protocol need of bfcl: its dataset loader, its result serialiser and
the handler classes whose inference loops are run (with the engine's executor)."""

from __future__ import annotations

from typing import Any


def load_dataset_entry(category: str) -> list[dict]:
    """bfcl's ``load_dataset_entry``: the category's entries with their function docs."""
    from bfcl_eval.utils import load_dataset_entry as load

    return load(category)


def make_json_serializable(value: Any) -> Any:
    """bfcl's ``make_json_serializable``, as its runner applies it to a result line."""
    from bfcl_eval.utils import make_json_serializable as convert

    return convert(value)


def base_handler_class() -> type:
    """bfcl's ``BaseHandler`` (the class whose inference loops protocol.patch replaces)."""
    from bfcl_eval.model_handler.base_handler import BaseHandler

    return BaseHandler


def oss_handler_class() -> type:
    """bfcl's ``OSSHandler``, the base of every handler the vllm backend may run."""
    from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler

    return OSSHandler


def claude_handler_class() -> type:
    """bfcl's ``ClaudeHandler`` (importing it needs the anthropic SDK)."""
    from bfcl_eval.model_handler.api_inference.claude import ClaudeHandler

    return ClaudeHandler
