"""`careful CMD` imports only the command module that holds CMD (careful_cli.COMMANDS): the
table matches the modules, the command behaves and helps as when every module is loaded, and
`careful --help` still lists every command in order."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import careful_cli
from careful_cli import COMMAND_MODULES, COMMANDS, _load, app


def _names(module: str) -> set[str]:
    sub = importlib.import_module(f"careful_cli.{module}").app
    cmds = {c.name or c.callback.__name__.replace("_", "-") for c in sub.registered_commands}
    return cmds | {g.name for g in sub.registered_groups}


def test_the_table_names_every_command_of_every_module() -> None:
    assert list(COMMANDS) == list(COMMAND_MODULES)
    for module, names in COMMANDS.items():
        assert set(names) == _names(module), module
    every = [n for names in COMMANDS.values() for n in names]
    assert len(every) == len(set(every))


_RUN = """
import atexit, sys
atexit.register(lambda: print("LOADED", *sorted(m for m in sys.modules
                                               if m.startswith("careful_cli.")), "\\nIMPORTED",
                              *sorted({m.split(".")[0] for m in sys.modules}), file=sys.stderr))
sys.argv = ["careful", *sys.argv[2:]]
if sys.argv[1] == "full":
    from careful_cli import _load, main
    _load()
else:
    from careful_cli import main
main()
"""


def _careful(mode: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run([sys.executable, "-c", _RUN, mode, *args], capture_output=True,
                          text=True, env=env, timeout=120)


def _listed(done: subprocess.CompletedProcess, tag: str) -> list[str]:
    """What _RUN printed at exit after ``tag``: the careful_cli modules (LOADED) or every
    top-level package (IMPORTED)."""
    return next(line.split()[1:] for line in done.stderr.splitlines()
                if line.startswith(f"{tag} ") or line == tag)


def test_a_command_loads_only_its_module_and_behaves_the_same() -> None:
    for args in (["leaderboard", "--help"], ["score", "--jobs", "-1", "x"], ["doctor", "--help"]):
        lazy, full = _careful("lazy", *args), _careful("full", *args)
        assert (lazy.returncode, lazy.stdout) == (full.returncode, full.stdout), args
        assert lazy.stderr.split("LOADED")[0] == full.stderr.split("LOADED")[0]
        loaded = _listed(lazy, "LOADED")
        module = careful_cli._module_of(args)
        assert f"careful_cli.{module}" in loaded
        assert "careful_cli.annotation" not in loaded and "careful_cli.generate" not in loaded
    top = _careful("lazy", "--help")
    assert top.returncode == 0 and "careful_cli.annotation" in top.stderr
    assert "leaderboard" in top.stdout and "annotate-llm" in top.stdout


def test_every_module_after_one_keeps_the_help_order() -> None:
    _load("leaderboard")
    _load()
    order = [importlib.import_module(f"careful_cli.{m}").app for m in COMMAND_MODULES]
    assert [g.typer_instance for g in app.registered_groups] == order
    _load()
    assert len(app.registered_groups) == len(COMMAND_MODULES)


_HEAVY = ("pydantic", "scipy", "numpy", "sklearn", "textual", "sqlite_utils", "anthropic")


def test_scoring_a_run_imports_no_heavy_package(shared_runs, tmp_path) -> None:
    """`careful score` starts with the CLI and the engine alone: none of the packages that
    other commands use (the statistics, the workbench, the store, the API client), and not
    pydantic, which typer 0.29 imports to coerce options (about 0.1 s at every start)."""
    src = shared_runs / "xlam-2-8b-fc-r" / "result" / "Salesforce_Llama-xLAM-2-8b-fc-r"
    model = tmp_path / "run" / "result" / src.name
    model.mkdir(parents=True)
    name = "BFCL_v3_multi_turn_base_result.json"
    lines = (src / name).read_text(encoding="utf-8").splitlines()[:3]
    (model / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = _careful("lazy", "score", str(tmp_path / "run"), "-q", "--jobs", "1",
                    "-o", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr  # scored; the ids left out counted as failed
    assert (tmp_path / "out" / "conversations.jsonl").is_file()
    imported = set(_listed(done, "IMPORTED"))
    assert "careful_engine" in imported and "bfcl_eval" in imported
    assert imported.isdisjoint(_HEAVY), sorted(imported & set(_HEAVY))


def test_version_names_careful_and_the_pinned_bfcl_eval() -> None:
    from importlib import metadata

    done = _careful("lazy", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"careful-workbench {metadata.version('careful-workbench')} ")
    assert f"bfcl-eval {metadata.version('bfcl-eval')}" in done.stdout
