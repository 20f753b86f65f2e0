"""The ``careful`` command line: a thin typer front end over careful_engine.

Each command group lives in its own module and registers itself on :data:`app`; this module
only assembles them.
"""

from __future__ import annotations

import importlib

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

# Modules that define commands on `app` (import order is the order in --help).
COMMAND_MODULES = (
    "score", "demo", "compare", "declare", "provenance", "annotation", "generate", "workbench",
)


def _load() -> None:
    for name in COMMAND_MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    from careful_cli.common import reflow_help

    reflow_help(app)


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
    import os
    import sys

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
