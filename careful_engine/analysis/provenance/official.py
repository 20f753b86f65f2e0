"""The official score files of the day (bfcl evaluate's output), read as a second opinion.

A score file's first line is the summary (``accuracy``, ``correct_count``, ``total_count``);
every later line is one failed entry with its error type. bfcl writes them beside the results:
``<root>/score/<model>/[multi_turn/]BFCL_v*_<category>_score.json`` for results under
``<root>/result/<model>/...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.analysis.bfcl_scores import read_score_lines
from careful_engine.core import bfcl
from careful_engine.core.runs import Problem, ResultFile


@dataclass
class OfficialScore:
    path: Path
    category: str
    accuracy: float | None = None
    correct: int | None = None
    total: int | None = None
    failed: dict[str, str | None] = field(default_factory=dict)  # id -> error type
    problems: list[Problem] = field(default_factory=list)

    consistent: bool = True  # the header's failures are the failure lines

    def valid(self, entry_id: str) -> bool | None:
        """The verdict of the day; None when the file cannot tell (it lists only part of the
        conversations, or its header disagrees with its failure lines)."""
        if entry_id in self.failed:
            return False
        complete = self.consistent and self.total == len(bfcl.conversations(self.category))
        return True if complete else None


def read_official(path: Path, category: str) -> OfficialScore:
    """Read a score file line by line (:func:`~careful_engine.analysis.bfcl_scores.read_score_lines`);
    bad lines are problems, never fatal. A failure line for a conversation of another category
    is a problem and is left out; a header whose failures (``total_count - correct_count``)
    are not the failure lines is a problem, and then neither its accuracy nor the passes it
    implies are used."""
    lines = read_score_lines(path)
    ids = {c.id for c in bfcl.conversations(category)}
    problems = list(lines.problems)
    failed: dict[str, str | None] = {}
    for i, f in lines.failed.items():
        if i in ids:
            failed[i] = f.error_type
        else:
            problems.append(Problem(str(path), f"a failure line for a conversation that is not "
                                    f"in {category}; left out", id=i))
    out = OfficialScore(path, category, lines.accuracy, lines.correct, lines.total, failed,
                        problems)
    if lines.correct is not None and lines.total is not None \
            and len(failed) != lines.total - lines.correct:
        out.consistent, out.accuracy = False, None
        problems.append(Problem(
            str(path), f"the header counts {lines.total - lines.correct} failed conversations "
            f"({lines.correct} of {lines.total} correct) but {len(failed)} are listed; the "
            "day's accuracy and the conversations not listed are taken as unknown", 1))
    return out


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
