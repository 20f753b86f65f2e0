"""Every default output folder a command writes into the working folder is ignored by git."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest
import typer

from careful_cli import _load, app

ROOT = Path(__file__).resolve().parents[1]


def _default_out_folders() -> set[str]:
    """The ``./careful-<command>`` defaults named in the commands' ``--out`` help."""
    _load()
    found: set[str] = set()

    def walk(command: click.Command) -> None:
        for p in command.params:
            found.update(re.findall(r"\./(careful-[a-z-]+)", getattr(p, "help", None) or ""))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return found


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None,
                    reason="not a git checkout")
def test_the_default_output_folders_are_ignored() -> None:
    folders = _default_out_folders()
    assert {"careful-compare", "careful-leaderboard", "careful-sensitivity"} <= folders
    for name in sorted(folders):
        probe = f"{name}/accuracy.md"
        done = subprocess.run(["git", "check-ignore", "-q", "--no-index", probe], cwd=ROOT,
                              check=False)
        assert done.returncode == 0, f"{name}/ is not in .gitignore"
