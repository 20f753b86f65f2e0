"""``careful provenance``: dataset drift, decoder drift and replay fidelity of logged runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from careful_cli.common import (
    EXIT_PROBLEMS,
    EXIT_UNUSABLE,
    Decoders,
    Jobs,
    console,
    decoder_choice,
    err,
    literal,
    no_result_files,
    print_input_problems,
    progress_bar,
    refuse_out,
    resolve_jobs,
    unmatched_decoders,
    visible,
)
from careful_engine.analysis.provenance import check_file, summarise
from careful_engine.analysis.provenance.check import dumps
from careful_engine.core import bfcl, parallel, refcache
from careful_engine.core.figures import percent_text
from careful_engine.core.runs import DecoderUnavailable, Problem
from careful_engine.core.safe_text import escape_markup
from careful_engine.core.safe_write import UnsafeWrite, write_text
from careful_engine.present.tables import Name, NameTable
from careful_engine.scoring.score import folder_decoder, load_run


def safe(text: Any, limit: int | None = 110) -> str:
    """Text shown literally (control characters and lone surrogates as escapes, markup
    escaped), cut to ``limit``."""
    s = visible(text if isinstance(text, str) else repr(text))
    if limit and len(s) > limit:
        s = s[:limit] + "…"
    return escape_markup(s)


def _pct(x: float | None) -> str:
    return percent_text(x)


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.items()) or "–"


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...] = ()) -> Table:
    t = NameTable(title=title, title_justify="left")
    for col in columns:
        t.add_column(Name(col), justify="left" if col in ("category", *left) else "right")
    return t


def _drift_table(rows: list[dict]) -> Table:
    t = _table(f"Dataset drift (conversations): log vs bfcl-eval {bfcl.BFCL_VERSION}'s data",
               ("category", "logged", "identical", "question", "initial state", "turn count",
                "drifted", "no log"))
    for s in rows:
        d = s["dataset_drift"]
        k, st = d["by_kind"], d["by_status"]
        t.add_row(Name(bfcl.SHORT_NAMES[s["category"]]),
                  f"{s['with_log']}/{s['conversations']}", str(st["identical"]),
                  str(k["question_changed"]), str(k["initial_state_changed"]),
                  str(k["turn_count_changed"]), str(d["drifted"]), str(st["no_log"]))
    t.caption = ("question / initial state / turn count: conversations with that kind of drift "
                 "(one may have several); no log: unverifiable, never counted as clean")
    return t


def _decoder_table(rows: list[dict]) -> Table:
    t = _table("Decoder drift: the day's decode of each logged step vs today's decoder",
               ("category", "steps compared", "steps differing", "conversations", "kinds"),
               ("kinds",))
    for s in rows:
        d = s["decoder_drift"]
        t.add_row(Name(bfcl.SHORT_NAMES[s["category"]]),
                  str(d["steps_compared"]) if s["with_log"] else "–",
                  str(d["steps_differing"]), str(d["conversations_differing"]),
                  Name(_counts(d["by_kind"])))
    return t


def _fidelity_table(rows: list[dict]) -> Table:
    t = _table("Replay fidelity: logged tool results vs the replay, call by call",
               ("category", "calls logged", "reproduced %", "diverging", "relevant",
                "first-divergence causes"), ("first-divergence causes",))
    for s in rows:
        f = s["replay_fidelity"]
        t.add_row(Name(bfcl.SHORT_NAMES[s["category"]]),
                  str(f["calls_logged"]) if s["with_log"] else "–", _pct(f["share"]),
                  str(f["conversations_diverging"]),
                  str(f["conversations_diverging_verdict_relevant"]),
                  Name(_counts(f["first_divergence_causes"])))
    t.caption = ("diverging: conversations with a logged result the replay does not reproduce; "
                 "relevant: with a cause other than refusal wording or float digits")
    return t


def _verdict_table(rows: list[dict]) -> Table | None:
    rows = [s for s in rows if s["verdicts"].get("official")]
    if not rows:
        return None
    t = _table(f"Verdicts: official score file of the day vs replay on {bfcl.BFCL_VERSION}",
               ("category", "then %", "now %", "pass→fail", "why", "fail→pass", "why "),
               ("why", "why "))
    for s in rows:
        v = s["verdicts"]
        lost, gained = v["passed_then_fail_now"], v["failed_then_pass_now"]
        t.add_row(Name(bfcl.SHORT_NAMES[s["category"]]),
                  _pct(v["official"]["accuracy"]), _pct(v["accuracy_now"]),
                  str(lost["count"]), Name(_counts(lost["primary_reason"])),
                  str(gained["count"]), Name(_counts(gained["primary_reason"])))
    t.caption = ("why (first that applies): dataset_drift, decoder_drift, replay_differs, "
                 "possible_ground_truth_change (nothing in the log explains it)")
    return t


def _examples(rows: list[dict]) -> None:
    for s in rows:
        head = bfcl.SHORT_NAMES[s["category"]]
        for kind, ex in s["decoder_drift"]["examples"].items():
            console.print(f"[bold]{head}[/] decoder drift [cyan]{safe(kind)}[/]: {ex['id']} "
                          f"turn {ex['turn']} step {ex['step']}: then {safe(ex['then'])} / "
                          f"now {safe(ex['now'])}")
        for cause, ex in s["replay_fidelity"]["examples"].items():
            console.print(f"[bold]{head}[/] first divergence [cyan]{cause}[/]: {ex['id']} "
                          f"turn {ex['turn']} step {ex['step']} call {safe(ex['call'], 60)}\n"
                          f"    logged   {safe(ex['logged'])}\n    replayed {safe(ex['replayed'])}"
                          + (f"\n    ({safe(ex['detail'])})" if ex["detail"] else ""))


def _explain(files: list[Any]) -> None:
    for fp in files:
        for c in fp.conversations:
            if not c.verdict_changed:
                continue
            arrow = "pass→fail" if c.valid_then else "fail→pass"
            why = []
            for r in c.reasons():
                if r == "dataset_drift":
                    why.append("drift(" + ",".join(k.value for k in c.drift.kinds) + ")")
                elif r == "replay_differs" and c.fidelity:
                    why.append(f"replay({c.fidelity.relevant[0].cause})")
                else:
                    why.append(r)
            first = c.drift.differences[0] if c.drift.differences else ""
            console.print(f"  {c.id} {arrow} now {c.error_now or 'valid'}: {' '.join(why)}"
                          + (f"\n      {safe(first, 140)}" if first else ""))


def _check_task(task: tuple[str, Any], shared: tuple[dict, Path | None],
                tick: Callable[[], None]) -> Any:
    """One file's provenance check, in a worker (see careful_engine.core.parallel)."""
    (model_dir, lf), (keys, official) = task, shared
    handler = bfcl.handler(keys[model_dir]) if keys[model_dir] else None
    try:
        return check_file(lf, handler, score_root=official, on_entry=tick)[1]
    finally:
        refcache.flush()


