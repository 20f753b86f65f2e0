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

Files live in ``annotations/<round>/<annotator>.json``. Importing the files of a round into
another database recreates the round (its functions, kinds and proposals) and its annotators,
so it can be re-adjudicated there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .. import bfcl
from .errors import AnnotationError
from .sessions import AdjudicationSession
from .signals import FunctionInput, RoundInputs
from .store import Annotator, Label, Round, Store, now, repo_root

SCHEMA = "careful.labels/1"


def default_release_dir(round_name: str) -> Path:
    return repo_root() / "annotations" / round_name


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
    """Export label sets (every annotator of the round by default), one file each."""
    out = Path(out_dir) if out_dir is not None else default_release_dir(session.round_name)
    out.mkdir(parents=True, exist_ok=True)
    names = list(annotators) if annotators else [a.name for a in session.annotators()]
    paths = []
    for name in names:
        doc = session.export_label_set(name)
        path = out / f"{name}.json"
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def read_label_set(path: str | Path) -> dict:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise AnnotationError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise AnnotationError(f"{path}: invalid JSON ({e})") from e
    validate(doc, str(path))
    return doc


def validate(doc: dict, source: str = "<data>") -> None:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else None
        raise AnnotationError(f"{source}: not a label set (schema {got!r}, expected {SCHEMA})")
    for key in ("round", "annotator", "labels"):
        if key not in doc:
            raise AnnotationError(f"{source}: missing {key!r}")
    if not doc["round"].get("name") or not doc["round"].get("declarations_sha256"):
        raise AnnotationError(f"{source}: the round needs a name and a declarations_sha256")
    if not doc["annotator"].get("name"):
        raise AnnotationError(f"{source}: the annotator needs a name")
    classes = bfcl.function_class()
    seen = set()
    for item in doc["labels"]:
        name = item.get("function")
        if name not in classes:
            raise AnnotationError(f"{source}: {name!r} is not a multi-turn function")
        if name in seen:
            raise AnnotationError(f"{source}: {name} is labelled twice")
        seen.add(name)
        if item.get("destructive") not in (True, False, None):
            raise AnnotationError(f"{source}: {name}: destructive must be true, false or null")


def _inputs(doc: dict) -> RoundInputs:
    classes = bfcl.function_class()
    functions = {
        item["function"]: FunctionInput(
            name=item["function"],
            cls=classes[item["function"]],
            kind=item.get("kind") or "unknown",
            proposed=item.get("proposed"),
            extra=item.get("inputs") or {},
        )
        for item in doc["labels"]
    }
    rnd = doc["round"]
    return RoundInputs(functions, rnd["declarations_sha256"], rnd.get("declarations_source", ""))


def import_label_set(store: Store, doc: dict, round_name: str | None = None) -> tuple[str, int]:
    """Import one label set; returns (round, labels imported). Re-importing is a no-op.

    The round is created from the file if the database lacks it; otherwise its functions,
    kinds, proposals and declarations hash must match the file's.
    """
    validate(doc)
    round_name = round_name or doc["round"]["name"]
    inputs = _inputs(doc)
    existing = {r.name for r in store.rounds()}
    if round_name not in existing:
        store.new_round(
            round_name, inputs, blind=bool(doc["round"].get("blind", True)),
            created_by="import", note=f"imported ({doc['annotator']['name']} first)",
        )
    else:
        rnd = store.round(round_name)
        have = [(f.name, f.kind, f.proposed) for f in store.round_functions(round_name)]
        want = [(f.name, f.kind, f.proposed) for f in inputs.functions.values()]
        if rnd.declarations_sha256 != inputs.sha256 or sorted(have, key=str) != sorted(
            want, key=str
        ):
            raise AnnotationError(
                f"round {round_name} in {store.path} has other inputs than this label set "
                "(functions, kinds, proposals or declarations hash differ); import it under "
                "another round name"
            )
    ann = doc["annotator"]
    store.add_annotator(ann["name"], ann.get("kind") or "human", ann.get("model"))
    labels = [
        (item["function"], item["destructive"], item.get("reason") or "",
         item.get("labelled"), item.get("updated"))
        for item in doc["labels"]
        if item.get("destructive") is not None
    ]
    n = store._import_labels(round_name, ann["name"], labels, doc.get("submitted"))
    return round_name, n
