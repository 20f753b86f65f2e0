"""``careful demo``: the reference run and a SYNTHETIC flawed run, written and scored side by side."""

from __future__ import annotations

from pathlib import Path

import typer

from careful_cli.common import (
    EXIT_PROBLEMS,
    EXIT_UNUSABLE,
    command_name,
    console,
    err,
    literal,
    refuse_out,
    scoring_progress,
    visible,
)
from careful_engine.analysis import leaderboard as lb
from careful_engine.core.figures import figure_text
from careful_engine.demo import reference as demo
from careful_engine.demo.summary import first_look, surplus_share
from careful_engine.present.compare import paired_terminal
from careful_engine.present.leaderboard import leaderboard_terminal
from careful_engine.present.outputs import write_outputs
from careful_engine.present.tables import accuracy_terminal
from careful_engine.scoring.outputs import SCORE_DIR
from careful_engine.scoring.score import load_effects

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`


@app.command("demo")
def demo_cmd(
    out: Path = typer.Option(Path("runs/reference"), "--out", "-o",
                             help="Where to write the reference run."),
    flawed_out: Path = typer.Option(None, "--flawed-out", help="Where to write the SYNTHETIC "
                                    "flawed run. Default: demo-flawed beside --out."),
    score_it: bool = typer.Option(True, "--score/--no-score", help="Score both runs afterwards."),
    force: bool = typer.Option(False, "--force", help="Write into --out (or --flawed-out) even "
                               "if it is a folder that already holds files (a folder holding "
                               "only an earlier careful demo's run is written over without "
                               "it)."),
) -> None:
    """Write two runs in bfcl's V4 layout and score them side by side.

    The reference run is the 800 reference trajectories as a model's FC output (100 % on
    every category, no rule hit). The flawed run (model folder SYNTHETIC-demo-flawed) is
    SYNTHETIC: the same references with one realistic flaw each in about a third of the
    conversations, chosen with a fixed seed (careful_engine/demo/flaws.py); its careful_run.json
    says which flaw went where, and why. Both manifests name the decoder, so `careful score`
    and `careful workbench` need no flags. Prints both rows of the leaderboard, the paired
    comparison, the rule counts and where to look first in the workbench.

    Exit code: 0 done; 1 scored with problems; 2 the runs could not be written or scored.
    """
    flawed_out = flawed_out or out.parent / demo.FLAWED_DIR
    for folder, option in ((out, "--out"), (flawed_out, "--flawed-out")):
        refuse_out(folder, option=option)  # (a link first: resolved, it names another folder)
    ref, flawed = out.resolve(), flawed_out.resolve()
    if ref == flawed:
        err.print("error: --out and --flawed-out are the same folder")
        raise typer.Exit(EXIT_UNUSABLE)
    if ref in flawed.parents or flawed in ref.parents:  # one run written into the other
        inner = "--flawed-out" if ref in flawed.parents else "--out"
        outer = "--out" if inner == "--flawed-out" else "--flawed-out"
        err.print(f"error: {inner} is inside {outer}; give two separate folders",
                  markup=False)
        raise typer.Exit(EXIT_UNUSABLE)
    for folder, flawed_run in ((out, False), (flawed_out, True)):
        if not force and folder.is_dir() and any(folder.iterdir()) \
                and not demo.earlier_demo(folder, flawed_run):
            err.print(f"[red]error:[/] {literal(folder)} is not empty (nor only an earlier "
                      "careful demo's run); choose another folder or add --force")
            raise typer.Exit(EXIT_UNUSABLE)
    try:
        demo.write_reference_run(out)
        demo.write_flawed_run(flawed_out)
    except OSError as e:  # a link planted where a file goes, a folder that cannot be made
        err.print(f"error: cannot write the demo runs: {visible(e)}", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None
    if not score_it:
        console.print(f"wrote {literal(str(out))} and {literal(str(flawed_out))} (SYNTHETIC)")
        return

    effects = load_effects()
    with scoring_progress(elapsed=False) as callbacks:
        scored = lb.score_runs([out, flawed_out], effects=effects, **callbacks)
    try:
        for run_dir, run in scored.runs:
            write_outputs(run, run_dir / SCORE_DIR, effects)
    except OSError as e:  # a link planted in the score folder
        err.print(f"error: cannot write the scores: {visible(e)}", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None
    if len(scored.entries) != 2:
        for msg in [*scored.unusable, *map(str, scored.problems)]:
            err.print(visible(msg), markup=False)
        raise typer.Exit(EXIT_UNUSABLE)
    summary(scored.entries[0], scored.entries[1], flawed_out)
    if scored.problems or scored.unusable:
        for msg in [*scored.unusable, *map(str, scored.problems)]:
            err.print(visible(msg), markup=False)
        raise typer.Exit(EXIT_PROBLEMS)


def summary(ref: lb.Entry, flawed: lb.Entry, flawed_out: Path) -> None:
    """Under a screen: the runs, both leaderboard rows, the paired comparison, the rule totals
    and the conversation to open first."""
    manifest = demo.manifest(flawed_out / flawed.model)
    placed = manifest.get("conversations") or {}
    n = sum(cs.total for cs in flawed.score.categories.values())
    console.print(f"[bold]careful demo[/]: {literal(str(ref.run))} = the reference trajectories; "
                  f"{literal(str(flawed.run))} = [reverse bold] SYNTHETIC [/] (no model wrote it): "
                  f"{len(placed)} of {n} conversations got one flaw each, seed "
                  f"{manifest.get('seed')}, listed in "
                  f"{literal(str(flawed_out / flawed.model / demo.MANIFEST))}")
    console.print(accuracy_terminal([ref.score, flawed.score], effect=True,
                                    labels=[ref.label, flawed.label]))  # as the rows below
    console.print(paired_terminal(ref.label, ref.score, flawed.label, flawed.score))
    rules = leaderboard_terminal([ref, flawed])[2]
    legend, rules.caption = rules.caption, None  # the leaderboard's legend, the screen wide
    console.print(rules)
    console.print(legend)
    share = surplus_share(flawed.score)
    if share is not None:
        console.print(f"Surplus steps (all calls beyond the reference) cost "
                      f"{figure_text(share[0])} % of output and {figure_text(share[1])} % of "
                      "input tokens.")
    first = first_look(flawed.score, placed)
    console.print(f"Next: [bold]{literal(command_name())} workbench {literal(str(ref.run))} "
                  f"{literal(str(flawed.run))}[/] (4 Replay, r next run, Ctrl+P find)")
    if first is not None:
        cid, why = first
        console.print(f"  open {literal(cid)} first (BFCL passes it, effect safety does not): "
                      f"{literal(why)}")
