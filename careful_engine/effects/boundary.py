"""Destructive boundaries: versioned sets of destructive functions, with who decided and why.

A boundary file lives in ``declarations/boundary/<name>.json``::

    {"schema": "careful.boundary/1", "name": "paper-final", "version": 1,
     "decided_by": ["A1", ...], "method": "...", "created": "YYYY-MM-DD",
     "bfcl_eval": "2026.3.23",
     "destructive": [{"name": "rm", "class": "GorillaFileSystem", "reason": "..."}, ...]}

Functions not listed are not destructive. ``--boundary`` accepts a path to such a file or a
name: a boundary of the declarations folder, else ``<name>.json`` in the working folder (where
``careful adjudicate`` writes the boundaries people make). The package ships
:data:`SHIPPED` (the paper's), the ones ``careful sensitivity`` compares by default.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.json_values import JSONTextError, a_kind, loads
from careful_engine.core.safe_read import MAX_SMALL_BYTES, read_regular, same_file
from careful_engine.core.safe_text import clip, misleading, visible
from careful_engine.core.safe_write import write_text

SCHEMA = "careful.boundary/1"
DEFAULT_BOUNDARY = "paper-final"
# The boundaries the package ships in declarations/boundary/ (the paper's, written by
# `careful adjudicate` from annotations/paper/: annotation.paper_labels.BOUNDARIES).
SHIPPED = ("paper-final", "paper-majority", "paper-A1", "paper-A2", "paper-A3", "paper-A4")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a boundary's name (its file's stem)


def declarations_dir() -> Path:
    """The repository's declarations folder (next to the careful_engine package)."""
    return Path(__file__).resolve().parents[2] / "declarations"


def boundary_dir() -> Path:
    return declarations_dir() / "boundary"


def shipped() -> list[str]:
    """The names of the shipped boundaries (:data:`SHIPPED`), sorted; a file added to the
    declarations folder by hand or by an older ``careful adjudicate`` is not one."""
    return sorted(SHIPPED)


def user_path(name: str) -> Path:
    """Where ``careful adjudicate`` writes a boundary by default, and where a name not in the
    declarations folder is looked up: ``<name>.json`` in the working folder."""
    return Path(f"{name}.json")


class BoundaryError(ValueError):
    pass


@dataclass(frozen=True)
class Boundary:
    name: str
    destructive: dict[str, str]  # function name -> reason
    version: int = 1
    decided_by: tuple[str, ...] = ()
    method: str = ""
    created: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def __contains__(self, function: str) -> bool:
        return function in self.destructive

    def to_json(self) -> dict:
        classes = bfcl.function_class()
        return {
            "schema": SCHEMA,
            "name": self.name,
            "version": self.version,
            "decided_by": list(self.decided_by),
            "method": self.method,
            "created": self.created,
            "bfcl_eval": bfcl.BFCL_VERSION,
            **self.extra,
            "destructive": [
                {"name": n, "class": classes.get(n, "?"), "reason": self.destructive[n]}
                for n in sorted(self.destructive, key=lambda n: (classes.get(n, "~"), n))
            ],
        }

    def save(self, path: Path | None = None) -> Path:
        path = path or boundary_dir() / f"{self.name}.json"

        return write_text(path, json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n",
                          errors="backslashreplace")


def _plain(text: str, source: str, what: str) -> None:
    """Refuse text holding a character careful refuses in the reasons and names it stores
    (:func:`~careful_engine.core.safe_text.misleading`: controls other than newline and tab,
    bidi overrides, unassigned...): the rule ``careful adjudicate`` writes them under."""
    bad = misleading(text, lines=True)
    if bad:
        raise BoundaryError(f"{source}: {what} holds a control character {bad} "
                            f"({clip(visible(repr(text)), 80)})")


def _check_decisions(decisions: object, known: dict[str, str], source: str) -> None:
    """The manual decisions ``careful adjudicate`` records (optional): each of a known
    function, with an author and a reason in plain text."""
    if decisions is None:
        return
    if not isinstance(decisions, list):
        raise BoundaryError(f"{source}: 'decisions' is {a_kind(decisions)}, not a list")
    for k, d in enumerate(decisions):
        if not isinstance(d, dict):
            raise BoundaryError(f"{source}: decisions[{k}] is {a_kind(d)}, not an object")
        name = d.get("function")
        if not isinstance(name, str) or name not in known:
            raise BoundaryError(f"{source}: decisions[{k}]: {clip(visible(repr(name)), 80)} "
                                "is not one of the 128 multi-turn functions")
        for key in ("author", "reason"):
            value = d.get(key)
            if not isinstance(value, str) or not value.strip():
                raise BoundaryError(f"{source}: decisions[{k}] ({name}) has no {key}")
            _plain(value, source, f"decisions[{k}] ({name}) {key}")


