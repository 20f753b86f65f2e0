"""``careful workbench``: open the Textual workbench (imported only when the command runs)."""

from __future__ import annotations

from pathlib import Path

import typer

from careful_cli import app
from careful_cli.common import EXIT_INTERNAL
from careful_engine.effects.boundary import DEFAULT_BOUNDARY


@app.command("workbench")
def workbench(
    runs: list[Path] = typer.Argument(
        None, help="Run folders (bfcl result folders). Default: every folder under runs/, "
        "with the embedded reference run written to runs/reference first if missing."),
    db: Path = typer.Option(
        None, "--db", envvar="CAREFUL_DB", show_envvar=False,
        help="Annotation database. Default: $CAREFUL_DB, else annotations/careful.db."),
    boundary: str = typer.Option(
        DEFAULT_BOUNDARY, "--boundary", "-b", help="Destructive boundary for the rules: a name in "
        "declarations/boundary/ or a path."),
    decoder: list[str] = typer.Option(
        None, "--decoder", help="Decoder for model folders bfcl does not register: KEY (a registered "
        "model or a manifest keeps its own), or FOLDER=KEY to force one (repeatable), e.g. "
        "gpt-4o-2024-11-20-FC."),
    declarations: Path = typer.Option(
        None, "--declarations", help="Effect declarations (default declarations/effects.json)."),
    detector: str = typer.Option("strict", "--detector", help="Question detector."),
) -> None:
    """Open the workbench: blind labelling, agreement and adjudication, the trace stepper and
    the leaderboards, over the same engine as the headless commands.

    Keys: 1-5 switch screens (Home, Label, Agreement, Replay, Leaderboard), ? shows help for
    the current screen, Ctrl+P opens the command palette, q quits.
    """
    decoders = None
    if decoder:  # the leaderboard module imports scipy: only when a decoder is named
        from careful_engine.analysis.leaderboard import parse_decoders

        try:
            decoders = parse_decoders(decoder)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--decoder") from None
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
