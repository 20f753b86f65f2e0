"""``declarations/effects.json``: generating, writing, reading, and Table 2 of the paper.

The document is deterministic: no timestamps, keys sorted, one fixed seed; it records the
pinned bfcl-eval version, the sources with their counts (result files by path relative to the
folder given and by sha256) and a hash of the ``functions`` section.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.json_values import (
    JSONTextError,
    a_kind,
    json_problem,
    line_at,
    loads,
    loads_located,
)
from careful_engine.core.safe_read import MAX_SMALL_BYTES, read_regular
from careful_engine.core.safe_text import clip, visible
from careful_engine.core.safe_write import write_text
from careful_engine.effects import infer
from careful_engine.effects import signals as sig
from careful_engine.effects.boundary import Boundary, declarations_dir
from careful_engine.effects.observe import (
    Recorder,
    find_runs,
    observe_references,
    observe_run,
    pinned_clock,
)
from careful_engine.effects.probes import run_probes

SCHEMA = "careful.effects/1"

# stage name, total -> a function advancing that stage
ProgressFactory = Callable[[str, int], Callable[[int], None]]

DEFINITIONS = {
    "success": "the call did not raise, return an error field or return a false status flag",
    "kind": "write if any successful call changed the state (hidden state included), "
            "else read; a function with no successful call is a read on failing evidence",
    "hidden_only": "a write whose successful calls changed only private state, which bfcl's "
                   "checker never compares",
    "idempotent": "writes only: every successful state-changing call, applied again to the "
                  "state it produced, changed nothing (evidence over sampled states, not a proof)",
    "footprint": "paths changed by successful calls; integer and digit-string keys and keys of "
                 "dicts whose key set an observed call changed become [*]; the file tree is /**",
    "signals": {
        sig.ENTRIES_REMOVED: "a public dict key removed or a list shortened",
        sig.BALANCE_CHANGED: "a number changed at a path whose last key mentions 'balance'",
        sig.THIRD_PARTY: "an entry added to " + "; ".join(
            f"{c}.{a} ({what})" for (c, a), what in sig.THIRD_PARTY_COLLECTIONS.items()),
    },
    "proposed": "some signal was raised: a candidate for the destructive boundary, which "
                "people decide (declarations/boundary/)",
    "clock": "the travel simulator's datetime.today() is pinned to 2026-03-23 (its age check "
             "reads the wall clock)",
    "evidence": "counts of distinct observations: (function, class state before, call with "
                "arguments bound to names); each is attributed to the first source that made it "
                "(references, then probes, then runs)",
}


class DeclarationsError(ValueError):
    pass


def default_path() -> Path:
    return declarations_dir() / "effects.json"


def default_runs_dir() -> Path:
    return declarations_dir().parent / "runs"


@dataclass
class Generated:
    document: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0  # run files that could not be used


def _contributes(summary: dict[str, Any]) -> bool:
    return any(summary[k] for k in ("observations", "nonexistent_function_calls",
                                    "uninvolved_function_calls", "unparsed_calls"))


def generate(runs: Sequence[Path] = (), decoders: dict[str, str] | None = None,
             progress: ProgressFactory | None = None) -> Generated:
    """Observe (references, probes, runs), infer, and build the effects document."""

    def stage(name: str, total: int) -> Callable[[int], None] | None:
        return progress(name, total) if progress else None

    evidence = infer.Evidence()
    recorder = Recorder(evidence.add)
    n_refs = sum(len(bfcl.conversations(c)) for c in bfcl.CATEGORIES)
    run_files, warnings = find_runs(runs, decoders or {})
    usable = [r for r in run_files if not r.skipped]
    run_summaries = []
    with pinned_clock():
        references = observe_references(recorder, progress=stage("references", n_refs))
        probes, _ = run_probes(recorder, progress=stage("probes", len(bfcl.function_class())))
        advance = stage("runs", sum(r.conversations for r in usable))
        for run in usable:
            summary = observe_run(recorder, run, progress=advance)
            if _contributes(summary):
                run_summaries.append(summary)
            else:
                warnings.append(f"{run.file.path}: adds no observation beyond the other "
                                "sources (not listed)")
    functions = infer.declarations(evidence, recorder.unrepresentable)
    totals = {
        key: sum(s[key] for s in run_summaries)
        for key in ("conversations", "calls", "observations", "inference_errors",
                    "nonexistent_function_calls", "uninvolved_function_calls", "unparsed_calls")
    }
    sources = {
        "references": references,
        "probes": probes,
        "runs": {"files": run_summaries, "total": totals},
    }
    return Generated(document(functions, sources), warnings,
                     sum(1 for r in run_files if r.skipped))


def content_hash(functions: dict[str, Any]) -> str:
    canonical = json.dumps(functions, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def class_counts(functions: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per class: functions, reads, writes, non-idempotent writes, hidden-only writes."""
    out = {}
    for cls in bfcl.CLASSES:
        entries = [functions[d["name"]] for d in bfcl.func_docs(cls)]
        writes = [e for e in entries if e["kind"] == "write"]
        out[cls] = {
            "functions": len(entries),
            "reads": len(entries) - len(writes),
            "writes": len(writes),
            "non_idempotent_writes": sum(e["idempotent"] is False for e in writes),
            "hidden_only": sum(e["hidden_only"] for e in writes),
            "proposed": sum(e["proposed"] for e in entries),
        }
    return out


