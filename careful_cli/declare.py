"""``careful declare``, ``careful review-sheet``, ``careful audit references`` and
``careful export mcp``: effect declarations (paper §4) and what is built on them.

``careful audit references`` is registered in the audit group of careful_cli/audits.py.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import typer
from rich.progress import Progress
from rich.table import Table

from careful_cli.common import (
    EXIT_PROBLEMS,
    console,
    decoder_choice,
    fail,
    literal,
    progress_bar,
    refuse_out,
    warn,
)
from careful_engine.core import bfcl
from careful_engine.core.safe_read import same_file
from careful_engine.core.safe_write import UnsafeWrite
from careful_engine.effects import audit as audit_mod
from careful_engine.effects import boundary as boundary_mod
from careful_engine.effects import declarations as decl_mod
from careful_engine.effects import mcp as mcp_mod
from careful_engine.effects import review as review_mod
from careful_engine.present.tables import terminal_table

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`
export_app = typer.Typer(name="export", help="Export the declarations in other formats.",
                         no_args_is_help=True, add_completion=False)
app.add_typer(export_app, name="export")

BOUNDARY_HELP = ("Destructive boundary: a name in declarations/boundary/ (else NAME.json in "
                 "the working folder) or a path to a boundary file.")
DECLARATIONS_HELP = "Effect declarations. Default: declarations/effects.json."


DEFAULT_OUT = "effects.json"  # careful declare's output, in the working folder


def _boundary(name: str) -> boundary_mod.Boundary:
    try:
        return boundary_mod.load(name)
    except boundary_mod.BoundaryError as e:
        raise fail(str(e)) from None


def _declarations(path: Path | None) -> decl_mod.Declarations:
    try:
        return decl_mod.load(path)
    except decl_mod.DeclarationsError as e:
        raise fail(str(e)) from None


class _Stages:
    """A rich progress bar (on stderr) per stage of ``careful declare``."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __call__(self, name: str, total: int) -> Callable[[int], None]:
        task = self.progress.add_task(name, total=total)
        return lambda n: self.progress.advance(task, n)


def table2(rows: dict[str, dict[str, int]], boundary: boundary_mod.Boundary) -> Table:
    """The paper's Table 2 layout, within 80 columns."""
    return terminal_table(
        "Effect declarations per simulator class (the paper's Table 2)",
        ["class", "functions", "read", "write", "destr.", "non-idem.", "hidden-only"],
        [[cls, *(str(row[c]) for c in decl_mod.TABLE2_COLUMNS)] for cls, row in rows.items()],
        f"read: read / pure; destr.: destructive under boundary {boundary.name!r} "
        f"({len(boundary.destructive)} functions); read, write and hidden-only exclude it "
        "(so hidden-only here can be below the summary's count of every hidden-only write); "
        "non-idem.: non-idempotent writes (every write counts)",
        first_width=18,
    )


