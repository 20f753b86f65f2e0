"""What the commands that score several runs (leaderboard, compare, sensitivity) print about
their input: unusable folders, input problems grouped by kind, decoder warnings."""

from __future__ import annotations

from pathlib import Path

import typer

from careful_cli.common import EXIT_PROBLEMS, err, print_input_problems, visible, warn
from careful_engine.analysis.decode_audit import flags
from careful_engine.analysis.leaderboard import Scored


def report_problems(scored: Scored, quiet: bool, full: Path | None = None) -> None:
    """Notes on what was given (a folder given twice) and unusable folders in full; input
    problems as ``careful score`` prints them (:func:`~careful_cli.common.print_input_problems`:
    grouped by kind, the first lines of each in full; ``quiet``: their count); ``full``: the
    file that lists every one (:func:`~careful_cli.common.write_problems`)."""
    for msg in scored.notes:
        warn(msg)
    for msg in scored.unusable:
        err.print("error: " + visible(msg), markup=False, style="red")
    print_input_problems(scored.problems, quiet=quiet, full=full,
                         listing="" if full is not None else "`careful score` on a run folder")


def decode_warnings(scored: Scored) -> None:
    """A warning per entry whose decoder (almost) never decodes: its silence is not
    behaviour. Each under the entry's label, as the tables and `careful audit decode` name it."""
    for entry in scored.entries:
        for flag in flags(entry.score):
            warn(flag.labelled(entry.label))


def exit_on_problems(scored: Scored) -> None:
    """Exit 1 when some input was unusable or had problems."""
    if scored.unusable or scored.problems:
        raise typer.Exit(EXIT_PROBLEMS)
