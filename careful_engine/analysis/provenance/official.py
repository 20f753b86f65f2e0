"""The official score files of the day (bfcl evaluate's output), read as a second opinion.

A score file's first line is the summary (``accuracy``, ``correct_count``, ``total_count``);
every later line is one failed entry with its error type. bfcl writes them beside the results:
``<root>/score/<model>/[multi_turn/]BFCL_v*_<category>_score.json`` for results under
``<root>/result/<model>/...``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.core.runs import Problem, ResultFile
from careful_engine.core.safe_read import read_regular


@dataclass
class OfficialScore:
    path: Path
    category: str
    accuracy: float | None = None
    correct: int | None = None
    total: int | None = None
    failed: dict[str, str | None] = field(default_factory=dict)  # id -> error type
    problems: list[Problem] = field(default_factory=list)

    def valid(self, entry_id: str) -> bool | None:
        """The verdict of the day; None when the file cannot tell."""
        if entry_id in self.failed:
            return False
        complete = self.total == len(bfcl.conversations(self.category))
        return True if complete else None


def read_official(path: Path, category: str) -> OfficialScore:
    """Read a score file line by line; bad lines are problems, never fatal."""
    out = OfficialScore(path, category)
    try:
        text = read_regular(path).decode("utf-8", errors="surrogateescape")  # not a FIFO
    except OSError as e:
        out.problems.append(Problem(str(path), "cannot read the official score file: "
                                    f"{e.strerror or e}"))
        return out
    for i, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:  # (nested too deep to read: RecursionError)
            reason = str(e)[:120] if isinstance(e, ValueError) else "nested too deeply"
            out.problems.append(Problem(str(path), f"score line is not JSON ({reason})", i + 1))
            continue
        if not isinstance(obj, dict):
            out.problems.append(Problem(str(path), "score line is not an object", i + 1))
        elif i == 0 and "accuracy" in obj:
            out.accuracy = _share(obj.get("accuracy"))
            out.correct = _int(obj.get("correct_count"))
            out.total = _int(obj.get("total_count"))
        elif isinstance(obj.get("id"), str):
            err = obj.get("error")
            kind = err.get("error_type") if isinstance(err, dict) else None
            if kind is not None and not isinstance(kind, str):  # (NaN reached the JSON out)
                out.problems.append(Problem(str(path), "error_type is not text; the failure "
                                            "is kept without it", i + 1, obj["id"]))
                kind = None
            out.failed[obj["id"]] = kind
        else:
            out.problems.append(Problem(str(path), "score line has no id", i + 1))
    return out


def _share(x: object) -> float | None:
    """An accuracy: a number from 0 to 1 (NaN, -5 or 1e308 is not one: None)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1:
        return float(x)
    return None


def _int(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _model_dir(rf: ResultFile) -> Path:
    return rf.path.parent.parent if rf.path.parent.name == "multi_turn" else rf.path.parent


def find_official(rf: ResultFile, score_root: Path | None = None) -> Path | None:
    """The official score file of a result file: in ``score_root`` (a bfcl ``score`` folder, or
    a folder above one) when given, else beside the results in bfcl's layout."""
    roots: list[Path] = []
    if score_root is not None:
        roots += [score_root / rf.model, score_root / "score" / rf.model, score_root]
    else:
        model_dir = _model_dir(rf)
        if model_dir.parent.name == "result":
            roots.append(model_dir.parent.parent / "score" / rf.model)
    for root in roots:
        for sub in ("multi_turn", "."):
            folder = root / sub
            if folder.is_dir():
                hits = sorted(folder.glob(f"BFCL_v*_{rf.category}_score.json"), reverse=True)
                if hits:
                    return hits[0]
    return None
