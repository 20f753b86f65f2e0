"""``careful score`` and ``careful demo``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from careful_engine import bfcl, demo
from careful_engine.cli import app
from careful_engine.runs import load_result_file
from careful_engine.scoring import (
    ModelScore,
    discover,
    manifest_decoder,
    needs_decoder,
    score_file,
    write_score_file,
)

console = Console()
err = Console(stderr=True, soft_wrap=True, highlight=False)

EXIT_OK, EXIT_PROBLEMS, EXIT_UNUSABLE = 0, 1, 2


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _table(scores: list[ModelScore]) -> Table:
    short = [bfcl.SHORT_NAMES[c] for c in bfcl.CATEGORIES]
    table = Table(title="BFCL multi-turn accuracy (%), replayed with bfcl-eval "
                  f"{bfcl.BFCL_VERSION}'s rules")
    table.add_column("model", overflow="fold")
    table.add_column("decoder", overflow="fold")
    for name in short:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("mean", justify="right", style="bold")
    for ms in scores:
        cells = [
            _pct(ms.categories[c].accuracy) if c in ms.categories else "–"
            for c in bfcl.CATEGORIES
        ]
        table.add_row(ms.model, ms.decoder or "–", *cells, _pct(ms.mean_accuracy()))
    table.caption = "mean: unweighted over the four categories; an absent one counts as 0"
    return table


@app.command()
def score(
    run_dir: Path = typer.Argument(..., help="A bfcl result folder (any depth), or one result file."),
    out: Path = typer.Option(None, "--out", "-o", help="Where to write score files and "
                             "conversations.jsonl. Default: <RUN_DIR>/careful-score."),
    decoder: str = typer.Option(None, "--decoder", help="Registered bfcl model whose decoder to "
                                "use for models not in the registry (e.g. gpt-oss runs: "
                                "'gpt-4o-2024-11-20-FC')."),
    model: list[str] = typer.Option(None, "--model", "-m", help="Only score these result folders."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the table."),
) -> None:
    """Re-score BFCL multi-turn result files by replay and reproduce bfcl's verdict.

    Finds result files in bfcl's layouts (V4 <model>/multi_turn/BFCL_v4_*_result.json and
    V3 flat <model>/BFCL_v3_*_result.json), decodes every step with the model's registered
    bfcl handler (or --decoder), replays both sides call by call and applies bfcl's checker.
    Writes bfcl-compatible score files and one JSON line per conversation.

    Exit code: 0 all input usable; 1 scored, but some entries were unreadable, missing or
    undecodable by name; 2 nothing usable.
    """
    if not run_dir.exists():
        err.print(f"[red]error:[/] {run_dir} does not exist")
        raise typer.Exit(EXIT_UNUSABLE)
    by_model, problems = discover(run_dir)
    if model:
        by_model = {m: v for m, v in by_model.items() if m in model}
    if not by_model:
        err.print(f"[red]error:[/] no multi-turn result files (BFCL_v3/v4_multi_turn_*_result"
                  f".json) under {run_dir}")
        raise typer.Exit(EXIT_UNUSABLE)
    out = out or (run_dir if run_dir.is_dir() else run_dir.parent) / "careful-score"
    out.mkdir(parents=True, exist_ok=True)

    loaded = {m: [load_result_file(rf) for rf in files] for m, files in by_model.items()}
    for files in loaded.values():
        for lf in files:
            problems.extend(lf.problems)
    scores: list[ModelScore] = []
    unusable = 0
    total = sum(len(bfcl.conversations(lf.file.category)) for fs in loaded.values() for lf in fs)
    lines_path = out / "conversations.jsonl"
    with _progress() as progress, open(lines_path, "w", encoding="utf-8") as lines:
        task = progress.add_task("scoring", total=total)
        for model_dir, files in loaded.items():
            key = bfcl.registry_key_for_dir(model_dir)
            decoder_key = decoder or manifest_decoder(files[0].file) or key
            handler = None
            if any(needs_decoder(lf) for lf in files):
                try:
                    handler = bfcl.handler(decoder_key)
                except (bfcl.UnknownModel, RuntimeError) as e:
                    msg = e.args[0] if e.args else str(e)
                    err.print(f"[red]error:[/] model folder {model_dir!r}: {msg}")
                    unusable += 1
                    progress.advance(task, sum(len(bfcl.conversations(lf.file.category))
                                               for lf in files))
                    continue
            ms = ModelScore(model_dir, decoder_key if handler else None)
            for lf in files:
                progress.update(task, description=f"{model_dir} {bfcl.SHORT_NAMES[lf.file.category]}")
                cs = score_file(lf, handler, on_entry=lambda: progress.advance(task))
                ms.categories[lf.file.category] = cs
                write_score_file(cs, lf, out)
                for r in cs.results:
                    lines.write(json.dumps(r.to_json()) + "\n")
            scores.append(ms)

    if problems and not quiet:
        _print_problems(problems)
    if scores:
        console.print(_table(scores))
        if not quiet:
            console.print(f"score files and conversations.jsonl written to [bold]{out}[/]")
    if not scores:
        raise typer.Exit(EXIT_UNUSABLE)
    if unusable or any(p for p in problems):
        raise typer.Exit(EXIT_PROBLEMS)


def _print_problems(problems: list) -> None:
    err.print(f"[yellow]{len(problems)} input problem(s):[/]")
    shown = 0
    by_message: dict[str, int] = {}
    for p in problems:
        if p.message.startswith("id missing"):
            by_message[p.file] = by_message.get(p.file, 0) + 1
            continue
        if shown < 25:
            err.print(f"  {p}", markup=False)
        shown += 1
    if shown > 25:
        err.print(f"  ... and {shown - 25} more")
    for file, n in by_message.items():
        err.print(f"  {file}: {n} id(s) missing from the file; counted as failed", markup=False)


@app.command("demo")
def demo_cmd(
    out: Path = typer.Option(Path("runs/reference"), "--out", "-o",
                             help="Where to write the reference run."),
    score_it: bool = typer.Option(True, "--score/--no-score", help="Score the run afterwards."),
) -> None:
    """Write the embedded default run (the reference trajectories in FC format) and score it.

    The run is in bfcl's own V4 layout, with model output equal to the reference, one
    closing text step per turn, decoded by a registered FC decoder; it scores 100 % on
    every category.
    """
    paths = demo.write_reference_run(out)
    console.print(f"wrote {len(paths)} result files under [bold]{out}[/]")
    if score_it:
        score(out, out=out / "careful-score", decoder=None, model=None, quiet=False)


@app.command()
def doctor() -> None:
    """Check the install: the pinned bfcl-eval and no torch / CUDA / faiss stack."""
    from careful_engine import doctor as doc

    raise typer.Exit(doc.main())
