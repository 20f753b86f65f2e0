"""Destructive boundaries: versioned sets of destructive functions, with who decided and why.

A boundary file lives in ``declarations/boundary/<name>.json``::

    {"schema": "careful.boundary/1", "name": "paper-final", "version": 1,
     "decided_by": ["A1", ...], "method": "...", "created": "YYYY-MM-DD",
     "bfcl_eval": "2026.3.23",
     "destructive": [{"name": "rm", "class": "GorillaFileSystem", "reason": "..."}, ...]}

Functions not listed are not destructive. ``--boundary`` accepts a name (looked up in the
declarations folder) or a path to such a file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.core.safe_write import write_text

SCHEMA = "careful.boundary/1"
DEFAULT_BOUNDARY = "paper-final"


def declarations_dir() -> Path:
    """The repository's declarations folder (next to the careful_engine package)."""
    return Path(__file__).resolve().parents[2] / "declarations"


def boundary_dir() -> Path:
    return declarations_dir() / "boundary"


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


def from_json(data: dict, source: str = "<data>") -> Boundary:
    if data.get("schema") != SCHEMA:
        raise BoundaryError(f"{source}: not a boundary file (schema {data.get('schema')!r})")
    known = bfcl.function_class()
    destructive: dict[str, str] = {}
    for item in data.get("destructive", []):
        name = item.get("name")
        if name not in known:
            raise BoundaryError(f"{source}: {name!r} is not one of the 128 multi-turn functions")
        if not str(item.get("reason", "")).strip():
            raise BoundaryError(f"{source}: {name} has no reason")
        destructive[name] = item["reason"]
    standard = {"schema", "name", "version", "decided_by", "method", "created", "bfcl_eval",
                "destructive"}
    return Boundary(
        name=data.get("name", Path(source).stem),
        destructive=destructive,
        version=int(data.get("version", 1)),
        decided_by=tuple(data.get("decided_by", ())),
        method=data.get("method", ""),
        created=data.get("created", ""),
        extra={k: v for k, v in data.items() if k not in standard},
    )


def load(name_or_path: str | Path = DEFAULT_BOUNDARY) -> Boundary:
    """Load a boundary by name (``declarations/boundary/<name>.json``) or by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = boundary_dir() / f"{name_or_path}.json"
    if not path.exists():
        available = sorted(p.stem for p in boundary_dir().glob("*.json"))
        raise BoundaryError(
            f"no boundary {str(name_or_path)!r}; available: {', '.join(available) or 'none'}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BoundaryError(f"{path}: invalid JSON ({e})") from e
    return from_json(data, str(path))
