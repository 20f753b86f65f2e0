"""The ``careful`` command line: a thin typer front end over careful_engine.

Each command module holds its own commands on a typer app of its own (``module.app``);
:data:`COMMAND_MODULES` lists them, and :func:`_load` adds them to :data:`app` in that order
(the order of ``careful --help``). An import that fails is an error, never a missing command.

``careful CMD ...`` imports only the module that holds CMD (:data:`COMMANDS`; a test checks it
against the modules): each module brings its engine modules, and the others' cost about a
tenth of a second that the command never uses. ``careful --help``, an unknown command or no
command at all loads every module.
"""

from __future__ import annotations

import gc
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


def _version(value: bool) -> None:
    if value:
        from careful_engine.core import bfcl
        from careful_engine.scoring.settings import engine_version

        typer.echo(f"careful-workbench {engine_version()} (bfcl-eval "
                   f"{bfcl.installed_version()}, Python {sys.version.split()[0]})")
        raise typer.Exit()


@app.callback()
def _top(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                      help="Print the versions of careful, bfcl-eval and Python.")
         ) -> None:
    pass


# The command modules, in the order of `careful --help`.
COMMAND_MODULES = (
    "score", "demo", "leaderboard", "compare", "sensitivity", "declare", "audits",
    "provenance", "annotation", "generate", "workbench",
)
# The top-level commands and command groups of each module (tests/test_cli_lazy.py).
COMMANDS = {
    "score": ("score", "doctor", "decoders"), "demo": ("demo",), "leaderboard": ("leaderboard",),
    "compare": ("compare",), "sensitivity": ("sensitivity",),
    "declare": ("declare", "review-sheet", "export"), "audits": ("audit",),
    "provenance": ("provenance",),
    "annotation": ("label", "agree", "adjudicate", "annotate-llm", "round", "labels"),
    "generate": ("generate", "cost"), "workbench": ("workbench",),
}
_added: list[str] = []  # the modules on `app` now, in the order added
_TOP_REFLOWED: list[bool] = []


def _load(only: str | None = None) -> None:
    """Add every command module's commands to :data:`app` (once), with help reflowed; with
    ``only`` (a module of :data:`COMMAND_MODULES`), just that one. Called inside
    :func:`main`'s error handling, so that a module failing to import exits 3 with a log
    rather than a traceback."""
    from careful_cli.common import fit_help, reflow, reflow_help

    wanted = [only] if only else list(COMMAND_MODULES)
    if not only and _added != wanted[:len(_added)]:  # after a single one: redo, in help order
        app.registered_groups.clear()
        _added.clear()
    if not _TOP_REFLOWED:
        app.info.help = reflow(app.info.help)
        fit_help()
        _TOP_REFLOWED.append(True)
    for name in wanted:
        if name not in _added:
            sub = importlib.import_module(f"careful_cli.{name}").app
            if not getattr(sub, "_careful_reflowed", False):
                reflow_help(sub)
                sub._careful_reflowed = True
            app.add_typer(sub)
            _added.append(name)


def _module_of(args: list[str]) -> str | None:
    """The module holding the command ``args`` name first, if that is all they need."""
    if not args:
        return None
    return next((m for m, names in COMMANDS.items() if args[0] in names), None)


def main() -> None:
    """Run ``careful``: typer's own usage errors exit 2; anything unexpected exits 3 with a
    short message and the path of a log holding the traceback, never a raw traceback."""
    from careful_cli.common import internal_error

    _escape_unencodable()
    try:
        _load(_module_of(sys.argv[1:]))
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
    finally:
        # the process ends here: keep the interpreter's shutdown from walking every object
        # left (a scored run's results, bfcl's data, scipy) with the cyclic collector, which
        # took 0.2-0.4 s after `careful leaderboard` had written everything
        gc.freeze()


def _escape_unencodable() -> None:
    """A character the terminal's encoding cannot hold (``PYTHONIOENCODING=ascii``, a C
    locale) is written as a backslash escape instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict":
            try:
                stream.reconfigure(errors="backslashreplace")
            except (AttributeError, ValueError, OSError):
                pass


def _silence_stdout() -> None:
    """Stop Python from failing again while flushing a closed stdout at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
