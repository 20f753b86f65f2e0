"""The counts of §3 of the paper: the reference trajectories under the declarations.

Every reference call falls in one bucket (:meth:`Declarations.bucket`): ``destructive`` (its
function is in the boundary), ``write`` (another write that changes public state) or ``read``
(reads and hidden-only writes such as cd, whose only effect bfcl never compares). Per
category: calls by bucket; turns, and those that make a destructive call, some write
(destructive or other) or no call at all; and the functions used.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.calls import Call, parse_call
from careful_engine.effects.boundary import Boundary
from careful_engine.effects.declarations import Declarations


@dataclass
class CategoryAudit:
    category: str
    conversations: int = 0
    turns: int = 0
    calls: Counter = field(default_factory=Counter)  # bucket -> reference calls
    turns_destructive: int = 0
    turns_write: int = 0
    turns_no_call: int = 0
    functions: set[str] = field(default_factory=set)
    hidden_only_calls: Counter = field(default_factory=Counter)  # in the reads, by function
    unparsed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "turns": self.turns,
            "reference_calls": sum(self.calls.values()),
            "destructive_calls": self.calls["destructive"],
            "other_write_calls": self.calls["write"],
            "read_calls": self.calls["read"],
            "read_calls_to_hidden_only_writes": {
                k: self.hidden_only_calls[k] for k in sorted(self.hidden_only_calls)},
            "turns_with_destructive_call": self.turns_destructive,
            "turns_with_write": self.turns_write,
            "turns_without_call": self.turns_no_call,
            "functions_used": len(self.functions),
            "functions": sorted(self.functions),
            "unparsed_reference_calls": self.unparsed,
        }


def audit_category(category: str, decl: Declarations, boundary: Boundary) -> CategoryAudit:
    names = frozenset(bfcl.function_class())
    out = CategoryAudit(category)
    for conv in bfcl.conversations(category):
        out.conversations += 1
        for turn in conv.ground_truth:
            out.turns += 1
            buckets = set()
            for text in turn:
                call = parse_call(text, methods=names)
                if not isinstance(call, Call):
                    out.unparsed += 1
                    continue
                bucket = decl.bucket(call.name, boundary)
                out.calls[bucket] += 1
                if bucket == "read" and decl.is_write(call.name):
                    out.hidden_only_calls[call.name] += 1
                out.functions.add(call.name)
                buckets.add(bucket)
            out.turns_no_call += not turn
            out.turns_destructive += "destructive" in buckets
            out.turns_write += bool(buckets & {"destructive", "write"})
    return out


def audit_references(decl: Declarations, boundary: Boundary,
                     categories: Sequence[str] = bfcl.CATEGORIES) -> dict[str, Any]:
    """The audit of ``categories`` plus their total, as JSON-ready data."""
    audits = [audit_category(c, decl, boundary) for c in categories]
    total = CategoryAudit("total")
    for a in audits:
        total.conversations += a.conversations
        total.turns += a.turns
        total.calls.update(a.calls)
        total.turns_destructive += a.turns_destructive
        total.turns_write += a.turns_write
        total.turns_no_call += a.turns_no_call
        total.functions |= a.functions
        total.hidden_only_calls.update(a.hidden_only_calls)
        total.unparsed += a.unparsed
    hidden = sorted(n for n, e in decl.functions.items()
                    if e["kind"] == "write" and e.get("hidden_only") and n not in boundary)
    return {
        "boundary": {"name": boundary.name, "version": boundary.version,
                     "functions": len(boundary.destructive)},
        "declarations": {"source": decl.source, "sha256": decl.sha256,
                         "content_sha256": decl.document.get("content_sha256")},
        "bfcl_eval": bfcl.BFCL_VERSION,
        "functions_total": len(bfcl.function_class()),
        "hidden_only_counted_as_reads": hidden,
        "categories": {a.category: a.to_json() for a in audits},
        "total": total.to_json(),
    }