@app.command()
def declare(
    out: Path = typer.Option(None, "--out", "-o", help="Where to write the declarations. "
                             "Default: effects.json in the working folder (the shipped "
                             "declarations/effects.json is written only when named here)."),
    runs: list[Path] = typer.Option(None, "--runs", help="Folders (or result files) of logged "
                                    "runs to observe, instead of the repository's runs/."),
    no_runs: bool = typer.Option(False, "--no-runs", help="Observe references and probes only."),
    decoder: list[str] = typer.Option(None, "--decoder", help="MODEL_DIR=REGISTRY_KEY: decode "
                                      "the result folder MODEL_DIR with this registered bfcl "
                                      "model's decoder (repeatable)."),
    boundary: str = typer.Option(boundary_mod.DEFAULT_BOUNDARY, "--boundary",
                                 help=BOUNDARY_HELP + " Used for the summary table only."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No warnings."),
) -> None:
    """Infer the effect declarations of all 128 functions by state diff and write effects.json.

    Observes every call of the 800 reference trajectories, synthetic probes from sampled
    states, and every decoded call of logged runs (by default the runs under runs/), in bfcl's
    own simulators; infers read/write, hidden-only, idempotence, footprint and the three
    consequence signals. The output is byte-identical for the same inputs.

    Exit code: 0 written; 1 written, but some run files had no usable decoder; 2 nothing
    written.
    """
    bnd = _boundary(boundary)
    choice = decoder_choice(decoder)
    if choice.default is not None:
        raise typer.BadParameter(f"{choice.default!r}: expected MODEL_DIR=REGISTRY_KEY",
                                 param_hint="--decoder")
    decoders = choice.by_folder
    if no_runs and runs:
        raise typer.BadParameter("--runs and --no-runs exclude each other",
                                 param_hint="--no-runs")
    if no_runs:
        roots: list[Path] = []
    elif runs:
        missing = [str(p) for p in runs if not p.exists()]
        if missing:
            raise fail(f"no such run folder: {', '.join(missing)}")
        roots = list(runs)
    else:
        default = decl_mod.default_runs_dir()
        roots = [default] if default.is_dir() else []
    if out is None:
        out = Path(DEFAULT_OUT)
        if same_file(out, decl_mod.default_path()):
            raise fail(f"{DEFAULT_OUT} here is the shipped declarations file; name it with "
                       "--out to regenerate it, or run from another folder")
    refuse_out(out, file=True)
    start = time.perf_counter()
    with progress_bar() as progress:
        generated = decl_mod.generate(roots, decoders, progress=_Stages(progress))
    try:
        path = decl_mod.write(generated.document, out)
    except UnsafeWrite as e:
        raise fail(str(e)) from None
    elapsed = time.perf_counter() - start
    doc = generated.document
    rows = decl_mod.table2(doc["functions"], bnd)
    if not quiet:
        for w in generated.warnings:
            warn(w)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if json_out:
        print(json.dumps({
            "output": str(path),
            "sha256": digest,
            "content_sha256": doc["content_sha256"],
            "seconds": round(elapsed, 1),
            "summary": doc["summary"],
            "table2": rows,
            "boundary": bnd.name,
            "sources": {
                "references": doc["sources"]["references"],
                "probes": {k: v for k, v in doc["sources"]["probes"].items()},
                "runs": doc["sources"]["runs"]["total"],
                "run_files": len(doc["sources"]["runs"]["files"]),
            },
            "warnings": generated.warnings,
        }, indent=2, sort_keys=True))
    else:
        console.print(table2(rows, bnd))
        src = doc["sources"]
        console.print(
            f"{decl_mod.summary_text(doc)}.\n"
            f"observations: {src['references']['observations']} from {src['references']['calls']}"
            f" reference calls, {src['probes']['observations']} from {src['probes']['calls']} "
            f"probe calls ({src['probes']['successful']} successful), "
            f"{src['runs']['total']['observations']} from {src['runs']['total']['calls']} calls "
            f"in {len(src['runs']['files'])} run file(s) "
            f"({src['runs']['total']['nonexistent_function_calls']} calls to functions that do "
            "not exist)")
        console.print(f"wrote [bold]{literal(str(path))}[/] (sha256 {digest[:12]}) in "
                      f"{elapsed:.1f} s")
        if not same_file(path, decl_mod.default_path()):
            console.print(f"score with it: --declarations {literal(str(path))} (score, "
                          "leaderboard, compare, sensitivity); the shipped "
                          "declarations/effects.json is unchanged")
    if generated.skipped:
        raise typer.Exit(EXIT_PROBLEMS)


@app.command("review-sheet")
def review_sheet(
    declarations: Path = typer.Option(None, "--declarations", "-d", help=DECLARATIONS_HELP),
    out: Path = typer.Option(None, "--out", "-o", help="Base path: writes BASE.md and "
                             "BASE.csv. Default: declarations/review_sheet."),
) -> None:
    """Write the annotators' review sheet (Markdown and CSV) from the declarations.

    Per function: its doc, inferred kind, idempotence with evidence, footprint, signals, one
    or two example diffs and where the simulator method's source lives. The sheet carries no
    boundary label, so it can be given to blind annotators.
    """
    decl = _declarations(declarations)
    try:
        md, cs = review_mod.write_sheet(decl, out)
    except UnsafeWrite as e:
        raise fail(str(e)) from None
    console.print(f"wrote [bold]{literal(str(md))}[/] and [bold]{literal(str(cs))}[/] "
                  f"({len(decl.functions)} functions)")


_AUDIT_ROWS = (
    ("conversations", "conversations"),
    ("turns", "turns"),
    ("reference_calls", "reference calls"),
    ("destructive_calls", "  destructive"),
    ("other_write_calls", "  other writes"),
    ("read_calls", "  reads (hidden-only writes included)"),
    ("turns_with_destructive_call", "turns with a destructive call"),
    ("turns_with_write", "turns with some write"),
    ("turns_without_call", "turns that expect no call"),
    ("functions_used", "functions used"),
)


def audit_references(
    declarations: Path = typer.Option(None, "--declarations", "-d", help=DECLARATIONS_HELP),
    boundary: str = typer.Option(boundary_mod.DEFAULT_BOUNDARY, "--boundary", help=BOUNDARY_HELP),
    category: list[str] = typer.Option(None, "--category", "-c", help="Only these categories "
                                       "(base, miss_func, miss_param, long_context)."),
    json_out: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """The reference trajectories under the declarations and a boundary (paper §3).

    Reference calls split into destructive calls (functions in the boundary), other writes
    and reads; hidden-only writes (cd) count with the reads, since bfcl never sees their
    effect. Turns that make a destructive call, some write, or no call; functions used.
    """
    decl = _declarations(declarations)
    bnd = _boundary(boundary)
    cats = []
    for c in category or []:
        full = bfcl.category_named(c)
        if full is None:
            raise typer.BadParameter(f"unknown category {c!r}; choose one of "
                                     f"{bfcl.CATEGORY_NAMES_HELP}", param_hint="--category")
        cats.append(full)
    result = audit_mod.audit_references(decl, bnd, cats or bfcl.CATEGORIES)
    if json_out:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    table = Table(title=f"Reference trajectories under boundary {literal(repr(bnd.name))} "
                  f"({len(bnd.destructive)} functions)")
    table.add_column("")
    names = list(result["categories"])
    for name in names:
        table.add_column(bfcl.SHORT_NAMES[name], justify="right")
    table.add_column("total", justify="right", style="bold")
    for key, label in _AUDIT_ROWS:
        table.add_row(label, *(str(result["categories"][n][key]) for n in names),
                      str(result["total"][key]))
    hidden = result["hidden_only_counted_as_reads"]
    if hidden:
        calls = result["total"]["read_calls_to_hidden_only_writes"]
        table.caption = ("reads include calls to hidden-only writes: "
                         + ", ".join(f"{n} ({calls.get(n, 0)})" for n in hidden))
    console.print(table)
    console.print(f"{result['total']['functions_used']} of {result['functions_total']} "
                  "functions are used by the references")


@export_app.command("mcp")
def export_mcp(
    declarations: Path = typer.Option(None, "--declarations", "-d", help=DECLARATIONS_HELP),
    boundary: str = typer.Option(boundary_mod.DEFAULT_BOUNDARY, "--boundary", help=BOUNDARY_HELP),
    out: Path = typer.Option(None, "--out", "-o", help="Output file. Default: "
                             "declarations/mcp_tools.json; '-' prints to stdout."),
) -> None:
    """Write the 128 functions as MCP tools with annotations (readOnlyHint, destructiveHint,
    idempotentHint, openWorldHint), from the declarations and a boundary."""
    decl = _declarations(declarations)
    bnd = _boundary(boundary)
    doc = mcp_mod.export(decl, bnd)
    if out is not None and str(out) == "-":
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    try:
        path = mcp_mod.write(doc, out or mcp_mod.default_path())
    except UnsafeWrite as e:
        raise fail(str(e)) from None
    tools = doc["tools"]
    read_only = sum(t["annotations"]["readOnlyHint"] for t in tools)
    destructive = sum(t["annotations"]["destructiveHint"] and not t["annotations"]["readOnlyHint"]
                      for t in tools)
    console.print(f"wrote [bold]{literal(str(path))}[/]: {len(tools)} tools, {read_only} "
                  f"read-only, {destructive} destructive (boundary {bnd.name!r})")
