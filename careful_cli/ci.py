"""The CI options that ``careful score`` and ``careful compare`` share (docs/ci.md): gate
options parsed into careful_engine.analysis.gates, ``--format``/``--output``, the step summary, and the
exit code.

Exit code precedence: 2 (bad arguments, nothing usable, or the --output file could not be
written) wins; then 4 (a gate failed); then 1 (done, with input problems); else 0.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from careful_cli.common import EXIT_GATE, EXIT_OK, EXIT_PROBLEMS, EXIT_UNUSABLE, err
from careful_engine.analysis import ci_report
from careful_engine.analysis import gates as gates_mod
from careful_engine.core.safe_text import visible
from careful_engine.core.safe_write import write_text


def check_format(fmt: str) -> str:
    if fmt not in ci_report.FORMATS:
        raise typer.BadParameter(f"{fmt!r}; choose one of {', '.join(ci_report.FORMATS)}",
                                 param_hint="--format")
    return fmt


def route_tables(console: Console, fmt: str, output: Path | None) -> None:
    """With a document on stdout, print the tables on stderr (until the command ends)."""
    if fmt == "text" or output is not None:
        return
    ctx = _context()
    if ctx is None:  # called outside a command: nothing would restore stdout
        return
    console.file = sys.stderr
    ctx.call_on_close(lambda: setattr(console, "file", None))


def _context() -> Any:
    """The running command's context (typer >= 0.20 vendors click as typer._click)."""
    for name in ("typer._click.globals", "click.globals"):
        try:
            ctx = importlib.import_module(name).get_current_context(silent=True)
        except ImportError:
            continue
        if ctx is not None:
            return ctx
    return None


def document_file(fmt: str, output: Path | None) -> dict[str, Path | None]:
    """The ``--output`` file :func:`finish` writes (none with ``--format text``), for
    :func:`careful_cli.common.refuse_files` to check before anything is written."""
    return {"--output": output if fmt != "text" else None}


def parse_all(values: list[str] | None, parse: Callable[[str], Any], hint: str) -> list[Any]:
    """Parse repeated gate options; a bad one is a usage error (exit 2) naming it."""
    out = []
    for v in values or []:
        try:
            out.append(parse(v))
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint=hint) from None
    return out


def finish(gate: gates_mod.Gate, problems: bool, fmt: str, output: Path | None,
           build: Callable[[int], dict[str, Any]]) -> int:
    """Print one line per failed condition, deliver the document and the step summary, and
    return the exit code (raise typer.Exit with it)."""
    code = EXIT_GATE if gate.evaluated and not gate.passed else (
        EXIT_PROBLEMS if problems else EXIT_OK)
    for cond in gate.failed:
        err.print(f"gate failed: {visible(cond.message)}", markup=False, style="red")
    if gate.evaluated and gate.passed:
        err.print(f"gate passed ({len(gate.conditions)} condition(s))", markup=False)
    doc = build(code)
    summary = os.environ.get(ci_report.SUMMARY_ENV)
    if summary:
        try:
            ci_report.append_summary(summary, ci_report.markdown(doc))
        except OSError as e:
            err.print(f"warning: {ci_report.SUMMARY_ENV}: {visible(e)}", markup=False,
                      style="yellow")
    if fmt != "text":
        text = ci_report.render(doc, fmt)
        if output is None:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            try:
                write_text(output, text)  # a link or a folder at it is refused
            except OSError as e:
                err.print(f"error: --output {visible(output)}: {visible(e)}", markup=False,
                          style="red")
                return EXIT_UNUSABLE
    return code
