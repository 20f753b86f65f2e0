"""One function's review-sheet entry as data: what a blind annotator reads (no labels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from careful_engine.core import bfcl

# ---------------------------------------------------------------- the review sheet, as data


@dataclass(frozen=True)
class ReviewExample:
    heading: str
    changes: tuple[dict, ...]  # {"path", "kind": added|removed|changed|more, "before", "after"}


@dataclass(frozen=True)
class FunctionReview:
    """What an annotator reads about one function (no label of anyone's)."""

    name: str
    cls: str
    description: str
    parameters: tuple[str, ...]
    facts: tuple[tuple[str, str], ...]
    examples: tuple[ReviewExample, ...]
    repeat: ReviewExample | None
    source: str


def _example(ex: dict) -> ReviewExample:
    heading = f"{ex['call']} ({ex['source']}, {ex['where']}" \
        + ("" if ex.get("success", True) else ", failed") + ")"
    return ReviewExample(heading, tuple(ex.get("changes") or ()))


def function_review(fn: Any, declarations: Any | None = None) -> FunctionReview:
    """The review-sheet entry of ``fn`` (a round's FunctionInput) as data.

    With ``declarations`` (a loaded effects document) the facts and example diffs are the
    sheet's; without, only the round's frozen inputs are shown.
    """
    from careful_engine.annotation.llm import simulator_source
    from careful_engine.effects import review

    doc = bfcl.all_func_docs().get(fn.name, {})
    params = (doc.get("parameters") or {}).get("properties") or {}
    required = set((doc.get("parameters") or {}).get("required") or ())
    parameters = tuple(
        f"{p} ({spec.get('type', '?')}{'' if p in required else ', optional'}): "
        f"{spec.get('description', '')}".rstrip(": ") for p, spec in params.items())
    e = (declarations.functions.get(fn.name) if declarations is not None else None)
    proposal = ("none" if fn.proposed is None else
                "destructive candidate" if fn.proposed else "not a candidate")
    facts: list[tuple[str, str]]
    examples: tuple[ReviewExample, ...] = ()
    repeat = None
    if e is not None:
        rel, line = review.source_location(fn.name)
        facts = [  # (the review sheet's words: careful_engine.effects.review)
            ("kind", review.kind_text(e)),
            ("idempotence", review.idempotence_text(e)),
            ("footprint", ", ".join(e["footprint"]) or "none"),
            ("signals", review.signals_text(e)),
            ("proposal", proposal),
            ("evidence", review.evidence_text(e)),
            ("source", f"{'/'.join(rel.split('/')[-2:])}:{line}"),
        ]
        examples = tuple(_example(x) for x in (e.get("example"), e.get("example_2")) if x)
        if e.get("idempotence_counterexample"):
            repeat = _example(e["idempotence_counterexample"])
    else:
        extra = fn.extra or {}
        idem = extra.get("idempotent")
        facts = [
            ("kind", fn.kind),
            ("idempotence", "unknown" if idem is None else
             "idempotent" if idem else "NOT idempotent"),
            ("footprint", ", ".join(map(str, extra.get("footprint") or [])) or "unknown"),
            ("signals", ", ".join(map(str, extra.get("signals") or [])) or "none"),
            ("proposal", proposal),
        ]
    return FunctionReview(fn.name, fn.cls, review.description_text(doc) if doc else "(no doc)",
                          parameters, tuple(facts), examples, repeat, simulator_source(fn))
