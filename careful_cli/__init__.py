"""The ``careful`` command line: a thin typer front end over careful_engine.

Each command module holds its own commands on a typer app of its own (``module.app``);
:data:`COMMAND_MODULES` lists them, and :func:`_load` adds them to :data:`app` in that order
(the order of ``careful --help``). An import that fails is an error, never a missing command.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

app = typer.Typer(
    name="careful",
    help=(
        "CAREFUL-Bench: effect-aware, judge-free re-scoring of BFCL multi-turn runs.\n\n"
        "Start with `careful demo` (writes the reference run and a SYNTHETIC flawed run, and "
        "scores both), then "
        "`careful score RUN_DIR` on any bfcl result folder."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# The command modules, in the order of `careful --help`.
COMMAND_MODULES = (
    "score", "demo", "leaderboard", "compare", "sensitivity", "declare", "audits",
    "provenance", "annotation", "generate", "workbench",
)
_loaded = False


def _load() -> None:
    """Add every command module's commands to :data:`app` (once), with help reflowed. Called
    inside :func:`main`'s error handling, so that a module failing to import exits 3 with a
    log rather than a traceback."""
    global _loaded
    if _loaded:
        return
    from careful_cli.common import reflow_help

    for name in COMMAND_MODULES:
        app.add_typer(importlib.import_module(f"careful_cli.{name}").app)
    reflow_help(app)
    _loaded = True


def main() -> None:
    """Run ``careful``: typer's own usage errors exit 2; anything unexpected exits 3 with a
    short message and the path of a log holding the traceback, never a raw traceback."""
    from careful_cli.common import internal_error

    try:
        _load()
        app()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except BrokenPipeError:  # `careful ... | head`: the reader left, nothing to say
        _silence_stdout()
        raise SystemExit(0) from None
    except Exception:  # noqa: BLE001 - the one place that turns a bug into exit 3
        raise SystemExit(internal_error()) from None


def _silence_stdout() -> None:
    """Stop Python from failing again while flushing a closed stdout at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