def summary_text(doc: dict[str, Any]) -> str:
    """The declarations in one sentence, as every front end says it: functions, reads, writes
    (not idempotent, hidden-only) and the proposals of the signals, counted from the
    document's ``functions`` (as :func:`load` checks them; never from its ``summary``, which
    a file edited by hand may contradict)."""
    by_class = class_counts(doc["functions"])
    t = {k: sum(c[k] for c in by_class.values()) for k in next(iter(by_class.values()))}
    return (f"{t['functions']} functions: {t['reads']} reads, {t['writes']} writes "
            f"({t['non_idempotent_writes']} not idempotent, {t['hidden_only']} hidden-only); "
            f"{t['proposed']} proposed by the signals")


def document(functions: dict[str, Any], sources: dict[str, Any]) -> dict[str, Any]:
    by_class = class_counts(functions)
    total = {k: sum(c[k] for c in by_class.values()) for k in next(iter(by_class.values()))}
    return {
        "schema": SCHEMA,
        "bfcl_eval": bfcl.BFCL_VERSION,
        "definitions": DEFINITIONS,
        "sources": sources,
        "summary": {"by_class": by_class, "total": total},
        "content_sha256": content_hash(functions),
        "functions": functions,
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(doc: dict[str, Any], path: Path) -> Path:
    """Write the document whole, never through a link (:mod:`careful_engine.core.safe_write`)."""
    return write_text(path, dumps(doc), errors="backslashreplace")


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class Declarations:
    """A loaded effects document."""

    functions: dict[str, dict[str, Any]]
    document: dict[str, Any]
    sha256: str  # of the file's bytes
    source: str

    def kind(self, name: str) -> str:
        return self.functions[name]["kind"]

    def is_write(self, name: str) -> bool:
        return self.functions[name]["kind"] == "write"

    def hidden_only(self, name: str) -> bool:
        return bool(self.functions[name].get("hidden_only"))

    def bucket(self, name: str, boundary: Boundary) -> str:
        """``destructive`` (in the boundary), ``write`` (other public writes) or ``read``
        (reads and hidden-only writes, whose effect bfcl never sees)."""
        if name in boundary:
            return "destructive"
        if self.is_write(name) and not self.hidden_only(name):
            return "write"
        return "read"


def load(path: str | Path | None = None) -> Declarations:
    path = Path(path) if path is not None else default_path()
    try:
        raw = read_regular(path, MAX_SMALL_BYTES)  # not a FIFO, bounded
    except OSError as e:
        raise DeclarationsError(f"cannot read declarations {path}: {e.strerror or e}; "
                                "run `careful declare` to generate them") from e
    try:  # (UTF-8, or the UTF-16 or 32 that json.loads reads from bytes)
        doc = loads(raw.decode(json.detect_encoding(raw)))
    except json.JSONDecodeError as e:
        raise DeclarationsError(f"{path}: invalid JSON ({e})") from e
    except JSONTextError as e:  # a key given twice
        raise DeclarationsError(f"{path}:{e.line or 1}: {e}") from e
    except (ValueError, RecursionError) as e:  # not UTF-8, nested too deep, huge numbers
        raise DeclarationsError(f"{path}: not usable JSON ({str(e)[:100]})") from e
    where = visible(str(path))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise DeclarationsError(f"{where}: not an effects document (schema "
                                f"{visible(clip(repr(schema), 80))})")
    functions = doc.get("functions") or {}
    if not isinstance(functions, dict):
        raise DeclarationsError(f"{where}: 'functions' is {a_kind(functions)}, "
                                "not an object of declarations")
    missing = sorted(set(bfcl.function_class()) - set(functions))
    if missing:
        raise DeclarationsError(f"{where}: no declaration for {', '.join(missing[:5])}"
                                + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    known = bfcl.function_class()
    unknown = sorted(set(functions) - set(known))
    if unknown:
        shown = ", ".join(visible(clip(repr(name), 60)) for name in unknown[:5])
        raise DeclarationsError(f"{where}: declarations for functions bfcl does not have: "
                                f"{shown}"
                                + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
    bad = [(name, reason) for name, e in functions.items()
           if (reason := entry_problem(e, known.get(name))) is not None]
    if bad:
        raise DeclarationsError(_entry_problems(where, raw, bad))
    return Declarations(functions, doc, hashlib.sha256(raw).hexdigest(), str(path))


def _entry_problems(where: str, raw: bytes, bad: list[tuple[str, str]]) -> str:
    """``file:line [function]: reason`` for the first three bad declarations, and how many
    there are (the lines found by reading the file again, now that something is wrong)."""
    try:
        located = loads_located(raw.decode(json.detect_encoding(raw)))
    except (ValueError, RecursionError):  # (read once already; deeper than this reader goes)
        located = None
    shown = []
    for name, reason in bad[:3]:
        line = line_at(located, "functions", name)
        shown.append(f"{where}{f':{line}' if line else ''} [{visible(name)[:60]}]: {reason}")
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    return (f"{'; '.join(shown)}{more} ({len(bad)} declaration(s) not of the shape careful "
            "declare writes)")


# what each field of a declaration holds (careful declare writes every one of them)
_FIELDS: dict[str, tuple[type | None, ...]] = {
    "class": (str,), "kind": (str,), "hidden_only": (bool,), "proposed": (bool,),
    "idempotent": (bool, None), "note": (str, None), "footprint": (list,), "signals": (list,),
    "signal_counts": (dict,), "evidence": (dict,), "example": (dict, None),
    "example_2": (dict, None), "idempotence_counterexample": (dict, None),
    "idempotence_evidence": (list,),
}


# what the fields of an evidence object, an example and a repeat check hold (what the review
# sheet, the workbench and the MCP export read)
_EVIDENCE = {"calls": (int,), "successful": (int,), "changing": (int,), "repeat_checks": (int,),
             "repeat_changed": (int,), "failed": (int, None), "failed_changing": (int, None),
             "hidden_only_calls": (int, None), "cyclic_state_calls": (int, None),
             "by_source": (dict, None)}
_EXAMPLE = {"call": (str,), "source": (str,), "where": (str,), "changes": (list,),
            "success": (bool, None)}
_CHANGE = {"kind": (str,), "path": (str,), "before": (str, None), "after": (str, None)}
_REPEAT = {"call": (str,), "checks": (int,), "repeat_changed": (int,)}


def _field_problem(obj: dict, fields: dict[str, tuple[type | None, ...]],
                   prefix: str = "") -> str | None:
    """The first field of ``obj`` not of its type in ``fields`` (None: may be missing or
    null; ints are counts from 0), or None."""
    for key, types in fields.items():
        value = obj.get(key)
        if not any(value is None if t is None else type(value) is t for t in types):
            return f"{prefix}{key} is {'missing' if key not in obj else a_kind(value)}"
        if type(value) is int and value < 0:
            return f"{prefix}{key} is {value}, not a count"
    return None


def _example_problem(ex: Any, key: str) -> str | None:
    if ex is None:
        return None
    problem = _field_problem(ex, _EXAMPLE, f"{key}.")
    if problem is not None:
        return problem
    for k, change in enumerate(ex["changes"]):
        if not isinstance(change, dict):
            return f"{key}.changes[{k}] is {a_kind(change)}, not an object"
        problem = _field_problem(change, _CHANGE, f"{key}.changes[{k}].")
        if problem is not None:
            return problem
    return None


def entry_problem(entry: Any, cls: str | None = None) -> str | None:
    """Why a function's declaration is not one ``careful declare`` writes, or None: an object
    whose fields hold what :data:`_FIELDS` says (kind read or write; footprint and signals
    lists of names; signal counts, evidence, examples and repeat checks with the fields and
    types their readers use), of class ``cls`` where given, with no lone surrogate or
    non-finite number anywhere in it."""
    if not isinstance(entry, dict):
        return f"{a_kind(entry)}, not an object"
    problem = _field_problem(entry, _FIELDS)
    if problem is not None:
        return problem
    if entry["kind"] not in ("read", "write"):
        return f"kind {visible(entry['kind'])[:20]!r} is neither read nor write"
    if cls is not None and entry["class"] != cls:
        return f"class {visible(repr(entry['class']))[:40]} is not its function's ({cls})"
    if not all(isinstance(x, str) for x in (*entry["footprint"], *entry["signals"])):
        return "footprint and signals must be lists of names"
    for name, count in entry["signal_counts"].items():
        if type(count) is not int or count < 0:
            return (f"signal_counts[{visible(repr(name))[:40]}] is "
                    f"{visible(repr(count))[:20]}, not a count")
    problems = (_field_problem(entry["evidence"], _EVIDENCE, "evidence."),
                *(_example_problem(entry[key], key)
                  for key in ("example", "example_2", "idempotence_counterexample")),
                *(f"idempotence_evidence[{k}] is {a_kind(check)}, not an object"
                  if not isinstance(check, dict)
                  else _field_problem(check, _REPEAT, f"idempotence_evidence[{k}].")
                  for k, check in enumerate(entry["idempotence_evidence"])))
    problem = next((p for p in problems if p is not None), None)
    return problem or json_problem(entry)


# ---------------------------------------------------------------- Table 2

TABLE2_COLUMNS = ("functions", "read", "write", "destructive", "non_idempotent_writes",
                  "hidden_only")


def table2(functions: dict[str, dict[str, Any]], boundary: Boundary) -> dict[str, dict[str, int]]:
    """The paper's Table 2: per class (and ``Total``) functions, reads, writes and hidden-only
    writes outside the boundary (the columns add up to the functions), destructive (the
    boundary), non-idempotent writes (inside the boundary too)."""
    rows: dict[str, dict[str, int]] = {}
    for cls in bfcl.CLASSES:
        row = dict.fromkeys(TABLE2_COLUMNS, 0)
        for doc in bfcl.func_docs(cls):
            e = functions[doc["name"]]
            row["functions"] += 1
            write = e["kind"] == "write"
            row["non_idempotent_writes"] += write and e["idempotent"] is False
            if doc["name"] in boundary:
                row["destructive"] += 1
            elif write and e["hidden_only"]:
                row["hidden_only"] += 1
            elif write:
                row["write"] += 1
            else:
                row["read"] += 1
        rows[cls] = {k: int(v) for k, v in row.items()}
    rows["Total"] = {k: sum(r[k] for r in rows.values()) for k in TABLE2_COLUMNS}
    return rows