def from_json(data: Any, source: str = "<data>") -> Boundary:
    """A boundary from its JSON document; :class:`BoundaryError` (naming ``source``) for any
    document that is not one: every field is checked; only the descriptive ones (version,
    decided_by, method, created) may be left out."""
    if not isinstance(data, dict):
        raise BoundaryError(f"{source}: not a boundary file ({a_kind(data)}, "
                            "not an object)")
    if data.get("schema") != SCHEMA:
        raise BoundaryError(f"{source}: not a boundary file (schema "
                            f"{visible(repr(data.get('schema')))[:80]})")
    items = data.get("destructive")
    if not isinstance(items, list):
        given = "missing" if "destructive" not in data else a_kind(items)
        raise BoundaryError(f"{source}: 'destructive' must be a list of functions, not {given}")
    known = bfcl.function_class()
    destructive: dict[str, str] = {}
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            raise BoundaryError(f"{source}: destructive[{k}] is {a_kind(item)}, not an "
                                "object with a name and a reason")
        name, reason = item.get("name"), item.get("reason")
        if not isinstance(name, str) or name not in known:
            raise BoundaryError(f"{source}: {visible(repr(name))[:80]} is not one of the 128 "
                                "multi-turn functions")
        cls = item.get("class", known[name])  # (optional; written by careful adjudicate)
        if cls != known[name]:
            raise BoundaryError(f"{source}: {name} is a function of {known[name]}, not of "
                                f"{visible(repr(cls))[:80]}")
        if not isinstance(reason, str) or not reason.strip():
            raise BoundaryError(f"{source}: {name} has no reason")
        _plain(reason, source, f"{name}'s reason")
        if name in destructive:
            raise BoundaryError(f"{source}: {name} is listed twice")
        destructive[name] = reason
    name = data.get("name", Path(source).stem)
    version = data.get("version", 1)
    decided_by = data.get("decided_by", [])
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BoundaryError(f"{source}: 'name' must be letters, digits, '.', '_' and '-', not "
                            f"{visible(repr(name))[:80]}")
    if type(version) is not int or version < 1:
        raise BoundaryError(f"{source}: 'version' must be a whole number from 1, not "
                            f"{visible(repr(version))[:40]}")
    if not isinstance(decided_by, list) or not all(isinstance(x, str) for x in decided_by):
        raise BoundaryError(f"{source}: 'decided_by' must be a list of names")
    for who in decided_by:
        _plain(who, source, "a name in 'decided_by'")
    _check_decisions(data.get("decisions"), known, source)
    for key in ("method", "created"):
        if not isinstance(data.get(key, ""), str):
            raise BoundaryError(f"{source}: {key!r} must be text")
    standard = {"schema", "name", "version", "decided_by", "method", "created", "bfcl_eval",
                "destructive"}
    return Boundary(
        name=name,
        destructive=destructive,
        version=version,
        decided_by=tuple(decided_by),
        method=data.get("method", ""),
        created=data.get("created", ""),
        extra={k: v for k, v in data.items() if k not in standard},
    )


def load(name_or_path: str | Path = DEFAULT_BOUNDARY) -> Boundary:
    """Load a boundary by name (``declarations/boundary/<name>.json``, else
    ``<name>.json`` in the working folder: :func:`user_path`) or by path. A file
    elsewhere that calls itself by the name of one of the declarations folder's boundaries
    must list the same destructive functions (else outputs would record a changed boundary
    under the stock name): :class:`BoundaryError` asks to rename it."""
    path = Path(name_or_path)
    if not path.suffix:
        name = str(name_or_path)
        own = user_path(name)
        if NAME.fullmatch(name) and not (boundary_dir() / own.name).is_file() and own.is_file():
            path = own
        else:
            return load_named(name)
    got = read_file(path)
    stock = boundary_dir() / f"{got.name}.json"
    if stock.is_file() and not same_file(path, stock):
        theirs = read_file(stock)
        if theirs.destructive.keys() != got.destructive.keys():
            raise BoundaryError(
                f"{visible(str(path))}: calls itself {got.name!r}, the name of "
                f"declarations/boundary/{got.name}.json, but lists other destructive "
                "functions; give it a name of its own")
    return got


def load_named(name: str) -> Boundary:
    """A boundary of the declarations folder by its name only (a name read from a file that
    others wrote, such as a run's manifest, never becomes a path)."""
    if not NAME.fullmatch(name):
        raise BoundaryError(f"no boundary {visible(repr(name))[:80]}: a boundary name has "
                            "letters, digits, '.', '_' and '-' only")
    path = boundary_dir() / f"{name}.json"
    if not path.is_file():
        available = sorted(p.stem for p in boundary_dir().glob("*.json"))
        raise BoundaryError(
            f"no boundary {name!r}; available: {', '.join(available) or 'none'} (a boundary "
            f"of your own: its path, or its name from the folder holding {name}.json)")
    return read_file(path)


def read_file(path: Path) -> Boundary:
    """The boundary file at ``path`` (no lookup by name, no comparison with the stock
    boundaries: :func:`load` does those), read bounded (a FIFO or device is refused, not
    waited on); a leading byte-order mark is dropped (as in label sets); a key given twice in
    one object, NaN or Infinity is refused. Every problem is one :class:`BoundaryError` line
    naming the file (and the line where known)."""
    where = visible(str(path))
    try:
        text = read_regular(path, MAX_SMALL_BYTES).decode("utf-8")
    except OSError as e:
        raise BoundaryError(f"{where}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise BoundaryError(f"{where}: not UTF-8 (at byte {e.start})") from None
    try:
        data = loads(text)
    except json.JSONDecodeError as e:
        raise BoundaryError(f"{where}:{e.lineno}: invalid JSON ({e.msg})") from None
    except JSONTextError as e:
        raise BoundaryError(f"{where}:{e.line or 1}: {e}") from None
    except (RecursionError, ValueError) as e:
        raise BoundaryError(f"{where}: not usable JSON ({str(e)[:80]})") from None
    return from_json(data, where)
