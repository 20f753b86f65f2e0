"""``careful audit``: the references under the declarations (careful_cli/declare.py), what
the decoder made of each run's logged steps, and bfcl's single-turn score files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from careful_cli import declare
from careful_cli.common import (
    EXIT_PROBLEMS,
    PROBLEMS_FILE,
    Decoders,
    Quiet,
    Runs,
    console,
    decoder_choice,
    err,
    fail,
    literal,
    no_result_files,
    out_folder,
    print_input_problems,
    print_written,
    scoring_progress,
    tables_out,
    unmatched_decoders,
    visible,
    write_reports,
)
from careful_engine.analysis import decode_audit as da
from careful_engine.analysis import score_audit as sa
from careful_engine.core import bfcl
from careful_engine.present import decode_audit as show_decode
from careful_engine.present import score_audit as show_scores

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`
audit_app = typer.Typer(
    name="audit", help="Audits: the references under the declarations, a run's decoding, bfcl "
    "single-turn score folders.", no_args_is_help=True, add_completion=False)
app.add_typer(audit_app, name="audit")
audit_app.command("references")(declare.audit_references)
DecodeOut, ScoresOut = tables_out("decode-audit"), tables_out("score-audit")


@audit_app.command("decode")
def decode_cmd(
    runs: Runs,
    decoder: Decoders = None,
    top: Annotated[int, typer.Option(
        "--top", help="Failure messages shown per entry (the files keep 5).")] = 3,
    out: DecodeOut = None,
    quiet: Quiet = False,
) -> None:
    """What the decoder made of each run's logged steps: calls, no call, or a
    failure.

    Decodes every step as `careful score` does (registered handler,
    careful_run.json or --decoder), without replaying anything. Per entry and
    category: the share of steps that decoded to calls, to no call (a text
    answer, or nothing: an FC step logged as []; bfcl's loop ends the turn
    there, whether the handler returns no call or, as Claude FC and xLAM do on
    text, raises) and that failed to decode (a step that opens like a call, a
    list, object, tag or name(, but does not decode; bfcl drops these
    silently), entries with no steps
    (inference errors), and the commonest failure messages with numbers and
    quoted text stripped so that they group. A run in which fewer than 5% of
    steps decode to calls while at least 40% fail is flagged as a probable
    decoder mismatch: its silence is the decoder's, not the model's.

    Exit code: 0 nothing flagged; 1 a run flagged or input problems; 2 nothing
    usable.
    """
    out = out_folder(runs, out, "decode-audit")
    choice = decoder_choice(decoder)
    audits = []
    with scoring_progress("decoding") as cb:
        for run in runs:
            audits.append(da.audit_run(run, decoder=choice, on_start=cb["on_start"],
                                       on_entry=cb["on_entry"]))
    unmatched_decoders(choice)
    unusable = [f"{a.run}: {m}" for a in audits for m in a.unusable]
    for msg in unusable:
        err.print("error: " + visible(msg), markup=False, style="red")
    table, flags = da.by_entry(audits)
    if not table:
        raise fail("; ".join(f"{a.run}: nothing could be decoded" if a.unusable else
                             no_result_files(a.run, None) for a in audits))
    reports = [show_decode.shares_report(table), show_decode.messages_report(table)]
    write_reports(reports, out, problems=[p for a in audits for p in a.problems],
                  unusable=unusable)
    console.print(show_decode.shares_terminal(table))
    if any(st.messages for _, sts in table for st in sts):
        console.print(show_decode.messages_terminal(table, top))
    for where, f in flags:
        cat = f" {bfcl.short_name(f.category)}" if f.category else ""
        console.print(f"[yellow]⚑ {literal(where)}{cat}:[/] {literal(f.message)}")
    print_written(reports, out, quiet)
    for a in audits:  # lines that could not be read, as score lists them
        print_input_problems(a.problems, a.run, quiet=quiet, full=out / PROBLEMS_FILE)
    if flags or unusable or any(a.problems for a in audits):
        raise typer.Exit(EXIT_PROBLEMS)


@audit_app.command("scores")
def scores_cmd(
    directory: Annotated[Path, typer.Argument(
        help="A bfcl score folder (score/<model>/...), a model folder inside one, or a run "
        "folder holding score/ and result/.")],
    results: Annotated[Path | None, typer.Option(
        "--results", help="bfcl's result folder for the same models. Default: the 'result' "
        "folder next to the nearest folder named 'score'.")] = None,
    near: Annotated[float, typer.Option(
        "--near", help="Irrelevance accuracy counted as 'near 1' for the "
        "signature.")] = sa.NEAR_ONE,
    out: ScoresOut = None,
    quiet: Quiet = False,
) -> None:
    """Audit bfcl score files: the irrelevance decode-failure signature and
    bfcl's weights.

    Reads every BFCL_v*_<category>_score.json under DIRECTORY (line 1:
    accuracy, correct_count, total_count; later lines: the failed entries),
    single-turn included.

    \b
    * Signature: relevance 0 with irrelevance at or near 1 (--near) is a
      decoder that never succeeds, not perfect judgement: bfcl credits an
      output that fails to decode as a correct abstention. Also flagged: AST
      categories that (almost) all failed to decode.
    * Credited irrelevance entries: a score file lists only failures, so the
      credited ones are read from the result files (--results, or result/ next
      to score/) and checked for an attempted call (tool-call tags, JSON
      name/arguments, Python calls with keyword arguments, structured calls).
      Heuristic: counts, not verdicts.
    * Overall accuracy recomputed with the weights bfcl-eval 2026.3.23's code
      applies: non-live 10, live 10 (live AST weighted by entry count),
      irrelevance 10, multi-turn 30, agentic 40; a category not evaluated
      counts 0; live_relevance enters no block.

    Exit code: 0 nothing flagged; 1 a model flagged or input problems; 2 no
    score files.
    """
    if not directory.exists():
        raise fail(f"{directory} does not exist")
    if results is not None and not results.is_dir():
        raise fail(f"--results {results} is not a folder")
    out = out_folder([], out, "score-audit")
    audits, result_dir, problems = sa.audit(directory, results, near)
    if not audits:
        raise fail(f"no BFCL_v*_<category>_score.json files under {directory}")
    source = sa.locate(directory, results)[0]  # the score folder the figures come from
    reports = show_scores.score_audit_reports(audits, result_dir, source)
    write_reports(reports, out, problems=problems)
    print_input_problems(problems, directory, quiet=quiet, full=out / PROBLEMS_FILE)
    console.print(show_scores.overall_terminal(audits, source))
    if any(cr for a in audits for cr in a.credited):
        console.print(show_scores.credited_terminal(audits, result_dir))
    flags = [f for a in audits for f in a.flags]
    for f in flags:
        console.print(f"[yellow]⚑ {literal(f.model)}:[/] {literal(f.message)}")
    if not flags and not quiet:
        console.print("no decode-failure signature found")
    print_written(reports, out, quiet)
    if flags or problems:
        raise typer.Exit(EXIT_PROBLEMS)
