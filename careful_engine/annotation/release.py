"""The release format: one annotator's label set, with reasons, as one JSON file.

::

    {"schema": "careful.labels/1", "bfcl_eval": "2026.3.23",
     "round": {"name": "r1", "blind": true, "declarations_source": "...",
               "declarations_sha256": "..."},
     "annotator": {"name": "A1", "kind": "human", "model": null},
     "submitted": "2026-...Z", "exported": "2026-...Z",
     "labels": [{"function": "rm", "class": "GorillaFileSystem", "kind": "write",
                 "proposed": true, "inputs": {...}, "destructive": true,
                 "reason": "...", "labelled": "...", "updated": "..."}, ...]}

Files live in ``annotations/<round>/<annotator>.json``. A file is checked whole against
:data:`LABEL_SET_SCHEMA` (and the rules a label obeys) before anything is imported; every
problem is one line ``file:line [function]: reason``. Importing goes through
:meth:`.sessions.ImportSession.import_label_set`, one transaction per file: the round (its
functions, kinds and proposals), the annotator and the labels are all created, or nothing is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from careful_engine.annotation.database import now
from careful_engine.annotation.errors import AnnotationError, RowError
from careful_engine.annotation.names import (
    REASON_MAX,
    check_model,
    check_name,
    check_reason,
    time_problem,
)
from careful_engine.annotation.records import Annotator, ImportedLabel, Label, LabelSet, Round
from careful_engine.annotation.schema import (
    JSONFileError,
    Problem,
    kind_of,
    loads_with_lines,
    validate,
)
from careful_engine.annotation.signals import KINDS, FunctionInput, extra_problem
from careful_engine.annotation.store import reason_rule, repo_root
from careful_engine.core import bfcl
from careful_engine.core.safe_read import MAX_SMALL_BYTES, NotRegular, TooLarge, read_regular
from careful_engine.core.safe_write import write_bytes

if TYPE_CHECKING:
    from careful_engine.annotation.sessions import AdjudicationSession
    from careful_engine.annotation.store import Store

SCHEMA = "careful.labels/1"
MAX_PROBLEMS = 50

_TIME = {"type": ["string", "null"], "maxLength": 64, "format": "timestamp"}
LABEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["function", "destructive"],
    "additionalProperties": False,
    "properties": {
        "function": {"type": "string", "maxLength": 128, "format": "function"},
        "class": {"type": ["string", "null"], "maxLength": 128},
        "kind": {"type": "string", "enum": list(KINDS)},
        "proposed": {"type": ["boolean", "null"]},
        "inputs": {"type": ["object", "null"], "maxDepth": 8, "maxSize": 20_000,
                   "format": "inputs"},
        "destructive": {"type": ["boolean", "null"]},
        "reason": {"type": ["string", "null"], "maxLength": REASON_MAX, "format": "reason"},
        "labelled": _TIME,
        "updated": _TIME,
    },
}
LABEL_SET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema", "round", "annotator", "labels"],
    "additionalProperties": False,
    "properties": {
        "schema": {"type": "string", "enum": [SCHEMA]},
        "bfcl_eval": {"type": ["string", "null"], "maxLength": 64, "format": "text"},
        "round": {
            "type": "object",
            "required": ["name", "declarations_sha256"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "maxLength": 256, "format": "round"},
                "blind": {"type": "boolean"},
                "declarations_source": {"type": ["string", "null"], "maxLength": 4096,
                                        "format": "text"},
                "declarations_sha256": {"type": "string", "maxLength": 64, "format": "sha256"},
            },
        },
        "annotator": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "maxLength": 256, "format": "annotator"},
                "kind": {"type": "string", "enum": ["human", "llm"]},
                "model": {"type": ["string", "null"], "maxLength": 200, "format": "model"},
            },
        },
        "submitted": _TIME,
        "exported": _TIME,
        "labels": {"type": "array", "minItems": 1, "maxItems": 10_000, "items": LABEL_SCHEMA,
                   "uniqueBy": "function"},
    },
}


class LabelSetError(AnnotationError):
    """A label set that cannot be imported; ``problems`` holds one line per bad item."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        shown = self.problems[:MAX_PROBLEMS]
        more = len(self.problems) - len(shown)
        super().__init__("\n".join(shown) + (f"\n... and {more} more" if more else ""))


def default_release_dir(round_name: str) -> Path:
    return repo_root() / "annotations" / round_name


# ---------------------------------------------------------------------- export


