"""Everything ``careful score`` (and ``careful demo``) writes for a scored run: score files,
``conversations.jsonl`` and its signature, the tables, ``problems.txt``."""

from __future__ import annotations

from pathlib import Path

from careful_engine.core.budget import Budget
from careful_engine.core.safe_write import check_targets
from careful_engine.present.tables import accuracy_table, confirm_table, drift_report, rules_table
from careful_engine.scoring.outputs import PROBLEMS_FILE, write_problems, write_scores
from careful_engine.scoring.result import SCORES_NAME
from careful_engine.scoring.rules import Effects
from careful_engine.scoring.score import RunScore, score_file_name, write_score_file
from careful_engine.scoring.settings import table_settings
from careful_engine.scoring.signature import sig_path


def write_outputs(run: RunScore, out: Path, effects: Effects | None,
                  exclude_drifted: bool = False, *, detector: str = "strict",
                  budget: Budget | None = None) -> list:
    """Score files, conversations.jsonl and the tables of a scored run, under ``out``; with
    ``exclude_drifted``, the drift split of each file (returned, and written as the
    accuracy_drift table). The tables of effect-aware figures state the settings
    (:func:`~careful_engine.scoring.settings.table_settings`). Raises
    :class:`~careful_engine.core.safe_write.UnsafeWrite` rather than follow a planted link,
    before anything is written (every target is checked first).
    Every line records what it was scored with (:func:`~careful_engine.scoring.outputs.write_scores`;
    ``budget``: the replay budget, None for the default).
    Every input problem's ``file:line [id]: reason`` line goes to ``problems.txt`` (empty
    when there were none), where the terminal shows at most a few of each kind."""
    effect = effects is not None
    splits: list = []  # --exclude-drifted: accuracy with and without drifted conversations
    drift: dict[tuple[str, str, str], str] = {}
    if exclude_drifted:  # deferred: the provenance stack costs ~25 ms to import, rarely used
        from careful_engine.analysis.provenance import drift_split
    for lf, cs in run.files:
        split = drift_split(lf, cs) if exclude_drifted else None
        if split is not None:
            splits.append(split)
            drift.update(((r.model, r.category, r.id), split.drift[r.id].status.value)
                         for r in cs.results)

    settings = table_settings(effects, detector, budget) if effects is not None else None
    reports = [accuracy_table(run.scores, effect, settings)]
    if effect:
        reports.append(rules_table(run.scores, settings))
        confirmation = confirm_table(run.scores, settings)
        if confirmation is not None:
            reports.append(confirmation)
    if exclude_drifted:
        reports.append(drift_report(splits))
    check_targets(out, [*(score_file_name(cs) for _, cs in run.files), SCORES_NAME,
                        sig_path(Path(SCORES_NAME)), PROBLEMS_FILE,
                        *(name for rep in reports for name in rep.files())])
    for lf, cs in run.files:
        write_score_file(cs, lf, out)
    write_scores(run, out, effects, detector, budget, drift=drift)
    for rep in reports:
        rep.write(out)
    write_problems(out, run.problems, run.unusable)  # (empty: none)
    return splits
