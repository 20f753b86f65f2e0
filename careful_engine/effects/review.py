"""The review sheet: what an annotator of the destructive boundary reads (§4).

Per function: its doc (description, parameters), the inferred kind, idempotence with its
evidence, footprint, signals, one or two example diffs and where the simulator method's
source lives. The sheet is blind: it carries no boundary label. Markdown has one section per
function under a heading ``## Class.function`` (what ``careful annotate-llm --sheet`` reads);
the CSV has one row per function.
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.safe_text import csv_cell, markdown_literal, markdown_text, visible
from careful_engine.core.safe_write import write_text
from careful_engine.effects import signals as sig
from careful_engine.effects.boundary import declarations_dir
from careful_engine.effects.declarations import (
    DEFINITIONS,
    Declarations,
    class_counts,
    content_hash,
)

CSV_COLUMNS = (
    "class", "function", "kind", "hidden_only", "idempotent", "repeat_checks",
    "repeat_changed", "footprint", *sig.SIGNALS, "proposed", "calls", "successful",
    "source_file", "source_line", "description", "example_call", "example_changes",
)


def default_base() -> Path:
    return declarations_dir() / "review_sheet"


@cache
def source_location(name: str) -> tuple[str, int]:
    """(path inside site-packages, first line) of the simulator method."""
    cls = bfcl.simulator_class(bfcl.function_class()[name])
    func = getattr(cls, name)
    path = Path(inspect.getsourcefile(func)).resolve()
    _, line = inspect.getsourcelines(func)
    try:
        rel = path.relative_to(bfcl.PACKAGE_DIR.parent).as_posix()
    except ValueError:
        rel = path.as_posix()
    return rel, line


def description_text(doc: dict) -> str:
    text = doc.get("description", "")
    marker = "Tool description: "
    return text.split(marker, 1)[1] if marker in text else text


def idempotence_text(e: dict) -> str:
    if e["kind"] != "write":
        return "n/a (read)"
    ev = e["evidence"]
    verdict = "idempotent" if e["idempotent"] else "NOT idempotent"
    return (f"{verdict}: the repeated call changed the state in {ev['repeat_changed']} of "
            f"{ev['repeat_checks']} checks")


def signals_text(e: dict) -> str:
    """The signals that fired for a declaration, with their counts, in the signals' order."""
    counts = e.get("signal_counts") or {}
    return ", ".join(f"{s} ({counts[s]})" for s in sig.SIGNALS if counts.get(s)) or "none"


def evidence_text(e: dict) -> str:
    """What executing the function showed: distinct calls, successes, state changes, and
    failed calls that changed the state anyway (the review sheet and the workbench)."""
    ev = e["evidence"]
    return (f"{ev['calls']} distinct calls, {ev['successful']} successful, "
            f"{ev['changing']} changed the state"
            + (f", {ev['failed_changing']} failed calls changed it anyway"
               if ev.get("failed_changing") else ""))


def kind_text(e: dict) -> str:
    if e["kind"] == "write":
        return "write (hidden state only: bfcl never compares it)" if e["hidden_only"] else "write"
    return "read" + (f" ({e['note']})" if e.get("note") else "")


