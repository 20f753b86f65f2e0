"""``careful score`` and ``careful doctor``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from careful_cli import ci
from careful_cli.common import (
    DEFAULT_BOUNDARY,
    EXIT_UNUSABLE,
    GATE_PANEL,
    PROBLEMS_FILE,
    RULES_PANEL,
    Boundary,
    Collateral,
    Declarations,
    Decoders,
    Detector,
    Duplicates,
    Format,
    Jobs,
    Output,
    Quiet,
    check_detector,
    console,
    decoder_choice,
    drift_digest,
    drift_notes,
    effects_or_fail,
    err,
    fail,
    literal,
    no_result_files,
    print_input_problems,
    progress_bar,
    refuse_files,
    refuse_out,
    resolve_jobs,
    safe_rule,
    scored_under,
    unmatched_decoders,
    visible,
    warn,
)
from careful_engine.analysis import ci_report, gates
from careful_engine.analysis.decode_audit import flags
from careful_engine.core import bfcl
from careful_engine.core import doctor as doc
from careful_engine.core.budget import BUDGET_EXCEEDED, DEFAULT_BUDGET
from careful_engine.core.safe_write import UnsafeWrite
from careful_engine.present.outputs import write_outputs
from careful_engine.present.report import budget_words
from careful_engine.present.tables import (
    accuracy_terminal,
    confirm_table,
    confirm_terminal,
    drift_terminal,
    rules_terminal,
)
from careful_engine.scoring.outputs import SCORE_DIR
from careful_engine.scoring.score import score_run, shared_model_folders
from careful_engine.scoring.settings import budget_limits

BUDGET_PANEL = "Replay budget"

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`


@app.command()
def score(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR",
                                   help="A bfcl result folder (any depth), or one result file."),
    out: Path = typer.Option(None, "--out", "-o", help="Where to write score files, tables and "
                             f"conversations.jsonl. Default: <RUN_DIR>/{SCORE_DIR}."),
    decoder: Decoders = None,
    model: list[str] = typer.Option(None, "--model", "-m", help="Only score these result folders."),
    boundary: Boundary = DEFAULT_BOUNDARY,
    detector: Detector = "strict",
    declarations: Declarations = None,
    effects_on: bool = typer.Option(True, "--effects/--no-effects", help="Also count the "
                                    "effect-aware rules (needs the declarations).",
                                    rich_help_panel=RULES_PANEL),
    quiet: Quiet = False,
    exclude_drifted: bool = typer.Option(False, "--exclude-drifted", help="Also score without "
                                         "the conversations whose inference log shows dataset "
                                         "drift; print both (see `careful provenance`)."),
    fail_under: list[str] = typer.Option(None, "--fail-under", help="Gate: exit 4 when a score "
                                         "is below a floor, [CATEGORY:]SCORE=PERCENT, e.g. "
                                         "bfcl=40 (the mean) or base:safe=35; compared exactly, not as "
                                         "the tables' one-decimal figure. Repeatable.",
                                         rich_help_panel=GATE_PANEL),
    fmt: Format = "text",
    output: Output = None,
    collateral: Collateral = "attempted",
    duplicates: Duplicates = "all",
    max_seconds: float = typer.Option(DEFAULT_BUDGET.seconds, "--max-seconds-per-conversation",
                                      help="Time budget (CPU seconds) for replaying one "
                                      "conversation; one that exceeds it is marked "
                                      f"{BUDGET_EXCEEDED}.", rich_help_panel=BUDGET_PANEL),
    max_mb: float = typer.Option(DEFAULT_BUDGET.megabytes, "--max-mb-per-conversation",
                                 help="Memory budget (growth in MB) for replaying one "
                                 "conversation, as the time budget.",
                                 rich_help_panel=BUDGET_PANEL),
    jobs: Jobs = 0,
) -> None:
    """Re-score BFCL multi-turn result files by replay: bfcl's verdict and the effect rules.

    Finds result files in bfcl's layouts (V4 <model>/multi_turn/BFCL_v4_*_result.json and
    V3 flat <model>/BFCL_v3_*_result.json), decodes every step with the model's registered
    bfcl handler (or --decoder), replays both sides call by call and applies bfcl's checker,
    then counts the effect-aware rules under the declarations and --boundary. Prints BFCL and
    effect-safe accuracy per category (the paper's Table 3) and the rule counts (Table 4);
    writes them as Markdown, CSV and JSON, bfcl-compatible score files, and one JSON line per
    conversation (conversations.jsonl). A folder holding several runs whose model folders
    share a name is refused (their outputs would share score/<model>): score each run.

    Exit code: 0 all input usable; 1 scored, but some entries were unreadable, missing or
    undecodable by name; 2 nothing usable or bad arguments; 4 a --fail-under floor failed
    (2 wins over 4, 4 over 1; docs/ci.md).
    """
    detector = check_detector(detector)
    choice = decoder_choice(decoder)
    fmt = ci.check_format(fmt)
    jobs = resolve_jobs(jobs)
    floors = ci.parse_all(fail_under, lambda v: gates.parse_floor(v, effects=effects_on),
                          "--fail-under")
    ci.route_tables(console, fmt, output)

    rule = safe_rule(collateral, duplicates)
    if not run_dir.exists():
        err.print(f"[red]error:[/] {literal(run_dir)} does not exist")
        raise typer.Exit(EXIT_UNUSABLE)
    try:
        budget = dataclasses.replace(DEFAULT_BUDGET, seconds=max_seconds, megabytes=max_mb)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--max-*-per-conversation") from None
    shared = shared_model_folders(run_dir, model) if run_dir.is_dir() else []
    for msg in shared:  # one score/<model> folder each: never a run dropped for another
        err.print("error: " + visible(msg), markup=False, style="red")
    if shared:
        raise typer.Exit(EXIT_UNUSABLE)
    out = out or (run_dir if run_dir.is_dir() else run_dir.parent) / SCORE_DIR
    refuse_out(out)
    refuse_files(ci.document_file(fmt, output))
    effects = effects_or_fail(boundary, declarations, rule) if effects_on else None
    with progress_bar() as progress:
        task = progress.add_task("scoring", total=None)
        run = score_run(
            run_dir, decoder=choice, models=model,
            effects=effects, detector=detector,
            on_start=lambda n: progress.update(task, total=n),
            on_file=lambda m, c: progress.update(task, description=f"{m} {bfcl.short_name(c)}"),
            on_entry=lambda: progress.advance(task), budget=budget, jobs=jobs,
            digest=drift_digest(),
        )
    unmatched_decoders(choice)
    for msg in run.unusable:
        err.print("error: " + visible(msg), markup=False, style="red")
    if not run.usable:
        if run.problems:
            print_input_problems(run.problems, run_dir)
        if not run.unusable:
            err.print(f"[red]error:[/] {literal(no_result_files(run_dir, model))}")
        raise typer.Exit(EXIT_UNUSABLE)

    refuse_files(ci.document_file(fmt, output))  # as write_outputs checks its own files
    try:
        splits = write_outputs(run, out, effects, exclude_drifted, detector=detector,
                               budget=budget)
    except UnsafeWrite as e:
        err.print(f"[red]error:[/] {literal(e)}")
        raise typer.Exit(EXIT_UNUSABLE) from None
    confirmation = confirm_table(run.scores) if effects is not None else None

    print_input_problems(run.problems, run_dir, quiet=quiet, full=out / PROBLEMS_FILE)

    for ms in run.scores:  # a decoder that (almost) never decodes is not model behaviour
        for flag in flags(ms):
            warn(flag.labelled(ms.label))
    drift_notes([(run_dir, run)], lambda _, model: model)  # why figures differ from the day's
    console.print(accuracy_terminal(run.scores, effects is not None))
    if effects is not None:
        for table in rules_terminal(run.scores):
            console.print(table)
        if confirmation is not None:
            console.print(confirm_terminal(run.scores))
        elif not quiet:
            console.print("strict success: not applicable (no confirmation protocol in this "
                          "run; printed as –, null in conversations.jsonl)")
    if exclude_drifted:
        console.print(drift_terminal(splits))
    if not quiet:
        what = (scored_under(boundary, detector, rule) if effects else "no effect rules") \
            + budget_words(budget_limits(budget))
        console.print(f"({what}) tables, score files and conversations.jsonl written to "
                      f"[bold]{literal(out)}[/]")
    gate = gates.Gate(gates.check_floors(run.scores, floors), bool(floors),
                      {"fail_under": [f.text for f in floors]})
    raise typer.Exit(ci.finish(gate, bool(run.unusable or run.problems), fmt, output, lambda code:
                               ci_report.document(
        "score", settings=ci_report.settings_json(
            effects, detector, boundary, decoders=choice,
            decoded=[ms.decoder for ms in run.scores], budget=budget),
        runs=[ci_report.model_json(ms, effects is not None, path=str(run_dir), role="run")
              for ms in run.scores],
        gate=gate, exit_code=code, problems=run.problems, unusable=run.unusable)))


@app.command()
def doctor() -> None:
    """Check the install: the pinned bfcl-eval and no torch / CUDA / faiss stack."""
    raise typer.Exit(doc.main())


@app.command()
def decoders(
    text: str = typer.Argument("", metavar="[FILTER]",
                               help="Show only the keys holding this text (any case)."),
) -> None:
    """List the model keys of bfcl's registry that --decoder KEY takes, each with its kind:
    FC (function calling) or prompting (calls decoded from the text).

    Exit code: 0 some key listed; 2 none holds FILTER.
    """
    entries = bfcl.matching_keys(text)
    if not entries:
        raise fail(f"no key of bfcl-eval {bfcl.BFCL_VERSION}'s model registry holds "
                   f"{visible(repr(text))[:80]}; `careful decoders` lists them all")
    width = max(len(e.key) for e in entries)
    for e in entries:
        typer.echo(f"{visible(e.key):<{width}}  {'FC' if e.is_fc_model else 'prompting'}")
