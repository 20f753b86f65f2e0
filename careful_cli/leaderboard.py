"""``careful leaderboard``: rank runs under BFCL's accuracy and under effect safety (§7)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from careful_cli.common import (
    DEFAULT_BOUNDARY,
    PROBLEMS_FILE,
    Boundary,
    Collateral,
    Declarations,
    Decoders,
    Detector,
    Duplicates,
    Jobs,
    Quiet,
    Runs,
    console,
    drift_digest,
    drift_notes,
    fail,
    literal,
    out_folder,
    print_written,
    refuse_files,
    scored_under,
    scoring_inputs,
    scoring_progress,
    tables_out,
    unmatched_decoders,
    write_reports,
)
from careful_cli.scored import decode_warnings, exit_on_problems, report_problems
from careful_engine.analysis.leaderboard import score_runs
from careful_engine.present.leaderboard import leaderboard_reports, leaderboard_terminal
from careful_engine.scoring.settings import table_settings

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`
Out = tables_out("leaderboard")


@app.command()
def leaderboard(
    runs: Runs,
    boundary: Boundary = DEFAULT_BOUNDARY,
    detector: Detector = "strict",
    collateral: Collateral = "attempted",
    duplicates: Duplicates = "all",
    decoder: Decoders = None,
    declarations: Declarations = None,
    out: Out = None,
    quiet: Quiet = False,
    jobs: Jobs = 0,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Also write BFCL against effect-safe accuracy per run as a scatter "
        "plot to this SVG file (it states the boundary, detector and safe rule, as the "
        "tables do).")] = None,
) -> None:
    """Rank runs under BFCL's accuracy and under success with effect safety
    (Table 3).

    Every model folder of every RUN is one entry. Prints each entry's rank
    under both scores on bfcl's four-category mean (an absent category counts
    as 0) and per category, Spearman's rho between the two rankings, and the
    rule totals; writes them as Markdown, CSV and JSON (input problems: problems.txt).

    Exit code: 0 all input usable; 1 ranked, but some input had problems; 2
    nothing usable.
    """
    out = out_folder(runs, out, "leaderboard")
    if plot is not None and plot.suffix.lower() != ".svg":
        raise typer.BadParameter(f"{plot}: only SVG is written (name it *.svg)",
                                 param_hint="--plot")
    refuse_files({"--plot": plot})
    detector, choice, effects, jobs = scoring_inputs(detector, decoder, boundary, declarations,
                                                     jobs, collateral, duplicates)
    with scoring_progress() as cb:
        scored = score_runs(runs, decoders=choice, effects=effects, detector=detector,
                            jobs=jobs, keep_entries=False, detail=False,
                            digest=drift_digest(),  # (the drift notes: read in the workers)
                            **cb)  # ranks need no entries, nor a conversation's detail
    unmatched_decoders(choice)
    if not scored.entries:
        report_problems(scored, quiet)
        raise fail("nothing to rank")
    settings = table_settings(effects, detector)  # stated by every table file and the plot
    reports = leaderboard_reports(scored.entries, settings)
    write_reports(reports, out, {"--plot": plot}, problems=scored.problems,
                  unusable=scored.unusable)
    report_problems(scored, quiet, out / PROBLEMS_FILE)
    decode_warnings(scored)
    labels = {(e.run, e.model): e.label for e in scored.entries}
    drift_notes(scored.runs, lambda run, model: labels.get((run, model), model))
    for table in leaderboard_terminal(scored.entries):
        console.print(table)
    if not quiet:
        console.print(f"({scored_under(boundary, detector, effects.rule)})")
    print_written(reports, out, quiet)
    if plot is not None:
        from careful_engine.present import plot as plots  # deferred: xml/urllib, ~10 ms

        try:
            plots.write_svg(plots.points(scored.entries), plot, settings=settings)
        except (OSError, ValueError) as e:
            raise fail(f"cannot write the plot: {e}") from None
        if not quiet:
            console.print(f"plot written to {literal(plot)}")
    exit_on_problems(scored)
