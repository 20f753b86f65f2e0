"""The 128 functions as Model Context Protocol tools, with tool annotations.

Each tool has ``name``, ``description`` (the doc's description), ``inputSchema`` (JSON Schema
from the doc's parameters: bfcl's ``dict`` is ``object``, ``float`` is ``number``; the
``[Enum]: ...`` lists bfcl writes into descriptions become ``enum``) and ``annotations``
(MCP specification 2025-06-18, ``ToolAnnotations``), every hint set explicitly:

* ``readOnlyHint`` (default false: "the tool does not modify its environment"): true for
  inferred reads outside the boundary. A hidden-only write such as cd changes the session's
  working directory, so it is not read-only. A read inside the boundary (contact_customer_
  support: its effect reaches people but the simulator does not model it) is not read-only.
* ``destructiveHint`` (default true; meaningful when not read-only): whether the function is
  in the boundary; false for read-only tools.
* ``idempotentHint`` (default false; meaningful when not read-only): the inferred
  idempotence of a write; true for read-only tools (repeating a read changes nothing); false
  for a boundary read, for which there is no evidence (no state change to repeat).
* ``openWorldHint`` (default true: "may interact with an open world of external entities"):
  the simulators are closed worlds, so false, except for functions whose calls raised the
  third-party signal (an entry added where other people see it) or that the boundary judged
  to reach other people beyond the simulator (a read in the boundary).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.safe_write import write_text
from careful_engine.effects import signals as sig
from careful_engine.effects.boundary import Boundary, declarations_dir
from careful_engine.effects.declarations import Declarations, content_hash
from careful_engine.effects.probes import doc_enum

SCHEMA = "careful.mcp-tools/1"
SPEC_VERSION = "2025-06-18"
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def default_path() -> Path:
    return declarations_dir() / "mcp_tools.json"


def json_schema(spec: dict) -> dict[str, Any]:
    """A bfcl parameter spec as JSON Schema."""
    out: dict[str, Any] = {}
    kind = spec.get("type")
    kind = _TYPES.get(kind, kind)
    if kind:
        out["type"] = kind
    if "description" in spec:
        out["description"] = spec["description"]
    enum = doc_enum(spec)
    if enum:
        if kind == "array":
            out["items"] = {**json_schema(spec.get("items") or {}), "enum": enum}
        else:
            out["enum"] = enum
    if "items" in spec and "items" not in out:
        out["items"] = json_schema(spec["items"])
    if spec.get("properties") is not None:
        out["properties"] = {k: json_schema(v) for k, v in spec["properties"].items()}
    if spec.get("required"):
        out["required"] = list(spec["required"])
    if "default" in spec:
        out["default"] = spec["default"]
    return out


def input_schema(doc: dict) -> dict[str, Any]:
    params = doc.get("parameters") or {}
    schema = json_schema({**params, "type": "dict"})
    schema.pop("description", None)
    schema.setdefault("properties", {})
    return schema


def annotations(entry: dict, in_boundary: bool) -> dict[str, bool]:
    read = entry["kind"] == "read"
    read_only = read and not in_boundary
    third_party = entry.get("signal_counts", {}).get(sig.THIRD_PARTY, 0) > 0
    return {
        "readOnlyHint": read_only,
        "destructiveHint": False if read_only else in_boundary,
        "idempotentHint": True if read_only else (not read and entry["idempotent"] is True),
        "openWorldHint": third_party or (read and in_boundary),
    }


def tool(name: str, entry: dict, boundary: Boundary) -> dict[str, Any]:
    doc = bfcl.all_func_docs()[name]
    return {
        "name": name,
        "description": doc.get("description", ""),
        "inputSchema": input_schema(doc),
        "annotations": annotations(entry, name in boundary),
    }


def export(decl: Declarations, boundary: Boundary) -> dict[str, Any]:
    tools = [tool(d["name"], decl.functions[d["name"]], boundary)
             for cls in bfcl.CLASSES for d in bfcl.func_docs(cls)]
    return {
        "schema": SCHEMA,
        "mcp_specification": SPEC_VERSION,
        "bfcl_eval": bfcl.BFCL_VERSION,
        "boundary": {"name": boundary.name, "version": boundary.version},
        # computed, not the file's claim: an edited file keeps the claim of the file it was
        "declarations_content_sha256": content_hash(decl.functions),
        "tools": tools,
    }


def write(doc: dict[str, Any], path: Path) -> Path:
    """Write the document whole, never through a link (:mod:`careful_engine.core.safe_write`)."""
    return write_text(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