def label_set_document(
    round_: Round,
    annotator: Annotator | None,
    functions: Sequence[FunctionInput],
    labels: Mapping[str, Label],
    submitted: str | None,
) -> dict:
    if annotator is None:
        raise AnnotationError("unknown annotator")
    return {
        "schema": SCHEMA,
        "bfcl_eval": bfcl.BFCL_VERSION,
        "round": {
            "name": round_.name,
            "blind": round_.blind,
            "declarations_source": round_.declarations_source,
            "declarations_sha256": round_.declarations_sha256,
        },
        "annotator": {"name": annotator.name, "kind": annotator.kind, "model": annotator.model},
        "submitted": submitted,
        "exported": now(),
        "labels": [
            {
                "function": f.name,
                "class": f.cls,
                "kind": f.kind,
                "proposed": f.proposed,
                "inputs": f.extra,
                "destructive": labels[f.name].destructive if f.name in labels else None,
                "reason": labels[f.name].reason if f.name in labels else None,
                "labelled": labels[f.name].created if f.name in labels else None,
                "updated": labels[f.name].updated if f.name in labels else None,
            }
            for f in functions
        ],
    }


def write_label_sets(
    session: AdjudicationSession,
    out_dir: str | Path | None = None,
    annotators: Iterable[str] | None = None,
) -> list[Path]:
    """Export label sets (every annotator of the round by default), one file each.

    From a blind round opened early with an override, the files are readable by this login
    only: the override (recorded) is its own, and an annotator still labelling must not read
    them in the release folder."""
    out = Path(out_dir) if out_dir is not None else default_release_dir(session.round_name)
    names = [check_name(a) for a in annotators] if annotators else [
        a.name for a in session.annotators()]
    docs = {}
    for name in names:
        try:  # never a file the importer would refuse (a row that is not careful's)
            doc = session.export_label_set(name)
            check_label_set(doc, f"{name}.json")
        except RowError as e:
            session.problem(name, f"not exported: {e}")
        except LabelSetError as e:
            for line in e.problems:
                session.problem(name, f"not exported: {line}")
        else:
            docs[name] = doc
    mode = 0o600 if session.overridden else 0o644
    # safe_write: a link (at the folder or a file) is refused, a file is replaced whole
    return [write_bytes(out / f"{name}.json",
                        (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode(),
                        root=out, mode=mode)
            for name, doc in docs.items()]


# ---------------------------------------------------------------------- reading


def _formats() -> dict[str, Any]:
    classes = bfcl.function_class()

    def refusal(check: Callable[[str], object]) -> Callable[[str], str | None]:
        """A format from an annotation check: its refusal's message, or None."""
        def message(value: str) -> str | None:
            try:
                check(value)
            except AnnotationError as e:
                return str(e)
            return None
        return message

    def function(value: str) -> str | None:
        return None if value in classes else f"{_short(value)} is not a multi-turn function"

    def sha256(value: str) -> str | None:
        ok = len(value) == 64 and all(c in "0123456789abcdef" for c in value)
        return None if ok else "expected 64 lower-case hex digits"

    def text(value: str) -> str | None:
        return None if value.isprintable() else "holds control characters"

    return {"round": refusal(lambda v: check_name(v, "round")),
            "annotator": refusal(lambda v: check_name(v, "annotator")), "function": function,
            "reason": refusal(check_reason), "model": refusal(check_model),
            "timestamp": time_problem, "sha256": sha256, "text": text,
            "inputs": extra_problem}  # what the store checks again when it reads them


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _label_id(path: str, item: object) -> str | None:
    if isinstance(item, dict) and isinstance(item.get("function"), str):
        name = item["function"]
        if len(name) <= 64 and name.isprintable():
            return name
    return None


def _rules(doc: dict) -> list[Problem]:
    """What a well-typed label set must also obey: reasons, classes, completeness."""
    classes = bfcl.function_class()
    problems: list[Problem] = []
    ann = doc["annotator"]
    kind = ann.get("kind") or "human"
    if kind == "llm" and not ann.get("model"):
        problems.append(Problem("annotator", getattr(ann, "line", None), "annotator",
                                "a language-model annotator needs its model"))
    if kind == "human" and ann.get("model"):
        problems.append(Problem("annotator", getattr(ann, "line", None), "annotator",
                                "a human annotator has no model"))
    unlabelled = 0
    for i, item in enumerate(doc["labels"]):
        name = item["function"]
        line = getattr(item, "line", None)
        where = (f"labels[{i}]", line, name)
        cls = item.get("class")
        if cls is not None and cls != classes[name]:
            problems.append(Problem(*where, f"class {_short(cls)}, bfcl says {classes[name]}"))
        if item["destructive"] is None:
            unlabelled += 1
            continue
        fn = FunctionInput(name, classes[name], item.get("kind") or "unknown",
                           item.get("proposed"))
        problem = reason_rule(fn, item["destructive"], check_reason(item.get("reason")))
        if problem:
            problems.append(Problem(*where, problem))
    if doc.get("submitted") and unlabelled:
        problems.append(Problem("submitted", getattr(doc, "line", None), "submitted",
                                f"a submitted label set must label every function "
                                f"({unlabelled} unlabelled)"))
    return problems


def check_label_set(doc: Any, source: str = "<data>") -> LabelSet:
    """``doc`` checked whole and turned into a :class:`LabelSet`, or :class:`LabelSetError`
    listing every problem as ``file:line [id]: reason``."""
    if not isinstance(doc, dict):
        what = kind_of(doc)
        raise LabelSetError([f"{source}:1 [file]: not a label set: expected a JSON object "
                             f"with schema {SCHEMA!r}, got {what}"])
    if doc.get("schema") != SCHEMA:
        raise LabelSetError([f"{source}:{getattr(doc, 'line', 1)} [schema]: not a label set "
                             f"(schema {_short(doc.get('schema'))}, expected {SCHEMA})"])
    problems = validate(doc, LABEL_SET_SCHEMA, _formats(), id_of=_label_id)
    if not problems:
        problems = _rules(doc)
    if problems:
        raise LabelSetError([p.format(source) for p in problems])
    return _label_set(doc, source)


def _label_set(doc: dict, source: str) -> LabelSet:
    classes = bfcl.function_class()
    rnd, ann = doc["round"], doc["annotator"]
    functions = tuple(
        FunctionInput(name=item["function"], cls=classes[item["function"]],
                      kind=item.get("kind") or "unknown", proposed=item.get("proposed"),
                      extra=json.loads(json.dumps(item.get("inputs") or {})))
        for item in doc["labels"]
    )
    labels = tuple(
        ImportedLabel(item["function"], item["destructive"], check_reason(item.get("reason")),
                      item.get("labelled"), item.get("updated"))
        for item in doc["labels"]
    )
    return LabelSet(
        source=source, round_name=check_name(rnd["name"], "round"),
        blind=bool(rnd.get("blind", True)),
        declarations_source=rnd.get("declarations_source") or "",
        declarations_sha256=rnd["declarations_sha256"],
        annotator=check_name(ann["name"]), kind=ann.get("kind") or "human",
        model=ann.get("model"), submitted=doc.get("submitted"), functions=functions,
        labels=labels,
    )


def read_text(path: str | Path, limit: int = MAX_SMALL_BYTES) -> str:
    """A file's text, refused (one clear line) if it is not a readable, regular, bounded,
    UTF-8 file. A leading byte-order mark is dropped."""
    path = Path(path)
    try:
        data = read_regular(path, limit)
    except (NotRegular, TooLarge) as e:
        raise LabelSetError([f"{path}: {e.strerror}"]) from None
    except OSError as e:
        raise LabelSetError([f"{path}: cannot read it ({e.strerror or e})"]) from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise LabelSetError([f"{path}:{line} [file]: not UTF-8 (byte 0x{data[e.start]:02x} "
                             f"at offset {e.start})"]) from None
    if not text.strip():
        raise LabelSetError([f"{path}:1 [file]: empty file"])
    return text


def _parse(path: str | Path) -> Any:
    """A label-set file's JSON (with line numbers for the checks), not yet checked."""
    try:
        return loads_with_lines(read_text(path))
    except JSONFileError as e:
        raise LabelSetError([f"{path}:{e.line or 1} [file]: {e}"]) from None


def read_label_set(path: str | Path) -> dict:
    """A label-set file, parsed and checked whole (see :func:`check_label_set`)."""
    doc = _parse(path)
    check_label_set(doc, str(path))
    return doc


def load_label_set(path: str | Path) -> LabelSet:
    """A label-set file, parsed and checked whole, as a :class:`LabelSet`."""
    return check_label_set(_parse(path), str(path))


def import_label_set(
    store: Store, doc: dict | LabelSet, round_name: str | None = None, *, who: str | None = None,
) -> tuple[str, int]:
    """Import one label set; returns (round, labels imported). Re-importing is a no-op.

    Goes through :meth:`.store.Store.import_session`: the round is created from the file if
    the database lacks it (otherwise its inputs must match), all in one transaction.
    """
    labelset = doc if isinstance(doc, LabelSet) else check_label_set(doc)
    return store.import_session(who).import_label_set(labelset, round_name)


__all__ = ["LABEL_SET_SCHEMA", "SCHEMA", "LabelSetError", "check_label_set",
           "import_label_set", "label_set_document", "load_label_set", "read_label_set",
           "write_label_sets"]
