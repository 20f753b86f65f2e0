"""``careful workbench``: open the Textual workbench (imported only when the command runs)."""

from __future__ import annotations

from pathlib import Path

import typer

from careful_cli.common import (
    DEFAULT_BOUNDARY,
    EXIT_INTERNAL,
    Boundary,
    Declarations,
    Decoders,
    Detector,
    decoder_choice,
)

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`


@app.command("workbench")
def workbench(
    runs: list[Path] = typer.Argument(
        None, help="Run folders (bfcl result folders). Default: every folder under runs/, "
        "with the embedded reference run written to runs/reference first if missing."),
    db: Path = typer.Option(
        None, "--db", envvar="CAREFUL_DB", show_envvar=False,
        help="Annotation database. Default: $CAREFUL_DB, else annotations/careful.db in the "
        "repository."),
    boundary: Boundary = DEFAULT_BOUNDARY,
    decoder: Decoders = None,
    declarations: Declarations = None,
    detector: Detector = "strict",
) -> None:
    """Open the workbench: blind labelling, agreement and adjudication, the trace stepper and
    the leaderboards, over the same engine as the headless commands.

    Keys: 1-5 switch screens (Home, Label, Agreement, Replay, Leaderboard), ? shows help for
    the current screen, Ctrl+P opens the command palette, q quits.
    """
    decoders = decoder_choice(decoder) if decoder else None
    for run in runs or []:
        if not run.exists():
            raise typer.BadParameter(f"{run} does not exist", param_hint="RUNS")

    from workbench.app import run as run_app
    from workbench.context import Settings, default_runs

    clean = run_app(Settings(runs=list(runs) if runs else default_runs(), db=db,
                             declarations=declarations, boundary=boundary, decoders=decoders,
                             detector=detector))
    if not clean:  # the app stopped on an error (its traceback printed): not a clean exit
        raise typer.Exit(EXIT_INTERNAL)
