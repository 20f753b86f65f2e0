"""bfcl's score files (``BFCL_v*_<category>_score.json``, ``bfcl evaluate``'s output), read one
way for every command that compares with them (``careful audit scores``, ``provenance``).

Line 1 is the header (``accuracy``, ``correct_count``, ``total_count``); every later line is
one failed entry: its id, its error type (in the ``error`` object for multi-turn entries, at
the top for single-turn ones) and its error message. A line that cannot be read, a header
without an accuracy from 0 to 1 and a total count, a second line for an id (but bfcl's own
force_terminated line after an inference error's, :data:`BFCL_REPEAT`), and a line whose
``valid`` is true or not a boolean are each one problem (``file:line [id]: reason``), left
out (a header's correct_count that is not a count, or is more than its total_count: one
problem, the rest of the header kept);
the rest of the file is read, as far as a file's parsed lines may take
(:class:`~careful_engine.core.runs.ParseBudget`: the lines past it are one problem).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.core.runs import ParseBudget, Problem, budgeted_lines, line_over_cap
from careful_engine.core.safe_read import read_regular


@dataclass(frozen=True)
class FailedEntry:
    error_type: str | None  # None where the line gives none, or gives one that is not text
    error: str  # the first error message, at most 200 characters ("" where none)


@dataclass
class ScoreLines:
    """What a score file says. ``readable`` is False where the file could not be read."""

    path: Path
    readable: bool = True
    accuracy: float | None = None  # a number from 0 to 1, else None
    correct: int | None = None
    total: int | None = None  # a whole number from 0, else None
    failed: dict[str, FailedEntry] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # id -> its failure line
    problems: list[Problem] = field(default_factory=list)

    @property
    def has_header(self) -> bool:
        """Whether line 1 gives an accuracy from 0 to 1 and a total count."""
        return self.accuracy is not None and self.total is not None


NOT_A_HEADER = "first line is not a score header with an accuracy from 0 to 1 and a total_count"


def _share(x: object) -> float | None:
    """An accuracy: a number from 0 to 1 (NaN, -5 or 1e308 is not one: None)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1:
        return float(x)
    return None


def _count(x: object) -> int | None:
    """A count: a whole number from 0 (not a bool, a float or text), else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def _first_error(entry: dict) -> str:
    err = entry.get("error")
    if isinstance(err, dict):
        err = err.get("error_message")
    if isinstance(err, list):
        err = err[0] if err else ""
    return str(err or "")[:200]


def _read_header(out: ScoreLines, obj: dict) -> None:
    """Line 1's counts into ``out``. A header without an accuracy from 0 to 1 and a total count
    (:attr:`ScoreLines.has_header`) is a problem and none of it is kept; a correct_count given
    but not a count, or more than the total count, is a problem and the rest is kept."""
    out.accuracy = _share(obj.get("accuracy"))
    out.correct = _count(obj.get("correct_count"))
    out.total = _count(obj.get("total_count"))
    if not out.has_header:
        out.accuracy = out.correct = out.total = None
        out.problems.append(Problem(str(out.path), f"{NOT_A_HEADER}; left out", 1))
    elif out.correct is None and "correct_count" in obj:
        out.problems.append(Problem(str(out.path), f"correct_count is "
                                    f"{obj['correct_count']!r:.40}, not a whole number from 0; "
                                    "the header is read without it", 1))
    elif out.correct is not None and out.total is not None and out.correct > out.total:
        out.problems.append(Problem(str(out.path), f"correct_count is {out.correct!r:.40}, more "
                                    f"than total_count {out.total!r:.40}; the header is read "
                                    "without it", 1))
        out.correct = None


# older bfcl (V3) writes an inference error's entry twice: this line, then a force_terminated one
BFCL_REPEAT = ("multi_turn:inference_error", "multi_turn:force_terminated")


def _not_a_failure(obj: dict, kind: object, first: tuple[int, FailedEntry] | None
                   ) -> str | None:
    """Why a line with an id (its error type ``kind``) is not read as a failure: "" for bfcl's
    own repeat (:data:`BFCL_REPEAT`, left out without a word), None where it is a failure."""
    if first is not None:
        if (first[1].error_type, kind) == BFCL_REPEAT:
            return ""
        return f"a second score line for this id (first on line {first[0]})"
    valid = obj.get("valid", False)
    if valid is True:
        return "valid is true, but a score file lists failed entries only"
    if valid is not False:
        return f"valid is {valid!r:.40}, not true or false"
    return None


def read_score_lines(path: Path) -> ScoreLines:
    """Read a score file line by line; bad lines are problems, never fatal."""
    out = ScoreLines(path)
    try:  # a regular file only (a FIFO or a device is never opened to wait on)
        text = read_regular(path).decode("utf-8", errors="replace")
    except OSError as e:
        out.readable = False
        out.problems.append(Problem(str(path), f"cannot read the score file ({e.strerror or e})"))
        return out
    budget = ParseBudget()  # every line parsed is counted: bounded as a result file's entries
    for n, line in budgeted_lines(text, str(path), out.problems, budget):
        if too_long := line_over_cap(line):  # parsed, it could take gigabytes
            out.problems.append(Problem(str(path), too_long, n))
            continue
        try:
            obj: Any = json.loads(line)
        except (ValueError, RecursionError) as e:  # (nested too deep to read: RecursionError)
            reason = str(e)[:120] if isinstance(e, ValueError) else "nested too deeply"
            out.problems.append(Problem(str(path), f"score line is not JSON ({reason})", n))
            continue
        budget.keep(line)
        if not isinstance(obj, dict):
            out.problems.append(Problem(str(path), "score line is not an object", n))
        elif n == 1 and "accuracy" in obj:
            _read_header(out, obj)
        elif isinstance(obj.get("id"), str):
            err = obj.get("error")
            kind = err.get("error_type") if isinstance(err, dict) else obj.get("error_type")
            i = obj["id"]
            first = (out.lines[i], out.failed[i]) if i in out.failed else None
            if (why := _not_a_failure(obj, kind, first)) is not None:
                if why:
                    out.problems.append(Problem(str(path), f"{why}; left out", n, obj["id"]))
                continue
            if kind is not None and not isinstance(kind, str):  # (NaN, a list, a number)
                out.problems.append(Problem(str(path), "error_type is not text; the failure "
                                            "is kept without it", n, obj["id"]))
                kind = None
            out.failed[obj["id"]] = FailedEntry(kind, _first_error(obj))
            out.lines[obj["id"]] = n
        else:
            out.problems.append(Problem(str(path), "score line has no id", n))
    return out
