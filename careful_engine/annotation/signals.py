"""A round's inputs: which functions, their kind (read/write) and the signals' proposal.

They come from an effect-declarations file shaped like::

    {"functions": {"rm": {"kind": "write", "proposed": true,
                          "signals": ["entries-removed"], "idempotent": true,
                          "footprint": ["..."]}, ...}}

(``functions`` may also be a list of objects with a ``name``). Without a file, every one of
the 128 multi-turn functions is an input with kind ``unknown`` and no proposal. The inputs'
version hash is the sha256 of the file's bytes, or of the canonical JSON of the function list.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.schema import JSONFileError, loads_with_lines
from careful_engine.core import bfcl
from careful_engine.core.json_values import a_kind, json_problem
from careful_engine.core.safe_read import MAX_SMALL_BYTES, read_regular
from careful_engine.core.safe_text import visible
from careful_engine.effects.boundary import declarations_dir

KINDS = ("read", "write", "unknown")
EXTRA_KEYS = ("signals", "idempotent", "footprint")


def extra_problem(extra: object) -> str | None:
    """What is wrong with a function's inputs beyond its kind (``signals`` and ``footprint``
    lists of text, ``idempotent`` true, false or null, as ``careful declare`` writes them),
    or None."""
    if not isinstance(extra, dict):
        return f"its inputs are {a_kind(extra)}, not an object"
    for key in ("signals", "footprint"):
        value = extra.get(key)
        if value is not None and not (isinstance(value, list)
                                      and all(isinstance(x, str) for x in value)):
            return f"{key} is not a list of text"
    if extra.get("idempotent") is not None and not isinstance(extra["idempotent"], bool):
        return "idempotent is not true, false or null"
    return None


@dataclass(frozen=True)
class FunctionInput:
    """One function as a round presents it to annotators."""

    name: str
    cls: str
    kind: str = "unknown"
    proposed: bool | None = None  # the signals' proposal: destructive candidate or not
    extra: dict = field(default_factory=dict, compare=False)  # signals, idempotent, footprint


@dataclass(frozen=True)
class RoundInputs:
    functions: dict[str, FunctionInput]
    sha256: str
    source: str

    def select(self, which: str | Iterable[str] = "all") -> RoundInputs:
        """``all``, ``writes``, or explicit function names (order of the inputs kept)."""
        if isinstance(which, str) and which in ("all", "writes"):
            if which == "all":
                return self
            names = [n for n, f in self.functions.items() if f.kind == "write"]
            if not names:
                raise AnnotationError(
                    f"{self.source} declares no writes; use --functions all or name them"
                )
        else:
            wanted = [which] if isinstance(which, str) else list(which)
            unknown = [n for n in wanted if n not in self.functions]
            if unknown:
                raise AnnotationError(f"not among the round inputs: {', '.join(unknown)}")
            names = [n for n in self.functions if n in set(wanted)]
        return RoundInputs({n: self.functions[n] for n in names}, self.sha256, self.source)


def default_declarations_path() -> Path:
    return declarations_dir() / "effects.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _bool_or_none(value: object, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise AnnotationError(f"{where}: expected true, false or null, got {value!r}")


def _at(source: str, value: object) -> str:
    """``source:line`` where ``value`` was read with its line (:func:`.schema.loads_with_lines`)."""
    line = getattr(value, "line", None)
    return f"{source}:{line}" if line else source


def parse_declarations(data: dict, source: str = "<data>") -> dict[str, FunctionInput]:
    """The per-function inputs of a declarations document (names checked against bfcl)."""
    if not isinstance(data, dict) or "functions" not in data:
        raise AnnotationError(f"{source}: expected an object with a 'functions' key")
    raw = data["functions"]
    if isinstance(raw, list):
        if not all(isinstance(item, dict) and isinstance(item.get("name"), str)
                   for item in raw):
            raise AnnotationError(f"{source}: every function in the list needs a name")
        first: dict[str, int] = {}
        for i, item in enumerate(raw):
            if item["name"] in first:
                raise AnnotationError(
                    f"{_at(source, item)}: functions[{i}]: {visible(item['name'])[:60]} is "
                    f"listed twice (first at functions[{first[item['name']]}])")
            first[item["name"]] = i
        raw = {item["name"]: item for item in raw}
    if not isinstance(raw, dict):
        raise AnnotationError(f"{source}: 'functions' must be an object or a list")
    classes = bfcl.function_class()
    unknown = sorted(n for n in raw if n not in classes)
    if unknown:
        raise AnnotationError(
            f"{source}: not multi-turn functions of bfcl-eval {bfcl.BFCL_VERSION}: "
            + ", ".join(visible(n)[:60] for n in unknown[:10])
            + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
        )
    problem = json_problem(raw)  # kept in the round and exported again: UTF-8, finite
    if problem is not None:
        raise AnnotationError(f"{source}: {problem}")
    out: dict[str, FunctionInput] = {}
    for name in sorted(raw, key=lambda n: (bfcl.CLASSES.index(classes[n]), n)):
        entry = raw[name]
        if not isinstance(entry, dict):
            raise AnnotationError(f"{_at(source, raw)}: {name}: expected an object, got "
                                  f"{a_kind(entry)}")
        kind = entry.get("kind", "unknown") or "unknown"
        if kind not in KINDS:
            raise AnnotationError(f"{source}: {name}: kind must be one of {KINDS}, got {kind!r}")
        proposed = entry.get("proposed", entry.get("destructive_candidate"))
        problem = extra_problem({k: entry[k] for k in EXTRA_KEYS if k in entry})
        if problem is not None:
            raise AnnotationError(f"{source}: {visible(name)}: {problem}")
        out[name] = FunctionInput(
            name=name,
            cls=classes[name],
            kind=kind,
            proposed=_bool_or_none(proposed, f"{source}: {name}: proposed"),
            extra={k: entry[k] for k in EXTRA_KEYS if k in entry},
        )
    return out


def fallback_inputs() -> RoundInputs:
    """All 128 functions, kind unknown, no proposal; hashed over the canonical function list."""
    classes = bfcl.function_class()
    listing = {
        "bfcl_eval": bfcl.BFCL_VERSION,
        "functions": [{"name": n, "class": c} for n, c in classes.items()],
    }
    canonical = json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()
    functions = {n: FunctionInput(name=n, cls=c) for n, c in classes.items()}
    return RoundInputs(functions, _sha256(canonical), f"<bfcl-eval {bfcl.BFCL_VERSION} functions>")


def load_inputs(path: str | Path | None = None) -> RoundInputs:
    """Inputs from ``path``, else from ``declarations/effects.json`` if present, else fallback."""
    if path is None:
        default = default_declarations_path()
        if not default.exists():
            return fallback_inputs()
        path = default
    path = Path(path)
    try:
        raw = read_regular(path, MAX_SMALL_BYTES)  # not a FIFO, bounded
    except OSError as e:
        raise AnnotationError(f"cannot read declarations {path}: {e.strerror or e}") from e
    try:  # (a key twice in one object is refused, with its line, as in a label set)
        data = loads_with_lines(raw.decode(json.detect_encoding(raw)))
    except UnicodeDecodeError as e:
        raise AnnotationError(f"{path}: not usable JSON ({str(e)[:100]})") from e
    except JSONFileError as e:
        raise AnnotationError(f"{path}:{e.line or 1}: {e}") from e
    return RoundInputs(parse_declarations(data, str(path)), _sha256(raw), str(path))
