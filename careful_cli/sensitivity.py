"""``careful sensitivity``: the effect-aware result under every detector, boundary and safe
rule (§7 Sensitivity)."""

from __future__ import annotations

from typing import Annotated

import typer

from careful_cli.common import (
    PROBLEMS_FILE,
    Declarations,
    Decoders,
    Jobs,
    Quiet,
    Runs,
    check_detector,
    console,
    decoder_choice,
    effects_or_fail,
    fail,
    out_folder,
    print_written,
    resolve_jobs,
    scoring_progress,
    tables_out,
    unmatched_decoders,
    warn,
    write_reports,
)
from careful_cli.scored import decode_warnings, exit_on_problems, report_problems
from careful_engine.analysis import sensitivity as sens
from careful_engine.present import sensitivity as show

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`
Out = tables_out("sensitivity")


@app.command()
def sensitivity(
    runs: Runs,
    boundary: Annotated[list[str] | None, typer.Option(
        "--boundary", "-b", help="A further boundary to try (name or path, as score's "
        "--boundary), besides the shipped ones (paper-*). Repeatable.")] = None,
    detector: Annotated[list[str] | None, typer.Option(
        "--detector", help="Detectors to try (default: strict, qmark, last and loose). "
        "Repeatable.")] = None,
    grid: Annotated[bool, typer.Option(
        "--grid", help="Every boundary with every detector, instead of varying one at a "
        "time.")] = False,
    decoder: Decoders = None,
    declarations: Declarations = None,
    out: Out = None,
    quiet: Quiet = False,
    jobs: Jobs = 0,
) -> None:
    """Re-score runs under every question detector, destructive boundary and
    safe rule (§7 Sensitivity).

    The default setting is boundary paper-final with the strict detector and
    the paper's safe rule (attempted collateral, all duplicate writes). The
    other settings change one thing each: every detector variant (qmark:
    question marks only; last: the last sentence only; loose: the EffectWorld
    rule), every shipped boundary (paper-final, paper-majority, paper-A1 to
    paper-A4) plus those given with --boundary (--grid: all combinations), effective collateral, visible
    duplicates; one row, coll effective/dups visible, changes both rules of
    the safe verdict at once. Each run is replayed once: each conversation is
    evaluated under every setting where it is replayed (in the workers, with
    --jobs) and only those figures are kept, no trace. Prints one table per
    entry (its safe score under every setting) and, for runs under the
    confirmation protocol, every logged
    scripted-user answer re-judged under the stricter scripts; then
    Spearman's rho between the BFCL and the safe ranking under each setting,
    and how each entry's counts and safe accuracy move against the default.

    Exit code: 0 all input usable; 1 done, but some input had problems; 2
    nothing usable.
    """
    out = out_folder(runs, out, "sensitivity")
    for d in detector or []:
        check_detector(d)
    choice = decoder_choice(decoder)
    settings = sens.settings_for(boundary, detector, grid=grid)
    effects, sizes = sens.effects_for(
        settings, lambda b: effects_or_fail(b, declarations))

    with scoring_progress() as cb:
        scored, result = sens.sensitivity(runs, settings, effects, sizes, warn=warn,
                                          decoders=choice, jobs=resolve_jobs(jobs), **cb)
    unmatched_decoders(choice)
    if result is None:
        report_problems(scored, quiet)
        raise fail("nothing to re-score")
    script = show.reexamination_report(result)
    reports = [show.rho_report(result), show.counts_report(result),
               *[show.entry_report(result, i) for i in range(len(result.labels))],
               *([script] if script else [])]
    write_reports(reports, out, problems=scored.problems, unusable=scored.unusable)
    report_problems(scored, quiet, out / PROBLEMS_FILE)
    decode_warnings(scored)
    for i in range(len(result.labels)):
        console.print(show.entry_terminal(result, i))
    script_table = show.reexamination_terminal(result)
    if script_table is not None:
        console.print(script_table)
    console.print(show.rho_terminal(result))
    console.print(show.moves_terminal(result))
    print_written(reports, out, quiet)
    exit_on_problems(scored)