app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`


@app.command("provenance")
def provenance_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR",
                                   help="A bfcl result folder (any depth), or one file."),
    decoder: Decoders = None,
    model: list[str] = typer.Option(None, "--model", "-m", help="Only these result folders."),
    official: Path = typer.Option(None, "--official", help="Folder of the official score files "
                                  "(bfcl's score/). Default: score/ beside result/, if any."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON (per run, "
                                  "category and conversation) instead of tables."),
    out: Path = typer.Option(None, "--out", "-o", help="Also write the JSON report here."),
    explain: bool = typer.Option(False, "--explain", help="List every conversation whose "
                                 "verdict differs from the official one, with what explains it."),
    jobs: Jobs = 0,
) -> None:
    """Check each run against its own inference log: dataset drift, decoder drift, replay fidelity.

    Per conversation: are the logged user messages and initial state the pinned dataset's
    (identical / question / initial state / turn count changed / no log)? Does today's decoder
    decode each logged step as on the day? Does the replay reproduce every tool result the model
    was shown, and if not, why first (drifted data, decoder, ids or clock values, float digits,
    a removed function, the engine's refusal wording, a changed simulator)? With the official
    score files of the day, every changed verdict is explained from the log, or marked as a
    possible ground-truth change. Runs without a log are reported as unverifiable.

    Exit code: 0 all input usable; 1 some entries unreadable, missing or oddly shaped (each
    reported with file, line and id), or a model folder undecodable; 2 nothing usable.
    """
    choice = decoder_choice(decoder)
    if not run_dir.exists():
        err.print(f"[red]error:[/] {safe(str(run_dir), None)} does not exist")
        raise typer.Exit(EXIT_UNUSABLE)
    if out:
        refuse_out(out, file=True)
    loaded, problems = load_run(run_dir, model)
    if not loaded:
        err.print(f"[red]error:[/] {literal(no_result_files(run_dir, model))}")
        raise typer.Exit(EXIT_UNUSABLE)
    runs: list[dict] = []
    checked: list[Any] = []
    unusable = 0
    total = sum(len(bfcl.conversations(lf.file.category)) for fs in loaded.values() for lf in fs)
    keys: dict[str, str | None] = {}
    with progress_bar() as progress:
        task = progress.add_task("provenance", total=total)
        for model_dir, files in loaded.items():
            try:
                key, handler = folder_decoder(
                    model_dir, files, choice.for_model(run_dir, model_dir, files[0].file))
            except DecoderUnavailable as e:
                err.print(f"[red]error:[/] {safe(str(e), None)}")
                unusable += 1
                progress.advance(task, sum(len(bfcl.conversations(lf.file.category))
                                           for lf in files))
                continue
            keys[model_dir] = key if handler else None
        tasks = [(m, lf) for m in keys for lf in loaded[m]]
        done = parallel.run_ordered(
            _check_task, tasks, jobs=resolve_jobs(jobs), shared=(keys, official),
            on_tick=lambda: progress.advance(task),
            on_done=lambda i, _: progress.update(task, description=f"{tasks[i][0]} "
                                                 f"{bfcl.SHORT_NAMES[tasks[i][1].file.category]}"))
        for model_dir in keys:
            run: dict[str, Any] = {"model": model_dir, "decoder": keys[model_dir],
                                   "categories": [], "conversations": []}
            for (m, lf), fp in zip(tasks, done, strict=True):
                if m != model_dir:
                    continue
                if isinstance(fp, parallel.Failed):
                    problems.append(Problem(str(lf.file.path), f"not checked: {fp.reason}"))
                    continue
                problems.extend(fp.problems)
                checked.append(fp)
                run["categories"].append(summarise(fp))
                if json_out or out:
                    run["conversations"].extend(c.to_json() for c in fp.conversations)
            run["verifiable"] = any(c["verifiable"] for c in run["categories"])
            runs.append(run)
    unmatched_decoders(choice)

    report = {"bfcl_eval": bfcl.BFCL_VERSION, "runs": runs,
              "problems": [vars(p) for p in problems]}
    if out:
        try:
            write_text(out, dumps(report) + "\n", errors="backslashreplace")
        except UnsafeWrite as e:
            err.print(f"[red]error:[/] {safe(str(e), None)}")
            raise typer.Exit(EXIT_UNUSABLE) from None
    if json_out:
        print(dumps(report))
    else:
        print_input_problems(problems, run_dir, missing="counted as failed, unverifiable",
                             full=out, listing="--out FILE or --json")
        _print_tables(runs)
        if explain:
            _explain(checked)
        if out:
            console.print(f"JSON report written to [bold]{safe(str(out), None)}[/]")
    if not runs:
        raise typer.Exit(EXIT_UNUSABLE)
    if unusable or problems:
        raise typer.Exit(EXIT_PROBLEMS)


def _print_tables(runs: list[dict]) -> None:
    for r in runs:
        rows = r["categories"]
        console.rule(f"[bold]{safe(r['model'], None)}[/] (decoder: {safe(r['decoder'], None)})")
        if not r["verifiable"]:
            console.print("[bold yellow]unverifiable[/]: no entry has an inference log, so "
                          "nothing shows whether this run was made on today's data and decoder; "
                          "its scores cannot be checked against what the model saw.")
        console.print(_drift_table(rows))
        if r["verifiable"]:
            console.print(_decoder_table(rows))
            console.print(_fidelity_table(rows))
        verdicts = _verdict_table(rows)
        if verdicts is not None:
            console.print(verdicts)
        _examples([s for s in rows if s["with_log"]])