def _code(text: object) -> str:
    """``visible`` text as a Markdown code span (shown as it is, whatever backticks it has)."""
    s = visible(text)
    fence = "`" * (max(map(len, re.findall("`+", s)), default=0) + 1)
    pad = " " if s[:1] in (" ", "`") or s[-1:] in (" ", "`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _example_block(ex: dict) -> list[str]:
    """An example call and its changes; text from the declarations shown as it is (a code
    span, ``visible`` lines in a code block no line of which can close it)."""
    body = []
    if not ex["changes"]:
        body.append("(no state change)")
    for c in ex["changes"]:
        path = visible(c["path"])
        if c["kind"] == "more":
            body.append(path)
            continue
        before = visible(c.get("before", ""))
        after = visible(c.get("after", ""))
        if c["kind"] == "added":
            body.append(f"+ {path} = {after}")
        elif c["kind"] == "removed":
            body.append(f"- {path} (was {before})")
        else:
            body.append(f"~ {path}: {before} -> {after}")
    fence = "`" * max([3, *(len(run) + 1 for line in body for run in re.findall("`+", line))])
    return [f"- {_code(ex['call'])} ({markdown_literal(ex['source'])}, "
            f"{markdown_literal(ex['where'])}"
            + ("" if ex.get("success", True) else ", failed") + ")", "", f"  {fence}",
            *(f"  {line}" for line in body), f"  {fence}", ""]


def function_section(name: str, e: dict) -> list[str]:
    doc = bfcl.all_func_docs()[name]
    cls = bfcl.function_class()[name]
    rel, line = source_location(name)
    lines = [f"## {cls}.{name}", "", description_text(doc), ""]
    props = (doc.get("parameters") or {}).get("properties") or {}
    required = set((doc.get("parameters") or {}).get("required") or ())
    if props:
        lines.append("Parameters:")
        for pname, spec in props.items():
            opt = "" if pname in required else ", optional"
            lines.append(f"- `{pname}` ({spec.get('type', '?')}{opt}): "
                         f"{spec.get('description', '')}".rstrip())
        lines.append("")
    else:
        lines += ["Parameters: none", ""]
    lines += [
        f"- Kind (inferred by executing it): {markdown_text(kind_text(e))}",
        f"- Idempotence: {idempotence_text(e)}",
        f"- Footprint: {', '.join(map(_code, e['footprint'])) or 'none'}",
        f"- Signals: {signals_text(e)}",
        f"- Evidence: {evidence_text(e)}",
        f"- Source: `{rel}:{line}` (`{cls}.{name}`)",
        "",
    ]
    per_call = [x for x in e.get("idempotence_evidence") or [] if x["repeat_changed"]]
    if e["kind"] == "write" and per_call:
        lines.append("Calls whose repetition changed the state again:")
        lines += [f"- {_code(x['call'])}: {x['repeat_changed']} of {x['checks']}"
                  for x in per_call]
        lines.append("")
    examples = [x for x in (e.get("example"), e.get("example_2")) if x]
    if examples:
        lines.append("Example diffs:" if e["kind"] == "write" else "Example call:")
        lines.append("")
        for ex in examples:
            lines += _example_block(ex)
    if e.get("idempotence_counterexample"):
        lines += ["Repeating the call (state after the first call -> after the second):", ""]
        lines += _example_block(e["idempotence_counterexample"])
    return lines


def markdown(decl: Declarations) -> str:
    by_class = class_counts(decl.functions)  # (counted, not the file's summary)
    total = {k: sum(c[k] for c in by_class.values()) for k in next(iter(by_class.values()))}
    lines = [
        "# Review sheet: effect declarations of BFCL's multi-turn functions",
        "",
        f"bfcl-eval {bfcl.BFCL_VERSION}; generated by `careful review-sheet` from "
        f"`effects.json` (content sha256 `{content_hash(decl.functions)[:16]}`).",
        "",
        f"{total['functions']} functions: {total['reads']} reads and {total['writes']} writes, "
        f"{total['non_idempotent_writes']} of them not idempotent, {total['hidden_only']} "
        f"changing hidden state only; {total['proposed']} proposed by the signals.",
        "",
        "Everything here was inferred by executing the functions in bfcl's own simulators and "
        "diffing the state. Your task is the one judgment that cannot be inferred: is the "
        "function destructive? A write is destructive if its effect reaches a third party or "
        "cannot be undone: it deletes or overwrites data, reaches other people, moves money, "
        "or acts in the physical world. Effects the simulator does not model are invisible "
        "here; read the source when in doubt.",
        "",
        "Signals: " + "; ".join(f"**{k}**: {v}" for k, v in
                                sorted(DEFINITIONS["signals"].items())) + ".",
        "",
    ]
    for cls in bfcl.CLASSES:
        lines += [f"# {cls}", ""]
        for d in bfcl.func_docs(cls):
            lines += function_section(d["name"], decl.functions[d["name"]])
    return "\n".join(lines).rstrip() + "\n"


def _changes_text(ex: dict | None) -> str:
    if not ex:
        return ""
    return json.dumps(ex["changes"], ensure_ascii=False, sort_keys=True)


def csv_text(decl: Declarations) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for cls in bfcl.CLASSES:
        for d in bfcl.func_docs(cls):
            name = d["name"]
            e: dict[str, Any] = decl.functions[name]
            rel, line = source_location(name)
            ev = e["evidence"]
            ex = e.get("example")
            w.writerow([csv_cell(c) if isinstance(c, str) else c for c in [
                cls, name, e["kind"], e["hidden_only"],
                "" if e["idempotent"] is None else e["idempotent"],
                ev["repeat_checks"], ev["repeat_changed"], "; ".join(e["footprint"]),
                *(e["signal_counts"].get(s, 0) for s in sig.SIGNALS), e["proposed"],
                ev["calls"], ev["successful"], rel, line, description_text(d),
                ex["call"] if ex else "", _changes_text(ex),
            ]])
    return buf.getvalue()


def write_sheet(decl: Declarations, base: Path | None = None) -> tuple[Path, Path]:
    """Write ``<base>.md`` and ``<base>.csv``."""
    base = base or default_base()
    if base.suffix in (".md", ".csv"):
        base = base.with_suffix("")

    md, cs = base.parent / f"{base.name}.md", base.parent / f"{base.name}.csv"
    write_text(md, markdown(decl))  # whole files, never through a link
    write_text(cs, csv_text(decl))
    return md, cs
