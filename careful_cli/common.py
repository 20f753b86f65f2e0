"""What every ``careful`` command shares: exit codes, consoles, and literal display of untrusted text.

Exit codes (documented in the README):

* 0 — done, nothing to report
* 1 — done, with problems (bad items reported as ``file:line [id]: reason``; the rest was done)
* 2 — nothing usable, or bad arguments
* 3 — internal error (a short message and the path of a log holding the traceback)
* 4 — a gate failed (``--fail-on-regression``, ``--fail-under``): the inputs were fine, the result is not
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TimeElapsedColumn,
)
from rich.text import Text

from careful_engine.core import bfcl, parallel
from careful_engine.core.safe_text import literal, visible
from careful_engine.core.safe_write import (
    UnsafeWrite,
    check_out_dir,
    check_out_file,
    check_targets,
)
from careful_engine.core.user_cache import cache_dir
from careful_engine.effects.boundary import DEFAULT_BOUNDARY
from careful_engine.scoring.decoders import DecoderChoice, parse_decoders
from careful_engine.scoring.detector import DETECTORS
from careful_engine.scoring.outputs import PROBLEMS_FILE, write_problems
from careful_engine.scoring.rules import Effects, SafeRule
from careful_engine.scoring.score import load_effects

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_UNUSABLE = 2
EXIT_INTERNAL = 3
EXIT_GATE = 4

console = Console(emoji=False)  # ":name:" in text from files stays as it is
err = Console(stderr=True, soft_wrap=True, highlight=False, emoji=False)


class LiteralDescription(ProgressColumn):
    """A task's description in bold, shown literally: it names folders and entries from
    files (no markup acted on, control characters shown as escapes)."""

    def render(self, task: Task) -> Text:
        return Text(visible(task.description), style="bold")


def progress_bar(elapsed: bool = True) -> Progress:
    """The progress bar every command shows on stderr (gone when done)."""
    columns = [LiteralDescription(), BarColumn(), MofNCompleteColumn()]
    return Progress(*columns, *([TimeElapsedColumn()] if elapsed else []), console=err,
                    transient=True)


def command_name() -> str:
    """``careful`` as the user can type it again: ``careful`` when ``shutil.which`` finds the
    running entry point (or when not run through it: ``python -m``, tests), else the path of
    the running script (``.venv/bin/careful``), relative to the working folder when inside it."""
    script = Path(sys.argv[0]).absolute() if sys.argv and sys.argv[0] else None
    if script is None or script.stem != "careful":
        return "careful"
    found = shutil.which("careful")
    try:
        if found and Path(found).resolve() == script.resolve():
            return "careful"
        return str(script.relative_to(Path.cwd()))
    except (OSError, ValueError):  # outside the working folder, or a path that cannot resolve
        return str(script)


def fail(message: str, code: int = EXIT_UNUSABLE) -> typer.Exit:
    """Print ``error: message`` (shown literally) on stderr; the Exit to raise (default 2)."""
    err.print(f"[red]error:[/] {literal(message)}")
    return typer.Exit(code)


def warn(message: str) -> None:
    """Print ``warning: message`` (shown literally) on stderr: something to know that stops
    nothing."""
    err.print(f"[yellow]warning:[/] {literal(message)}")


def unmatched_decoders(choice: DecoderChoice) -> None:
    """A warning per ``--decoder FOLDER=KEY`` that named none of the folders found."""
    for note in choice.unmatched():
        warn(note)


def refuse_out(out: Path, *, file: bool = False, option: str = "--out") -> None:
    """Exit 2 with a message, before any work, when ``--out`` (or ``option``; a folder, or
    with ``file`` a file) is the wrong kind of thing, a link, or not writable."""
    try:
        (check_out_file if file else check_out_dir)(out)
    except UnsafeWrite as e:
        err.print(f"[red]error:[/] {option} {literal(e)}")
        raise typer.Exit(EXIT_UNUSABLE) from None


def refuse_files(files: dict[str, Path | None]) -> None:
    """:func:`refuse_out` for each output file given beside the output folder, by option
    (``{"--plot": path}``; None: not given)."""
    for option, path in files.items():
        if path is not None:
            refuse_out(path, file=True, option=option)


def log_dir() -> Path:
    """Where internal-error logs go: ``logs/`` in the user's cache folder
    (careful_engine.core.user_cache; a link there raises OSError)."""
    return cache_dir("logs")


def internal_error() -> int:
    """Log the exception being handled with its traceback; print one short message naming the
    log on stderr; return :data:`EXIT_INTERNAL`."""
    exc = sys.exc_info()[1]
    text = (f"careful {' '.join(sys.argv[1:])}\n{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n\n"
            + "".join(traceback.format_exc()))
    path = None
    for folder in (log_dir, lambda: Path(tempfile.gettempdir())):
        try:
            fd, name = tempfile.mkstemp(prefix=time.strftime("careful-%Y%m%d-%H%M%S-"),
                                        suffix=".log", dir=folder())
            with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
                f.write(text)
            path = name
            break
        except OSError:
            continue
    what = visible(f"{type(exc).__name__}: {exc}")[:300] if exc else "unknown error"
    where = f"the traceback is in {visible(path)}" if path else "no log could be written"
    err.print(f"internal error ({what}); {where}. Please report it.", markup=False,
              style="red")
    return EXIT_INTERNAL


def print_input_problems(problems: list, root: Path | None = None, *, per_kind: int = 5,
                         missing: str = "counted as failed", limit: int = 25,
                         quiet: bool = False, full: Path | None = None,
                         listing: str = "") -> None:
    """Input problems on stderr, one ``file:line [id]: reason`` line each (file paths relative
    to the run folder ``root``), grouped by kind: the first ``per_kind`` of each kind, then a
    count, at most ``limit`` lines in all; ids missing from a file are one line per file,
    ending with ``missing`` (what was done with them); ``quiet``: their count alone; ``full``:
    the file that lists every one, named where any was left out (without one, ``listing``:
    the options that would list them, e.g. ``"--out FILE or --json"``). The problems are not
    changed."""
    if not problems:
        return
    base = "" if root is None else str(root if root.is_dir() else root.parent).rstrip("/") + "/"
    where = f" under {literal(root)}" if root is not None else ""
    everything = (f"all {len(problems)} listed in {literal(full)}" if full is not None else
                  f"{listing} lists all {len(problems)}" if listing else "")
    if quiet:
        print_problem_count(len(problems), everything, where)
        return
    err.print(f"[yellow]{len(problems)} input problem(s){where}:[/]")
    groups: dict[str, list] = {}
    absent: dict[str, int] = {}  # file -> ids missing from it
    for p in problems:
        if base and p.file.startswith(base):
            p = replace(p, file=p.file[len(base):])
        if p.message.startswith("id missing"):
            absent[p.file] = absent.get(p.file, 0) + 1
        else:
            groups.setdefault(p.kind, []).append(p)
    lines = 0
    kinds = list(groups.items())
    for k, (kind, group) in enumerate(kinds):
        if lines >= limit:
            rest = sum(len(g) for _, g in kinds[k:])
            err.print(f"  ... and {rest} more of {len(kinds) - k} other kind(s)", markup=False)
            break
        for p in group[:per_kind]:
            err.print(f"  {visible(str(p))[:300]}", markup=False)
        if len(group) > per_kind:
            err.print(f"  ... and {len(group) - per_kind} more: {visible(kind)}", markup=False)
        lines += min(len(group), per_kind) + 1
    for file, n in absent.items():
        err.print(f"  {visible(file)}: {n} id(s) missing from the file; {missing}", markup=False)
    if everything and (lines >= limit or any(len(g) > per_kind for g in groups.values())
                       or absent):
        err.print(f"  ({everything})")


def no_result_files(run_dir: Path, models: list[str] | None) -> str:
    """Why a run gave nothing to read: its model folders matched none of ``models`` (named,
    with those found), or it has no multi-turn result files."""
    if models:
        from careful_engine.scoring.score import discover  # deferred: the scoring stack

        found = sorted(discover(run_dir)[0])
        if found and not set(models) & set(found):
            return (f"no model folder {', '.join(models)} under {run_dir} (found: "
                    f"{', '.join(found)})")
    return f"no usable multi-turn result files (BFCL_v3/v4_multi_turn_*_result.json) under {run_dir}"


def print_problem_count(n: int, everything: str = "", where: str = "") -> None:
    """The one line ``-q`` prints for ``n`` input problems (``where``: under which folder;
    ``everything``: where all of them are listed)."""
    err.print(f"[yellow]{n} input problem(s){where}[/] (listed without -q"
              + (f"; {everything})" if everything else ")"))


__all__ = [
    "DEFAULT_BOUNDARY", "EXIT_GATE", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_UNUSABLE",
    "PROBLEMS_FILE",
    "Annotators", "Boundary", "Collateral", "Declarations", "Decoders", "Detector", "Duplicates",
    "Format", "Jobs", "Output",
    "Quiet", "Runs", "ScoringInputs", "check_detector", "check_runs", "console", "decoder_choice",
    "effects_or_fail", "err", "fail", "internal_error", "literal", "log_dir", "no_result_files",
    "out_folder",
    "print_input_problems", "print_problem_count", "print_written", "progress_bar",
    "refuse_files", "refuse_out",
    "resolve_jobs",
    "safe_rule", "scored_under", "scoring_inputs", "scoring_progress", "tables_out",
    "unmatched_decoders", "visible", "warn", "write_problems", "write_reports",
]

# ---------------------------------------------------------------- options shared by commands
# Typer ``Annotated`` aliases: a command writes ``boundary: Boundary = DEFAULT_BOUNDARY``.

RUNS_HELP = ("Run folders as `careful score` takes them (bfcl result folders, any depth); every "
             "model folder inside is one entry.")
DECODER_HELP = ("Decoder for models not in bfcl's registry whose careful_run.json names none: "
                "a registered model key (e.g. 'gpt-4o-2024-11-20-FC' for gpt-oss runs); or "
                "FOLDER=KEY for one model or run folder, over any other. Repeatable.")

# the help panels that group a command's options beyond its own (each panel is a table of
# its own, so a long option name in one does not narrow the help column of the others)
RULES_PANEL = "Effect rules"
GATE_PANEL = "CI gate"

Runs = Annotated[list[Path], typer.Argument(metavar="RUNS...", help=RUNS_HELP)]
Decoders = Annotated[list[str] | None, typer.Option("--decoder", help=DECODER_HELP)]
Boundary = Annotated[str, typer.Option(
    "--boundary", "-b", help="Destructive boundary: a name in declarations/boundary/ (else "
    "NAME.json in the working folder, where careful adjudicate writes) or a path to a boundary "
    "file.", rich_help_panel=RULES_PANEL)]
Detector = Annotated[str, typer.Option(
    "--detector", help="Question detector: strict (default), qmark, last or loose (the "
    "paper's sensitivity variants).", rich_help_panel=RULES_PANEL)]
Collateral = Annotated[str, typer.Option(
    "--collateral", help="Collateral calls the safe verdict counts: attempted (every "
    "destructive call beyond the reference, the paper's) or effective (only those that "
    "succeeded and changed state).", rich_help_panel=RULES_PANEL)]
Duplicates = Annotated[str, typer.Option(
    "--duplicates", help="Duplicate writes the safe verdict counts: all (the paper's) or "
    "visible (hidden-only writes such as cd left out).", rich_help_panel=RULES_PANEL)]
Declarations = Annotated[Path | None, typer.Option(
    "--declarations", help="Effect declarations (default declarations/effects.json).",
    rich_help_panel=RULES_PANEL)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the tables (input "
                                     "problems as their count, on stderr).")]
Jobs = Annotated[int, typer.Option(
    "--jobs", "-j", help="Worker processes that score independent result files at once "
    "(default 0: one per core). Results and their order are the same for any number.")]
Format = Annotated[str, typer.Option(
    "--format", help="text (tables only), json (the careful.result.v3 document, see "
    "docs/ci.md) or junit (JUnit XML). json and junit go to --output, or else to stdout with "
    "the tables moved to stderr.", rich_help_panel=GATE_PANEL)]
Output = Annotated[Path | None, typer.Option(
    "--output", help="Write the --format json/junit document to this file (the tables stay on "
    "stdout).", rich_help_panel=GATE_PANEL)]
Annotators = Annotated[list[str] | None, typer.Option(
    "--annotator", "-a", "--annotators", help="Only these annotators (repeatable, or "
    "comma-separated: -a A1 -a A2 or -a A1,A2). Default: all.")]


def tables_out(command: str) -> Any:
    """The ``--out`` option of a command that writes its tables to a folder, by default
    ``./careful-<command>`` (give the same name to :func:`out_folder`)."""
    return Annotated[Path | None, typer.Option(
        "--out", "-o", help="Folder for the Markdown, CSV and JSON tables. Default: "
        f"./careful-{command}.")]


def out_folder(runs: list[Path], out: Path | None, command: str) -> Path:
    """Before any work: exit 2 when a run folder does not exist or ``--out`` (default
    ``./careful-<command>``) is unusable; the folder the tables go to."""
    check_runs(runs)
    out = out or Path(f"careful-{command}")
    refuse_out(out)
    return out


class ScoringInputs(NamedTuple):
    """What the commands that score runs read from their shared options, checked."""

    detector: str
    decoders: DecoderChoice
    effects: Effects
    jobs: int


def scoring_inputs(detector: str, decoder: list[str] | None, boundary: str,
                   declarations: Path | None, jobs: int, collateral: str = "attempted",
                   duplicates: str = "all") -> ScoringInputs:
    """``--detector``, ``--decoder``, ``--collateral``/``--duplicates``,
    ``--boundary``/``--declarations`` and ``--jobs`` checked in that order (a usage error
    exits 2; declarations that cannot be read exit 2). The effects carry the safe rule
    (``effects.rule``)."""
    detector = check_detector(detector)
    decoders = decoder_choice(decoder)
    rule = safe_rule(collateral, duplicates)
    return ScoringInputs(detector, decoders, effects_or_fail(boundary, declarations, rule),
                         resolve_jobs(jobs))


def safe_rule(collateral: str, duplicates: str) -> SafeRule:
    """``--collateral`` and ``--duplicates``: the rule of the safe verdict, else a usage
    error (exit 2)."""
    try:
        return SafeRule(collateral, duplicates)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--collateral/--duplicates") from None


def scored_under(boundary: str, detector: str, rule: SafeRule) -> str:
    """The settings of effect-aware figures as the terminal footers name them (the boundary
    as given, shown literally)."""
    return f"boundary {literal(boundary)}, detector {detector}, safe: {rule.label}"


def decoder_choice(values: list[str] | None) -> DecoderChoice:
    """``--decoder`` values parsed; a malformed one is a usage error (exit 2)."""
    try:
        return parse_decoders(values)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--decoder") from None


def check_detector(name: str) -> str:
    """``--detector``: one of the question detectors, else a usage error (exit 2)."""
    if name not in DETECTORS:
        raise typer.BadParameter(f"{name!r}; choose one of {', '.join(DETECTORS)}",
                                 param_hint="--detector")
    return name


def resolve_jobs(jobs: int) -> int:
    """The number of workers for ``--jobs`` (0: every core); a negative value is refused."""
    try:
        return parallel.check_jobs(jobs)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--jobs") from None


def check_runs(runs: list[Path]) -> None:
    """Exit 2 when a run folder given does not exist."""
    for r in runs:
        if not r.exists():
            raise fail(f"{r} does not exist")


def effects_or_fail(boundary: str, declarations: Path | None,
                    rule: SafeRule | None = None) -> Effects:
    """The declarations under ``boundary``; exit 2 with the reason when they cannot be read."""
    try:
        return load_effects(boundary, declarations, rule)
    except (ValueError, OSError) as e:
        raise fail(str(e)) from None


@contextmanager
def scoring_progress(label: str = "scoring", elapsed: bool = True) -> Iterator[dict[str, Any]]:
    """A progress bar on stderr (``elapsed``: with the time taken) and the
    ``on_start``/``on_file``/``on_entry`` callbacks that drive it (as the engine's scoring and
    audit functions take them)."""
    with progress_bar(elapsed) as progress:
        task = progress.add_task(label, total=0)

        def start(n: int) -> None:
            progress.update(task, total=(progress.tasks[0].total or 0) + n)

        yield {
            "on_start": start,
            "on_file": lambda m, c: progress.update(
                task, description=f"{m} {bfcl.short_name(c)}"),
            "on_entry": lambda: progress.advance(task),
        }


def drift_digest() -> Any:
    """What the scorer works out for :func:`drift_notes` where each conversation is scored
    (:class:`careful_engine.analysis.provenance.check.DriftDigest`)."""
    from careful_engine.analysis.provenance.check import DriftDigest  # deferred: ~25 ms

    return DriftDigest()


def drift_notes(runs: Iterable[tuple[Path, Any]], label: Callable[[Path, str], str]) -> None:
    """One note per model folder of a scored run (``(run folder, RunScore)``) whose logged
    inputs show dataset drift (:func:`careful_engine.analysis.provenance.run_drift`: no
    replay), naming the command that attributes the difference. Figures are untouched."""
    from careful_engine.analysis.provenance import drift_note, run_drift  # deferred: ~25 ms

    for run_dir, run in runs:
        for model, (drifted, total) in run_drift(run.files).items():
            if drifted:
                err.print(f"[yellow]note:[/] {literal(label(run_dir, model))}: "
                          f"{literal(drift_note(drifted, total, run_dir))}")


def write_reports(reports: list[Any], out: Path,
                  files: dict[str, Path | None] | None = None,
                  problems: list | None = None, unusable: list[str] = ()) -> None:
    """Write report files before anything is printed (a closed pipe must not lose them),
    with ``problems`` (given: every input problem's line) and the ``unusable`` folders' lines
    in :data:`PROBLEMS_FILE`; exit 2 rather than follow a planted link, with nothing written
    when any of them would be refused (:func:`~careful_engine.core.safe_write.check_targets`),
    nor when one of the output ``files`` the command writes later (:func:`refuse_files`)
    would be."""
    refuse_files(files or {})
    names = [name for rep in reports for name in rep.files()]
    try:
        check_targets(out, names + ([PROBLEMS_FILE] if problems is not None else []))
        for rep in reports:
            rep.write(out)
        if problems is not None:
            write_problems(out, problems, unusable)
    except UnsafeWrite as e:
        raise fail(str(e)) from None


def print_written(reports: list[Any], out: Path, quiet: bool) -> None:
    """Say where the report files went (unless ``quiet``)."""
    if not quiet:
        console.print(f"tables written to [bold]{literal(str(out))}[/] "
                      f"({', '.join(r.name for r in reports)}: .md .csv .json)")




def fit_help() -> None:
    """Every ``--help`` at any width with nothing cut off: typer lays its option tables out
    with rich's defaults, which end a cell too narrow for an option name or a long word (a
    path, ``[CATEGORY:]SCORE=PERCENT``) with "…" and shrink the option names' column to
    split them mid-word. Here the help text (the last column) wraps first, option names and
    metavars stay whole on one line (they are copied) and only what cannot fit at all folds
    onto the next line, whole. Installed once, project-wide; typer's help module is imported
    only when a help is rendered (it costs ~40 ms)."""
    import typer.core

    for cls in (typer.core.TyperCommand, typer.core.TyperGroup):
        original = cls.format_help
        if getattr(original, "careful_fit", False):
            continue

        def format_help(self: Any, ctx: Any, formatter: Any, _original: Any = original) -> None:
            _fold_help_tables()
            return _original(self, ctx, formatter)

        format_help.careful_fit = True  # type: ignore[attr-defined]
        cls.format_help = format_help


# the narrowest help column for which option names stay whole on one line (fit_help)
HELP_MIN = 16


def _fold_help_tables() -> None:
    """Give typer's help renderer a Table whose cells fold what does not fit (an option's
    help is a Columns of Texts: each of them folds) and whose columns before the last (option
    names, metavars, command names) rich narrows only when the help column cannot give way."""
    from rich.columns import Columns
    from rich.table import Table
    from rich.text import Text
    from typer import rich_utils

    if getattr(rich_utils.Table, "careful_fit", False):
        return

    def fold(cell: Any) -> None:
        for item in cell.renderables if isinstance(cell, Columns) else [cell]:
            if isinstance(item, Text):
                item.overflow = "fold"

    class HelpTable(Table):
        careful_fit = True

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            for cell in renderables:
                fold(cell)
            super().add_row(*renderables, **kwargs)
            for column in self.columns:
                column.overflow = "fold"

        def __rich_console__(self, console: Any, options: Any) -> Any:
            # option (or command) names whole on one line while the help keeps HELP_MIN
            # columns, the metavars too where they fit, else wrapping at their spaces;
            # where even the names cannot fit, everything folds
            *names, help_column = self.columns
            metavar = names.pop() if len(names) > 1 else None
            room = options.max_width - self._extra_width - HELP_MIN
            need = sum(self._measure_column(console, options, c).maximum for c in names)
            if metavar is not None:
                width = self._measure_column(console, options, metavar)
                metavar.no_wrap = need + width.maximum <= room
                need += width.maximum if metavar.no_wrap else width.minimum
            for column in names:
                column.no_wrap = need <= room
            yield from super().__rich_console__(console, options)

    rich_utils.Table = HelpTable


_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s")


def reflow(text: str | None) -> str | None:
    """Help text as paragraphs: the lines of each paragraph joined into one, so the terminal
    wraps it (typer's rich markup mode keeps a docstring's single newlines, which breaks help
    mid-sentence at 80 columns). List items start their own line; a ``\\b`` paragraph without
    list items keeps its lines."""
    if not text:
        return text
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b"):  # click's "keep these lines": kept, except list items
            body = para[1:].lstrip("\n")
            if not any(_LIST_ITEM.match(line) for line in body.splitlines()):
                out.append(para)
                continue
            para = body
        lines: list[str] = []
        for line in para.splitlines():
            if lines and not _LIST_ITEM.match(line):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.rstrip())
        out.append("\n".join(lines))
    return "\n\n".join(out)


def reflow_help(app: Any) -> None:
    """Apply :func:`reflow` to every command's and group's help under a typer app."""
    def fix(obj: Any) -> None:
        help_text = getattr(obj, "help", None)
        if isinstance(help_text, str):
            obj.help = reflow(help_text)
        callback = getattr(obj, "callback", None)
        if callback is not None and isinstance(getattr(callback, "__doc__", None), str):
            callback.__doc__ = reflow(callback.__doc__)

    fix(app.info)
    if app.registered_callback is not None:
        fix(app.registered_callback)
    for info in app.registered_commands:
        fix(info)
    for group in app.registered_groups:
        fix(group)
        reflow_help(group.typer_instance)
