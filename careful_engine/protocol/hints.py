"""Effect hints (paper §6): each function's declaration appended to its description.

The declaration is rendered in the vocabulary of MCP tool annotations (readOnlyHint,
destructiveHint, idempotentHint; values as :func:`careful_engine.effects.mcp.annotations`
derives them from the declarations and the destructive boundary) and appended to the end of
the description the model would otherwise see, for the docs shown from the start and for the
docs that miss_func reveals at its holdout turn. Nothing else changes; no instruction to use the
hints is added.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from careful_engine.effects.boundary import Boundary
from careful_engine.effects.mcp import annotations as mcp_annotations

HINT_KEYS = ("readOnlyHint", "destructiveHint", "idempotentHint")
PREFIX = "Tool annotations (MCP): "


def hints(name: str, functions: Mapping[str, dict], boundary: Boundary) -> dict[str, bool]:
    """The three MCP hints of one function."""
    full = mcp_annotations(functions[name], name in boundary)
    return {k: bool(full[k]) for k in HINT_KEYS}


def render(values: Mapping[str, bool]) -> str:
    """``Tool annotations (MCP): {"readOnlyHint": false, ...}``"""
    return PREFIX + json.dumps({k: values[k] for k in HINT_KEYS})


def hinted_description(doc: dict, functions: Mapping[str, dict], boundary: Boundary) -> str:
    description = str(doc.get("description", "")).rstrip()
    return f"{description} {render(hints(doc['name'], functions, boundary))}".lstrip()


def apply_hints(entry: dict[str, Any], functions: Mapping[str, dict],
                boundary: Boundary) -> dict[str, Any]:
    """Append the hints to every doc of a loaded bfcl entry, held-out docs included (in place).

    ``entry`` is an entry as ``bfcl_eval.utils.load_dataset_entry`` returns it: ``function``
    holds the docs shown at the start and ``missed_function`` maps a turn to the doc dicts
    revealed there. Docs already hinted are left alone.
    """
    docs = list(entry.get("function") or [])
    for held in (entry.get("missed_function") or {}).values():
        docs.extend(d for d in held if isinstance(d, dict))
    for doc in docs:
        if PREFIX in str(doc.get("description", "")):
            continue
        if doc.get("name") not in functions:
            raise KeyError(f"no effect declaration for {doc.get('name')!r}")
        doc["description"] = hinted_description(doc, functions, boundary)
    return entry
