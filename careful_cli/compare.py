"""``careful compare``: two runs paired conversation by conversation, with an exact McNemar
test and CI gates (§7, Table 5; docs/ci.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from careful_cli import ci
from careful_cli.common import (
    DEFAULT_BOUNDARY,
    GATE_PANEL,
    PROBLEMS_FILE,
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
    console,
    err,
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
    visible,
    warn,
    write_reports,
)
from careful_cli.scored import decode_warnings, report_problems
from careful_engine.analysis import ci_report, gates
from careful_engine.analysis import compare as cmp
from careful_engine.present.compare import compare_report, compare_terminal, pairs_report
from careful_engine.scoring.settings import table_settings

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`
Out = tables_out("compare")


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="The baseline run folder (A).")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B", help="The run compared with it (B).")],
    model_a: Annotated[str | None, typer.Option(
        "--model-a", help="Model folder of RUN_A to use (needed when RUN_A holds "
        "several).")] = None,
    model_b: Annotated[str | None, typer.Option(
        "--model-b", help="Model folder of RUN_B to use.")] = None,
    score: Annotated[list[str] | None, typer.Option(
        "--score", "-s", help="Verdict to pair: bfcl (BFCL's own), safe (also no collateral "
        "destructive call and no duplicate write, as --collateral and --duplicates count "
        "them), strict, or both (bfcl and safe). "
        "Repeatable; default both.")] = None,
    boundary: Boundary = DEFAULT_BOUNDARY,
    detector: Detector = "strict",
    collateral: Collateral = "attempted",
    duplicates: Duplicates = "all",
    decoder: Decoders = None,
    declarations: Declarations = None,
    out: Out = None,
    quiet: Quiet = False,
    fail_on_regression: Annotated[bool, typer.Option(
        "--fail-on-regression", help="Gate: exit 4 when B is significantly worse than A "
        "(McNemar p <= --alpha and more lost than gained) on any category or overall, under "
        "any --score.", rich_help_panel=GATE_PANEL)] = False,
    alpha: Annotated[float, typer.Option(
        "--alpha", help="Significance level of the gate.",
        rich_help_panel=GATE_PANEL)] = 0.05,
    max_increase: Annotated[list[str] | None, typer.Option(
        "--max-increase", help="Gate: exit 4 when a rule's count rises by more than N from A "
        "to B, [CATEGORY:]RULE=N (e.g. collateral=5), counted over the conversations both "
        "replayed (paired by id). Repeatable.",
        rich_help_panel=GATE_PANEL)] = None,
    fmt: Format = "text",
    output: Output = None,
    jobs: Jobs = 0,
) -> None:
    """Pair two runs conversation by conversation, with an exact McNemar test
    (Table 5).

    Conversations are paired by id within each category both runs have. Per
    category and overall: conversations paired, passes in A and in B, gained
    (fail in A, pass in B), lost (pass in A, fail in B) and the exact
    two-sided McNemar p on the gained and lost ones. Two runs of one model under
    conditions that change nothing differ in some conversations too (batched
    inference is not deterministic), so read a difference off p, not off
    accuracy. Writes the tables and every changed conversation (compare_pairs)
    as Markdown, CSV, JSON, and every input problem's line to problems.txt.

    Exit code: 0 all input usable; 1 compared, but some input had problems; 2
    nothing usable or bad arguments; 4 a gate failed (--fail-on-regression,
    --max-increase; 2 wins over 4, 4 over 1; docs/ci.md).
    """
    fmt = ci.check_format(fmt)
    if not 0 < alpha < 1:
        raise typer.BadParameter(f"{alpha}: must be between 0 and 1", param_hint="--alpha")
    limits = ci.parse_all(max_increase, gates.parse_increase, "--max-increase")
    ci.route_tables(console, fmt, output)
    out = out_folder([run_a, run_b], out, "compare")
    refuse_files(ci.document_file(fmt, output))
    try:
        kinds = cmp.parse_scores(score)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--score") from None
    detector, choice, effects, jobs = scoring_inputs(detector, decoder, boundary, declarations,
                                                     jobs, collateral, duplicates)
    scored = None
    try:
        try:
            with scoring_progress() as cb:
                scored = cmp.score_pair(run_a, run_b, model_a=model_a, model_b=model_b,
                                        decoders=choice, effects=effects, detector=detector,
                                        jobs=jobs, keep_entries=False, **cb)  # no entries
        finally:
            unmatched_decoders(choice)
        pairing = cmp.pair(scored, kinds)
    except cmp.NotComparable as e:
        if scored is not None:  # scored, but nothing to pair: no file lists the problems
            report_problems(scored, quiet)
            decode_warnings(scored)
        for msg in e.notes:
            warn(msg)
        for msg in e.unusable:
            err.print("error: " + visible(msg), markup=False, style="red")
        _strict_warning(e.not_strict)
        raise fail(str(e)) from None
    a, b = pairing.a, pairing.b
    settings = table_settings(effects, detector)
    reports = [compare_report(c, pairing.label_a, pairing.label_b, settings)
               for c in pairing.comparisons]
    files = [*reports, pairs_report(pairing.comparisons, pairing.label_a, pairing.label_b,
                                    settings)]
    write_reports(files, out, ci.document_file(fmt, output), problems=scored.problems,
                  unusable=scored.unusable)
    report_problems(scored, quiet, out / PROBLEMS_FILE)
    decode_warnings(scored)
    _strict_warning(pairing.not_strict)
    for rep in reports:
        console.print(compare_terminal(rep))
    if not quiet:
        console.print(f"({scored_under(boundary, detector, effects.rule)}; decoders: A "
                      f"{literal(a.decoder or 'none')}, B {literal(b.decoder or 'none')})")
    print_written(files, out, quiet)
    gate = cmp.gate(pairing, fail_on_regression=fail_on_regression, alpha=alpha, limits=limits)
    raise typer.Exit(ci.finish(gate, bool(scored.unusable or scored.problems), fmt, output,
                               lambda code: ci_report.document(
        "compare", settings=ci_report.settings_json(
            effects, detector, boundary, decoders=choice, decoded=[a.decoder, b.decoder],
            scores=pairing.kinds),
        runs=ci_report.entry_runs([("baseline", a), ("candidate", b)], True),
        comparisons=pairing.comparisons, gate=gate, exit_code=code,
        problems=scored.problems, unusable=scored.unusable)))


def _strict_warning(entries: list[str]) -> None:
    if entries:
        warn(cmp.strict_not_applicable(entries))
