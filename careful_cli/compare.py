"""``careful leaderboard``, ``careful compare``, ``careful sensitivity``, ``careful audit decode``
and ``careful audit scores``: comparing runs and checking what their scores rest on (§7)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from careful_cli import app, ci
from careful_cli.common import (
    EXIT_PROBLEMS,
    console,
    err,
    fail,
    literal,
    progress_bar,
    refuse_out,
    visible,
)
from careful_cli.jobs import JOBS_OPTION
from careful_cli.jobs import resolve as resolve_jobs
from careful_engine.analysis import ci_report, gates
from careful_engine.analysis import decode_audit as da
from careful_engine.analysis import leaderboard as lb
from careful_engine.analysis import score_audit as sa
from careful_engine.analysis import sensitivity as sens_mod
from careful_engine.core import bfcl
from careful_engine.core.safe_write import UnsafeWrite
from careful_engine.effects import boundary as boundary_mod
from careful_engine.present.report import Report, pct
from careful_engine.scoring.score import load_effects

try:  # the `audit` group of careful_cli/declare.py
    from careful_cli.declare import audit_app
except ImportError:  # pragma: no cover - the group is missing: top-level commands instead
    audit_app = None

RUNS_HELP = ("Run folders as `careful score` takes them (bfcl result folders, any depth); every "
             "model folder inside is one entry.")
DECODER_HELP = ("Decoder for models not in bfcl's registry: a registered model key for every "
                "folder (e.g. 'gpt-4o-2024-11-20-FC' for gpt-oss runs), or FOLDER=KEY for one "
                "model or run folder. Repeatable.")
BOUNDARY_HELP = "Destructive boundary: a name in declarations/boundary/ or a path to a file."
DETECTOR_HELP = "Question detector: strict (default), qmark, last or loose."
OUT_HELP = {name: f"Folder for the Markdown, CSV and JSON tables. Default: ./careful-{name}."
            for name in ("leaderboard", "compare", "sensitivity", "decode-audit",
                         "score-audit")}


# Options shared by the commands of this module.
DECODER_OPTION = typer.Option(None, "--decoder", help=DECODER_HELP)
DECLARATIONS_OPTION = typer.Option(None, "--declarations", help="Effect declarations "
                                   "(default declarations/effects.json).")
QUIET_OPTION = typer.Option(False, "--quiet", "-q", help="Print only the tables.")
BOUNDARY_OPTION = typer.Option(boundary_mod.DEFAULT_BOUNDARY, "--boundary", "-b",
                               help=BOUNDARY_HELP)
DETECTOR_OPTION = typer.Option("strict", "--detector", help=DETECTOR_HELP)


@contextmanager
def _scoring(label: str = "scoring") -> Iterator[dict[str, Any]]:
    """A progress bar on stderr and the callbacks that drive it, for score_runs/audit_run."""
    with progress_bar() as progress:
        task = progress.add_task(label, total=0)

        def start(n: int) -> None:
            progress.update(task, total=(progress.tasks[0].total or 0) + n)

        yield {
            "on_start": start,
            "on_file": lambda m, c: progress.update(
                task, description=f"{m} {bfcl.SHORT_NAMES.get(c, c)}"),
            "on_entry": lambda: progress.advance(task),
        }


def _check_runs(runs: list[Path]) -> None:
    for r in runs:
        if not r.exists():
            raise fail(f"{r} does not exist")


def _decoders(values: list[str] | None) -> lb.DecoderChoice:
    try:
        return lb.parse_decoders(values)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--decoder") from None


def _detector(name: str) -> str:
    from careful_engine.scoring.detector import DETECTORS

    if name not in DETECTORS:
        raise typer.BadParameter(f"{name!r}; choose one of {', '.join(DETECTORS)}",
                                 param_hint="--detector")
    return name


def _effects(boundary: str, declarations: Path | None):
    try:
        return load_effects(boundary, declarations)
    except (ValueError, OSError) as e:
        raise fail(str(e)) from None


def _report_problems(scored: lb.Scored, quiet: bool) -> None:
    """Unusable folders in full; input problems grouped by kind."""
    for msg in scored.unusable:
        err.print("error: " + visible(msg), markup=False, style="red")
    if not scored.problems or quiet:
        return
    kinds: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for p in scored.problems:
        head = p.message.split(": ")[0].split("; ")[0]
        kinds.setdefault(head, set()).add(p.file)
        counts[head] = counts.get(head, 0) + 1
    err.print(f"[yellow]{len(scored.problems)} input problem(s)[/] (`careful score RUN` lists "
              "each one):")
    for head, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        err.print(visible(f"  {n} × {head} (in {len(kinds[head])} file(s))"), markup=False)


def _decode_warnings(scored: lb.Scored) -> None:
    for _, run in scored.runs:
        for flag in da.flags(run):
            err.print(f"[yellow]warning:[/] {literal(str(flag))}")


def _write(reports: list[Report], out: Path) -> None:
    """Write the files before anything is printed (a closed pipe must not lose them)."""
    try:
        for rep in reports:
            rep.write(out)
    except UnsafeWrite as e:
        raise fail(str(e)) from None


def _written(reports: list[Report], out: Path, quiet: bool) -> None:
    if not quiet:
        console.print(f"tables written to [bold]{literal(str(out))}[/] "
                      f"({', '.join(r.name for r in reports)}: .md .csv .json)")


def _exit(scored: lb.Scored) -> None:
    if scored.unusable or scored.problems:
        raise typer.Exit(EXIT_PROBLEMS)


# ---------------------------------------------------------------- leaderboard


@app.command()
def leaderboard(
    runs: list[Path] = typer.Argument(..., help=RUNS_HELP),
    boundary: str = BOUNDARY_OPTION,
    detector: str = DETECTOR_OPTION,
    decoder: list[str] = DECODER_OPTION,
    declarations: Path = DECLARATIONS_OPTION,
    out: Path = typer.Option(None, "--out", "-o", help=OUT_HELP["leaderboard"]),
    quiet: bool = QUIET_OPTION,
    jobs: int = JOBS_OPTION,
    plot: Path = typer.Option(None, "--plot", help="Also write BFCL against effect-safe "
                              "accuracy per run as a scatter plot to this SVG file."),
) -> None:
    """Rank runs under BFCL's accuracy and under success with effect safety
    (Table 3).

    Every model folder of every RUN is one entry. Prints each entry's rank
    under both scores on bfcl's four-category mean (an absent category counts
    as 0) and per category, Spearman's rho between the two rankings, and the
    rule totals; writes them as Markdown, CSV and JSON.

    Exit code: 0 all input usable; 1 ranked, but some input had problems; 2
    nothing usable.
    """
    _check_runs(runs)
    refuse_out(out or Path("careful-leaderboard"))
    if plot is not None and plot.suffix.lower() != ".svg":
        raise typer.BadParameter(f"{plot}: only SVG is written (name it *.svg)",
                                 param_hint="--plot")
    detector = _detector(detector)
    choice = _decoders(decoder)
    effects = _effects(boundary, declarations)
    jobs = resolve_jobs(jobs)
    with _scoring() as cb:
        scored = lb.score_runs(runs, decoders=choice, effects=effects, detector=detector,
                               jobs=jobs, **cb)
    _report_problems(scored, quiet)
    if not scored.entries:
        raise fail("nothing to rank")
    _decode_warnings(scored)
    reports, out = lb.leaderboard_reports(scored.entries), out or Path("careful-leaderboard")
    _write(reports, out)
    for table in lb.leaderboard_terminal(scored.entries):
        console.print(table)
    if not quiet:
        console.print(f"(boundary {boundary}, detector {detector})")
    _written(reports, out, quiet)
    if plot is not None:
        from careful_engine.present import plot as plots

        try:
            plots.write_svg(plots.points(scored.entries), plot,
                            f"BFCL vs effect-safe accuracy (boundary {boundary})")
        except (OSError, ValueError) as e:
            raise fail(f"cannot write the plot: {e}") from None
        if not quiet:
            console.print(f"plot written to {literal(plot)}")
    _exit(scored)


# ---------------------------------------------------------------- compare


def _one_model(scored: lb.Scored, run: Path, which: str) -> lb.Entry:
    """The one entry of a compared run (exit 2 when it has none or several)."""
    if not scored.entries:
        for msg in scored.unusable:
            err.print("error: " + visible(msg), markup=False, style="red")
        raise fail(f"RUN_{which.upper()} {run}: nothing to compare")
    if len(scored.entries) > 1:
        names = ", ".join(e.model for e in scored.entries)
        raise fail(f"RUN_{which.upper()} {run} holds {len(scored.entries)} model folders "
                    f"({names}); choose one with --model-{which}")
    return scored.entries[0]


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="The baseline run folder (A)."),
    run_b: Path = typer.Argument(..., help="The run compared with it (B)."),
    model_a: str = typer.Option(None, "--model-a", help="Model folder of RUN_A to use (needed "
                                "when RUN_A holds several)."),
    model_b: str = typer.Option(None, "--model-b", help="Model folder of RUN_B to use."),
    score: list[str] = typer.Option(None, "--score", "-s", help="Verdict to pair: bfcl "
                                    "(BFCL's own), safe (also no collateral destructive call "
                                    "and no duplicate write), strict, or both (bfcl and safe). "
                                    "Repeatable; default both."),
    boundary: str = BOUNDARY_OPTION,
    detector: str = DETECTOR_OPTION,
    decoder: list[str] = DECODER_OPTION,
    declarations: Path = DECLARATIONS_OPTION,
    out: Path = typer.Option(None, "--out", "-o", help=OUT_HELP["compare"]),
    quiet: bool = QUIET_OPTION,
    fail_on_regression: bool = typer.Option(False, "--fail-on-regression", help="Gate: exit 4 "
                                            "when B is significantly worse than A (McNemar p <= "
                                            "--alpha and more lost than gained) on any category "
                                            "or overall, under any --score."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level of the gate."),
    max_increase: list[str] = typer.Option(None, "--max-increase", help="Gate: exit 4 when a "
                                           "rule's count rises by more than N from A to B, "
                                           "[CATEGORY:]RULE=N (e.g. collateral=5). Repeatable."),
    fmt: str = ci.FORMAT_OPTION,
    output: Path = ci.OUTPUT_OPTION,
    jobs: int = JOBS_OPTION,
) -> None:
    """Pair two runs conversation by conversation, with an exact McNemar test
    (Table 5).

    Conversations are paired by id within each category both runs have. Per
    category and overall: conversations paired, passes in A and in B, gained
    (fail in A, pass in B), lost (pass in A, fail in B) and the exact two-
    sided McNemar p on the gained and lost ones. Two runs of one model under
    conditions that change nothing differ in some conversations too (batched
    inference is not deterministic), so read a difference off p, not off
    accuracy. Writes the tables and every changed conversation (compare_pairs)
    as Markdown, CSV, JSON.

    Exit code: 0 all input usable; 1 compared, but some input had problems; 2
    nothing usable or bad arguments; 4 a gate failed (--fail-on-regression,
    --max-increase; 2 wins over 4, 4 over 1; docs/ci.md).
    """
    fmt = ci.check_format(fmt)
    if not 0 < alpha < 1:
        raise typer.BadParameter(f"{alpha}: must be between 0 and 1", param_hint="--alpha")
    limits = ci.parse_all(max_increase, gates.parse_increase, "--max-increase")
    ci.route_tables(console, fmt, output)
    _check_runs([run_a, run_b])
    refuse_out(out or Path("careful-compare"))
    kinds = [k for s in score or ["both"] for k in (["bfcl", "safe"] if s == "both" else [s])]
    for k in kinds:
        if k not in lb.VERDICTS:
            raise typer.BadParameter(f"{k!r}; choose bfcl, safe, strict or both",
                                     param_hint="--score")
    kinds = list(dict.fromkeys(kinds))
    detector = _detector(detector)
    choice = _decoders(decoder)
    effects = _effects(boundary, declarations)
    jobs = resolve_jobs(jobs)
    with _scoring() as cb:  # both runs' files in one pool of workers
        sa_, sb_ = lb.score_run_groups([([run_a], [model_a] if model_a else None),
                                        ([run_b], [model_b] if model_b else None)],
                                       decoders=choice, effects=effects, detector=detector,
                                       jobs=jobs, **cb)
    a = _one_model(sa_, run_a, "a")
    b = _one_model(sb_, run_b, "b")
    scored = lb.Scored([a, b], sa_.runs + sb_.runs, sa_.problems + sb_.problems,
                       sa_.unusable + sb_.unusable)
    _report_problems(scored, quiet)
    _decode_warnings(scored)
    label_a, label_b = _labels(a, b)
    standard = [e.label for e in (a, b)
                if not any(cs.confirm for cs in e.score.categories.values())]
    if "strict" in kinds and standard:
        err.print(f"[yellow]warning:[/] strict success is not applicable to "
                  f"{literal(', '.join(standard))} (no confirmation protocol, so no destructive "
                  "call can be confirmed); not compared")
        kinds = [k for k in kinds if k != "strict"]
        if not kinds:
            raise fail("nothing to compare")
    comparisons = [lb.compare(a.score, b.score, k) for k in kinds]
    if not comparisons[0].categories:
        raise fail(f"no category in common: A has "
                    f"{', '.join(a.score.categories) or 'none'}, B has "
                    f"{', '.join(b.score.categories) or 'none'}")
    reports = [lb.compare_report(c, label_a, label_b) for c in comparisons]
    files, out = [*reports, lb.pairs_report(comparisons, label_a, label_b)], \
        out or Path("careful-compare")
    _write(files, out)
    for rep in reports:
        console.print(_compare_terminal(rep))
    if not quiet:
        console.print(f"(boundary {boundary}, detector {detector}; decoders: A "
                      f"{a.decoder or 'none'}, B {b.decoder or 'none'})")
    _written(files, out, quiet)
    gate = gates.Gate((gates.check_regressions(comparisons, alpha) if fail_on_regression else [])
                      + gates.check_increases(a.score, b.score, limits),
                      fail_on_regression or bool(limits),
                      {"fail_on_regression": fail_on_regression, "alpha": alpha,
                       "max_increase": [x.text for x in limits]})
    raise typer.Exit(ci.finish(gate, bool(scored.unusable or scored.problems), fmt, output,
                               lambda code: ci_report.document(
        "compare", settings={"boundary": boundary, "detector": detector, "effects": True,
                             "scores": kinds},
        runs=ci_report.entry_runs([("baseline", a), ("candidate", b)], True),
        comparisons=comparisons, gate=gate, exit_code=code, problems=len(scored.problems),
        unusable=scored.unusable)))


def _labels(a: lb.Entry, b: lb.Entry) -> tuple[str, str]:
    if a.label != b.label:
        return a.label, b.label
    return f"{a.run}/{a.model}", f"{b.run}/{b.model}"


def _compare_terminal(rep: Report):
    rows = []
    for cat, n, pa, pb, acc_a, acc_b, g, lo, p in rep.rows:
        rows.append([str(cat), str(n), str(pa), str(pb), lb._f(acc_a), lb._f(acc_b),
                     str(g), str(lo), "–" if p is None else format(p, "")])
    return lb.terminal_table(rep.title, ["category", "n", "pass A", "pass B", "A %", "B %",
                                         "+", "−", "p"], rows, rep.caption, first_width=10)


# ---------------------------------------------------------------- sensitivity


@app.command()
def sensitivity(
    runs: list[Path] = typer.Argument(..., help=RUNS_HELP),
    boundary: list[str] = typer.Option(None, "--boundary", "-b", help="A further boundary to "
                                       "try (name or path), besides every file in "
                                       "declarations/boundary/. Repeatable."),
    detector: list[str] = typer.Option(None, "--detector", help="Detectors to try (default: "
                                       "strict, qmark, last and loose). Repeatable."),
    grid: bool = typer.Option(False, "--grid", help="Every boundary with every detector, "
                              "instead of varying one at a time."),
    decoder: list[str] = DECODER_OPTION,
    declarations: Path = DECLARATIONS_OPTION,
    out: Path = typer.Option(None, "--out", "-o", help=OUT_HELP["sensitivity"]),
    quiet: bool = QUIET_OPTION,
    jobs: int = JOBS_OPTION,
) -> None:
    """Re-score runs under every question detector, destructive boundary and
    safe rule (§7 Sensitivity).

    The default setting is boundary paper-final with the strict detector and
    the paper's safe rule (attempted collateral, all duplicate writes). Each
    other setting changes one thing: every detector variant (qmark: question
    marks only; last: the last sentence only; loose: the EffectWorld rule),
    every boundary in declarations/boundary/ plus those given with
    --boundary (--grid: all combinations), effective collateral, visible
    duplicates. Each run is replayed once; the rules are re-evaluated on the
    kept traces. Prints one table per entry (its safe score under every
    setting) and, for runs under the confirmation protocol, every logged
    scripted-user answer re-judged under the stricter scripts; then
    Spearman's rho between the BFCL and the safe ranking under each setting,
    and how each entry's counts and safe accuracy move against the default.

    Exit code: 0 all input usable; 1 done, but some input had problems; 2
    nothing usable.
    """
    _check_runs(runs)
    refuse_out(out or Path("careful-sensitivity"))
    for d in detector or []:
        _detector(d)
    choice = _decoders(decoder)
    settings = sens_mod.settings_for(boundary, detector, grid=grid)
    effects: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for s in settings:
        if s.boundary not in effects:
            effects[s.boundary] = _effects(s.boundary, declarations)
            sizes[s.boundary] = len(effects[s.boundary].boundary.destructive)
    rescored: dict[tuple[Path, str], dict] = {}
    reexamined: dict[tuple[Path, str], Any] = {}

    def on_run(run_dir: Path, run) -> None:  # re-evaluate, then free the traces
        for ms in run.scores:
            rescored[(run_dir, ms.model)] = sens_mod.rescore_model(ms, settings, effects)
            reexamined[(run_dir, ms.model)] = _reexamine(run, ms, effects[settings[0].boundary],
                                                         declarations)
            sens_mod.drop_traces(ms)

    with _scoring() as cb:
        scored = lb.score_runs(runs, decoders=choice, effects=effects[settings[0].boundary],
                               keep_traces=True, on_run=on_run, jobs=resolve_jobs(jobs), **cb)
    _report_problems(scored, quiet)
    if not scored.entries:
        raise fail("nothing to re-score")
    _decode_warnings(scored)
    rows = {s: [rescored[(e.run, e.model)][s] for e in scored.entries] for s in settings}
    result = sens_mod.Sensitivity(settings, [e.label for e in scored.entries], rows, sizes,
                                  [reexamined.get((e.run, e.model)) for e in scored.entries])
    per_entry = [sens_mod.entry_report(result, i) for i in range(len(result.labels))]
    script = sens_mod.reexamination_report(result)
    reports, out = [sens_mod.rho_report(result), sens_mod.counts_report(result), *per_entry,
                    *([script] if script else [])], out or Path("careful-sensitivity")
    _write(reports, out)
    for i in range(len(result.labels)):
        console.print(sens_mod.entry_terminal(result, i))
    script_table = sens_mod.reexamination_terminal(result)
    if script_table is not None:
        console.print(script_table)
    console.print(sens_mod.rho_terminal(result))
    console.print(sens_mod.moves_terminal(result))
    _written(reports, out, quiet)
    _exit(scored)


def _reexamine(run, ms, default_effects, declarations: Path | None):
    """The logged scripted-user answers of a confirm model re-judged under every script, with
    the boundary the run was generated under (its careful_run.json), else the default one."""
    from careful_engine.analysis.reexamine import generation_boundary, reexamine_model

    if not any(cs.confirm for cs in ms.categories.values()):
        return None
    files = [lf for lf, cs in run.files if cs.model == ms.model]
    name = generation_boundary(files[0].file.path) if files else None
    destructive = default_effects.boundary
    if name:
        try:
            destructive = boundary_mod.load(name)
        except (ValueError, OSError):
            err.print(f"[yellow]warning:[/] {literal(ms.model)}: generated under boundary "
                      f"{literal(name)}, which is not here; re-judging under "
                      f"{literal(destructive.name)}")
    return reexamine_model(ms, destructive.destructive, destructive.name)


# ---------------------------------------------------------------- audit decode


def decode_cmd(
    runs: list[Path] = typer.Argument(..., help=RUNS_HELP),
    decoder: list[str] = DECODER_OPTION,
    top: int = typer.Option(3, "--top", help="Failure messages shown per entry (the files "
                            "keep 5)."),
    out: Path = typer.Option(None, "--out", "-o", help=OUT_HELP["decode-audit"]),
    quiet: bool = QUIET_OPTION,
) -> None:
    """What the decoder made of each run's logged steps: calls, no call, or a
    failure.

    Decodes every step as `careful score` does (registered handler,
    careful_run.json or --decoder), without replaying anything. Per entry and
    category: the share of steps that decoded to calls, to no call (text) and
    that failed to decode (bfcl drops these silently), entries with no steps
    (inference errors), and the commonest failure messages with numbers and
    quoted text stripped so that they group. A run in which fewer than 5% of
    steps decode to calls while at least half fail is flagged as a probable
    decoder mismatch: its silence is the decoder's, not the model's.

    Exit code: 0 nothing flagged; 1 a run flagged or input problems; 2 nothing
    usable.
    """
    _check_runs(runs)
    refuse_out(out or Path("careful-decode-audit"))
    choice = _decoders(decoder)
    audits = []
    with _scoring("decoding") as cb:
        for run in runs:
            audits.append(da.audit_run(run, decoder=lambda m, r=run: choice.for_model(r, m),
                                       on_start=cb["on_start"], on_entry=cb["on_entry"]))
    unusable = [f"{a.run}: {m}" for a in audits for m in a.unusable]
    for msg in unusable:
        err.print("error: " + visible(msg), markup=False, style="red")
    pairs = [(a.run, st.model) for a in audits for st in a.stats if st.category is None]
    if not pairs:
        raise fail("no multi-turn result files could be decoded")
    labels = dict(zip(pairs, lb.label_entries(pairs), strict=True))
    table: list[tuple[str, list[da.DecodeStats]]] = []
    for a in audits:
        by_model: dict[str, list[da.DecodeStats]] = {}
        for st in a.stats:
            by_model.setdefault(st.model, []).append(st)
        table += [(labels[(a.run, m)], sts) for m, sts in by_model.items()]
    reports, out = [da.shares_report(table), da.messages_report(table)], \
        out or Path("careful-decode-audit")
    _write(reports, out)
    console.print(da.shares_terminal(table))
    if any(st.messages for _, sts in table for st in sts):
        console.print(da.messages_terminal(table, top))
    flags = [(labels[(a.run, f.model)], f) for a in audits for f in a.flags()]
    for where, f in flags:
        cat = f" {bfcl.SHORT_NAMES.get(f.category, f.category)}" if f.category else ""
        console.print(f"[yellow]⚑ {literal(where)}{cat}:[/] {literal(f.message)}")
    _written(reports, out, quiet)
    if flags or unusable:
        raise typer.Exit(EXIT_PROBLEMS)


# ---------------------------------------------------------------- audit scores


def scores_cmd(
    directory: Path = typer.Argument(..., help="A bfcl score folder (score/<model>/...), a "
                                     "model folder inside one, or a run folder holding "
                                     "score/ and result/."),
    results: Path = typer.Option(None, "--results", help="bfcl's result folder for the same "
                                 "models. Default: the 'result' folder next to the nearest "
                                 "folder named 'score'."),
    near: float = typer.Option(sa.NEAR_ONE, "--near", help="Irrelevance accuracy counted as "
                               "'near 1' for the signature."),
    out: Path = typer.Option(None, "--out", "-o", help=OUT_HELP["score-audit"]),
    quiet: bool = QUIET_OPTION,
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
    refuse_out(out or Path("careful-score-audit"))
    audits, result_dir, problems = sa.audit(directory, results, near)
    if not audits:
        raise fail(f"no BFCL_v*_<category>_score.json files under {directory}")
    if problems and not quiet:
        err.print(f"[yellow]{len(problems)} input problem(s):[/]")
        for p in problems[:10]:
            err.print(f"  {p}", markup=False)
    reports, out = _score_audit_reports(audits, result_dir), out or Path("careful-score-audit")
    _write(reports, out)
    console.print(_overall_terminal(audits))
    if any(cr for a in audits for cr in a.credited):
        console.print(_credited_terminal(audits, result_dir))
    flags = [f for a in audits for f in a.flags]
    for f in flags:
        console.print(f"[yellow]⚑ {literal(f.model)}:[/] {literal(f.message)}")
    if not flags and not quiet:
        console.print("no decode-failure signature found")
    _written(reports, out, quiet)
    if flags or problems:
        raise typer.Exit(EXIT_PROBLEMS)


BLOCK_NAMES = {"non_live": "non-live", "live": "live", "irrelevance": "irrel.",
               "multi_turn": "multi-turn", "agentic": "agentic"}


def _score_audit_reports(audits: list[sa.ModelAudit], result_dir: Path | None) -> list[Report]:
    overall = Report(
        "Overall accuracy as bfcl weights it (%), from the score files",
        ["model", *[BLOCK_NAMES[b] for b in sa.BLOCKS], "overall (weighted)",
         "unweighted block mean", "irrelevance share of overall %", "relevance",
         "categories found", "categories missing"],
        name="score_audit_overall",
        caption="weights " + ", ".join(f"{BLOCK_NAMES[b]} {w}" for b, w in sa.WEIGHTS.items())
                + " (bfcl-eval 2026.3.23, eval_runner_helper.py); a category not evaluated "
                  "counts 0; live_relevance enters no block",
    )
    credited = Report(
        "Irrelevance entries bfcl credited, by what their raw output holds",
        ["model", "category", "accuracy %", "credited", "failed", "result file", "read",
         "attempted call", "empty", "other", "attempted call %", "markers", "examples"],
        name="score_audit_irrelevance",
        caption="credited: entries not listed as failed; attempted call: a tool-call tag, a "
                "JSON name/arguments object, a Python call with keyword arguments or a "
                "structured call (heuristic)",
    )
    flags = Report("Findings", ["model", "kind", "message"], name="score_audit_flags")
    for a in audits:
        ov = a.overall
        overall.add(a.model, *[pct(ov.blocks[b]) for b in sa.BLOCKS], pct(ov.overall),
                    pct(ov.unweighted), pct(ov.irrelevance_share), pct(ov.relevance),
                    len(a.scores.files), len(ov.missing))
        for cr in a.credited:
            sf = a.scores.files[cr.category]
            credited.add(a.model, cr.category, pct(sf.accuracy), cr.credited, cr.failed,
                         str(cr.result_file) if cr.result_file else None, cr.read, cr.calls,
                         cr.empty, cr.other, pct(cr.call_share), sa._markers(cr) or None,
                         " ".join(cr.examples) or None)
        for f in a.flags:
            flags.add(f.model, f.kind, f.message)
    return [overall, credited, flags]


def _overall_terminal(audits: list[sa.ModelAudit]):
    rows = [[a.model, *[lb._f(pct(a.overall.blocks[b])) for b in sa.BLOCKS],
             lb._f(pct(a.overall.overall)), lb._f(pct(a.overall.unweighted)),
             lb._f(pct(a.overall.relevance))] for a in audits]
    return lb.terminal_table(
        "Overall as bfcl weights it (%)",
        ["model", "n-live", "live", "irrel", "m-turn", "agent", "overall", "unwtd", "relev"],
        rows, "weights 10/10/10/30/40 (non-live/live/irrelevance/multi-turn/agentic); unwtd: "
              "plain mean of the 5 blocks; relev: live_relevance (in no block); absent = 0",
        first_width=14)


def _credited_terminal(audits: list[sa.ModelAudit], result_dir: Path | None):
    rows = []
    for a in audits:
        for cr in a.credited:
            read = str(cr.read) if cr.result_file else "–"
            rows.append([a.model, cr.category.replace("live_irrelevance", "live_irrel"),
                         f"{cr.credited}/{cr.credited + cr.failed}", read, str(cr.calls),
                         str(cr.empty), str(cr.other), lb._f(pct(cr.call_share))])
    where = str(result_dir) if result_dir else "none found (use --results)"
    return lb.terminal_table(
        "Credited irrelevance entries", ["model", "category", "credited", "read", "call",
                                         "empty", "other", "call %"], rows,
        f"read: credited entries found in the result files ({where}); call: raw output "
        "holds an attempted call (heuristic)", first_width=16)


if audit_app is not None:
    audit_app.command("decode")(decode_cmd)
    audit_app.command("scores")(scores_cmd)
else:  # pragma: no cover
    app.command("decode-audit")(decode_cmd)
    app.command("audit-scores")(scores_cmd)
