"""What the workbench remembers between screens and sessions: the annotator name and each
run's filters, in a small JSON file in the user's config folder
(``$XDG_CONFIG_HOME/careful/workbench.json``, else ``~/.config/careful/workbench.json``).

The file is read as hostile input (bounded, every value checked; anything else is dropped)
and written atomically, never through a link (:mod:`careful_engine.core.safe_write`).
No Textual here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.names import check_name
from careful_engine.core import safe_write
from careful_engine.core.safe_read import NotRegular, read_regular

MAX_BYTES = 256 * 1024  # a bigger file is not ours: it is ignored
MAX_RUNS = 200  # runs whose filters are kept (the most recent)
FILTER_KEYS = ("category", "failed_only", "error_type", "rule")


def default_path() -> Path:
    """The remembered settings' file in the user's config folder."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "careful" / "workbench.json"


def _filter(raw: object) -> dict | None:
    """One run's filters, each value checked (None when nothing usable)."""
    if not isinstance(raw, dict):
        return None
    out: dict = {}
    for key in FILTER_KEYS:
        value = raw.get(key)
        if key == "failed_only":
            out[key] = value is True
        else:
            out[key] = value if isinstance(value, str) and 0 < len(value) <= 200 else None
    return out


@dataclass
class Remembered:
    """The annotator name and the filters by run label; :meth:`save` writes them."""

    path: Path | None = None  # None: remember nothing across sessions
    annotator: str = ""
    filters: dict[str, dict] = field(default_factory=dict)
    problem: str = ""  # why the file was not read or written, if it was not

    @classmethod
    def load(cls, path: Path | None) -> Remembered:
        """The remembered settings (defaults when the file is missing, too big or broken)."""
        out = cls(path)
        if path is None:
            return out
        try:
            # a folder, a FIFO, a device: not ours (checked on the open descriptor, so a
            # file swapped for a FIFO after a check is never waited on)
            raw = read_regular(path, MAX_BYTES)
        except FileNotFoundError:
            return out
        except NotRegular:
            out.problem = f"{path}: not a file: defaults used"
            return out
        except OSError as e:
            out.problem = f"{path}: not read ({e.strerror or e}): defaults used"
            return out
        try:
            data = json.loads(raw)
        except (OSError, ValueError, RecursionError) as e:
            why = e if not isinstance(e, RecursionError) else "nested too deeply"
            out.problem = f"{path}: not read ({why}): defaults used"
            return out
        if not isinstance(data, dict):
            out.problem = f"{path}: not a JSON object: defaults used"
            return out
        name = data.get("annotator")
        if isinstance(name, str):
            try:
                out.annotator = check_name(name)
            except AnnotationError:
                pass
        filters = data.get("filters")
        if isinstance(filters, dict):
            for label, raw in list(filters.items())[-MAX_RUNS:]:
                checked = _filter(raw)
                if isinstance(label, str) and len(label) <= 500 and checked is not None:
                    out.filters[label] = checked
        return out

    def save(self) -> None:
        """Write the file (a failure is kept in :attr:`problem`, never raised)."""
        if self.path is None:
            return
        data = {"annotator": self.annotator,
                "filters": dict(list(self.filters.items())[-MAX_RUNS:])}
        try:
            safe_write.write_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        except OSError as e:  # UnsafeWrite too: a planted link, a folder that is a file
            self.problem = f"{self.path}: not written: {e}"
        else:
            self.problem = ""

    def remember_annotator(self, name: str) -> None:
        if name != self.annotator:
            self.annotator = name
            self.save()

    def remember_filter(self, run: str, values: dict) -> None:
        checked = _filter(values) or {}
        if self.filters.get(run) != checked:
            self.filters.pop(run, None)  # the most recent last
            self.filters[run] = checked
            self.save()
