"""Finding and reading BFCL result files, with a clear message for every bad line.

Layouts recognised under a run folder (at any depth):

* V4: ``<model>/multi_turn/BFCL_v4_<category>_result.json`` (bfcl generate's own layout)
* V3 flat: ``<model>/BFCL_v3_<category>_result.json`` (older bfcl releases)

The model is the folder above ``multi_turn/`` (V4) or the file's folder (V3); bfcl maps it to
a registry key by replacing ``_`` with ``/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import bfcl

RESULT_FILE = re.compile(r"^BFCL_v(\d+)_(\w+?)_result\.json$")


@dataclass
class Problem:
    """Something wrong with the input, located as precisely as possible."""

    file: str
    message: str
    line: int | None = None
    id: str | None = None
    fatal: bool = False

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        who = f" [{self.id}]" if self.id else ""
        return f"{where}{who}: {self.message}"


@dataclass
class ResultFile:
    path: Path
    model: str  # the result folder name, as bfcl uses it
    category: str
    version: int


@dataclass
class LoadedFile:
    """The usable entries of one result file, in bfcl's evaluation order, and its problems."""

    file: ResultFile
    entries: dict[str, dict] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        return [c.id for c in bfcl.conversations(self.file.category) if c.id not in self.entries]


def find_result_files(root: Path) -> tuple[list[ResultFile], list[Problem]]:
    """Multi-turn result files under ``root``, and notes on files in unexpected places."""
    files: list[ResultFile] = []
    problems: list[Problem] = []
    if root.is_file():
        candidates: Iterator[Path] = iter([root])
    else:
        candidates = root.rglob("*_result.json")
    for path in sorted(candidates):
        m = RESULT_FILE.match(path.name)
        if not m:
            problems.append(Problem(str(path), "not a bfcl result file name; skipped"))
            continue
        version, category = int(m.group(1)), m.group(2)
        if not category.startswith("multi_turn"):
            continue  # single-turn and agentic categories are not this tool's business
        if category not in bfcl.CATEGORIES:
            problems.append(Problem(str(path), f"category {category!r} is not one of the four "
                                    "multi-turn categories; skipped"))
            continue
        parent = path.parent
        if parent.name == "multi_turn":
            model = parent.parent.name
            if version < 4:
                problems.append(Problem(str(path), "a V3 file inside multi_turn/; scored anyway"))
        else:
            model = parent.name
            if version >= 4:
                problems.append(Problem(str(path), "a V4 file outside a multi_turn/ folder; "
                                        "scored anyway"))
        if model in ("result", "score", ""):
            problems.append(Problem(str(path), "file is not inside a model folder; "
                                    f"using {model!r} as the model name"))
        files.append(ResultFile(path, model, category, version))
    return files, problems


def load_result_file(rf: ResultFile) -> LoadedFile:
    """Read a JSON Lines result file entry by entry; bad lines are reported and skipped."""
    out = LoadedFile(rf)
    valid_ids = {c.id for c in bfcl.conversations(rf.category)}
    name = str(rf.path)
    try:
        raw = rf.path.read_bytes()
    except OSError as e:
        out.problems.append(Problem(name, f"cannot read: {e}", fatal=True))
        return out
    text = raw.decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    last = max((i for i, s in enumerate(lines) if s.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        lineno = i + 1
        try:
            entry = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            what = "truncated last line" if i == last else "line is not JSON"
            out.problems.append(Problem(name, f"{what} ({e.msg if hasattr(e, 'msg') else e})",
                                        lineno, _guess_id(line)))
            continue
        if not isinstance(entry, dict):
            out.problems.append(Problem(name, f"entry is a {type(entry).__name__}, not an "
                                        "object", lineno))
            continue
        entry_id = entry.get("id")
        if not isinstance(entry_id, str):
            out.problems.append(Problem(name, "entry has no string 'id'", lineno))
            continue
        if entry_id not in valid_ids:
            out.problems.append(Problem(name, f"id is not in {rf.category}", lineno, entry_id))
            continue
        if entry_id in out.entries:
            out.problems.append(Problem(name, f"duplicate id (first on line "
                                        f"{out.lines[entry_id]}); this line is ignored",
                                        lineno, entry_id))
            continue
        if "result" not in entry:
            out.problems.append(Problem(name, "entry has no 'result'; counted as an inference "
                                        "error", lineno, entry_id))
        elif type(entry["result"]) is not list:
            tb = " (with a traceback)" if "traceback" in entry else ""
            out.problems.append(Problem(name, f"result is an error string{tb}: "
                                        f"{str(entry['result'])[:120]}", lineno, entry_id))
        out.entries[entry_id] = entry
        out.lines[entry_id] = lineno
    for missing in out.missing:
        out.problems.append(Problem(name, "id missing from the file; counted as failed",
                                    None, missing))
    order = sorted(out.entries, key=bfcl.sort_key)
    out.entries = {k: out.entries[k] for k in order}
    return out


def _guess_id(line: str) -> str | None:
    m = re.search(r'"id"\s*:\s*"([^"]+)"', line)
    return m.group(1) if m else None
