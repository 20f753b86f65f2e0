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
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from careful_engine.core.safe_text import literal, visible

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_UNUSABLE = 2
EXIT_INTERNAL = 3
EXIT_GATE = 4

console = Console()
err = Console(stderr=True, soft_wrap=True, highlight=False)


def progress_bar() -> Progress:
    """The progress bar every command shows on stderr (gone when done)."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err, transient=True)


def fail(message: str, code: int = EXIT_UNUSABLE) -> typer.Exit:
    """Print ``error: message`` (shown literally) on stderr; the Exit to raise (default 2)."""
    err.print(f"[red]error:[/] {literal(message)}")
    return typer.Exit(code)



def refuse_out(out: Path, *, file: bool = False) -> None:
    """Exit 2 with a message, before any work, when ``--out`` (a folder, or with ``file`` a
    file) is the wrong kind of thing, a link, or not writable."""
    import typer

    from careful_engine.core.safe_write import UnsafeWrite, check_out_dir, check_out_file

    try:
        (check_out_file if file else check_out_dir)(out)
    except UnsafeWrite as e:
        err.print(f"[red]error:[/] --out {literal(e)}")
        raise typer.Exit(EXIT_UNUSABLE) from None


def log_dir() -> Path:
    """Where internal-error logs go: $XDG_CACHE_HOME/careful/logs (~/.cache/careful/logs)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "careful" / "logs"


def internal_error() -> int:
    """Log the exception being handled with its traceback; print one short message naming the
    log on stderr; return :data:`EXIT_INTERNAL`."""
    exc = sys.exc_info()[1]
    text = (f"careful {' '.join(sys.argv[1:])}\n{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n\n"
            + "".join(traceback.format_exc()))
    path = None
    for folder in (log_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=time.strftime("careful-%Y%m%d-%H%M%S-"),
                                        suffix=".log", dir=folder)
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


__all__ = [
    "EXIT_GATE", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_UNUSABLE",
    "console", "err", "internal_error", "literal", "log_dir", "refuse_out", "visible",
]


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
