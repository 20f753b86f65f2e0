"""Where and how a scored run's files are written, for every caller (``careful score``,
``careful demo``, the workbench): the default folder, ``conversations.jsonl`` with its
signature, and the input problems' file. The tables are :mod:`careful_engine.present.outputs`'."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from careful_engine.core.budget import Budget
from careful_engine.core.safe_write import writer
from careful_engine.scoring.result import SCORES_NAME, ConversationResult, write_conversations
from careful_engine.scoring.rules import Effects
from careful_engine.scoring.settings import KEY, scored_with
from careful_engine.scoring.signature import sign

if TYPE_CHECKING:
    from careful_engine.scoring.score import RunScore

SCORE_DIR = "careful-score"  # where `careful score RUN` writes by default, inside RUN
PROBLEMS_FILE = "problems.txt"  # every input problem's line, in the output folder

Drift = dict[tuple[str, str, str], str]  # (model, category, id) -> dataset drift status


def write_scores(run: RunScore, out_dir: Path, effects: Effects | None,
                 detector: str = "strict", budget: Budget | None = None, *,
                 drift: Drift | None = None, name: str = SCORES_NAME) -> Path:
    """Write ``out_dir/name`` (one line per conversation of ``run``, each with what it was
    scored with, :mod:`careful_engine.scoring.settings`; ``budget``: the replay budget, None
    for the default; ``drift``: a conversation's dataset drift status, where known) and sign
    it against the run's result files (the workbench reuses only signed lines)."""
    used = {ms.model: scored_with(effects, detector, ms.decoder, budget) for ms in run.scores}
    drift = drift or {}

    def extra(r: ConversationResult) -> dict:
        line = {KEY: used.get(r.model) or scored_with(effects, detector, None, budget)}
        if (r.model, r.category, r.id) in drift:
            line["dataset_drift"] = drift[(r.model, r.category, r.id)]
        return line

    path = write_conversations(out_dir, (r for _, cs in run.files for r in cs.results), extra,
                               name=name)
    sign(path, [lf for lf, _ in run.files])
    return path


def write_problems(out: Path, problems: Iterable, unusable: Iterable[str] = ()) -> None:
    """Every input problem's ``file:line [id]: reason`` line in ``out``/:data:`PROBLEMS_FILE`,
    after the line of each folder that could not be used at all (``unusable``; the terminal
    prints those as errors); empty when there were none. The terminal folds the problems."""
    with writer(out, PROBLEMS_FILE, errors="backslashreplace") as f:
        f.writelines(f"{p}\n" for p in [*unusable, *problems])
