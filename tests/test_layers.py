"""The layers, checked: the import-linter contracts in pyproject.toml, the runtime import
hygiene behind them, and help that reads as paragraphs at 80 columns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_cli.common import reflow

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_hold():
    """`lint-imports` over pyproject.toml's contracts (bfcl boundary, no UI in the engine,
    rich only in presentation modules); prints the broken imports when it fails."""
    lint = Path(sys.executable).with_name("lint-imports")
    cmd = [str(lint)] if lint.exists() else [sys.executable, "-m", "importlinter.cli"]
    proc = subprocess.run([*cmd, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize("module", ["careful_engine.scoring.score", "careful_engine.core.replay",
                                    "careful_engine.annotation.sessions",
                                    "careful_engine.effects.declarations"])
def test_headless_modules_load_no_ui(module):
    """import-linter sees deferred imports too, but not what an import drags in at run time:
    importing a headless module loads neither typer, textual nor the workbench."""
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('typer', 'textual', 'workbench', 'careful_cli') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    assert out == "[]"


def test_reflow_joins_paragraph_lines_and_keeps_list_items():
    text = "First line\n    goes on.\n\n    A para\n    split.\n\n    \b\n    * one\n      more\n    * two"
    assert reflow(text) == "First line goes on.\n\nA para split.\n\n* one more\n* two"
    assert reflow("\b\nkept\nas is") == "\b\nkept\nas is"


def _commands(cmd, path):
    yield path
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, [*path, name])


_LIST = re.compile(r"^([-*•[]|\d+[.)])")  # list items; typer's [default: …], [required]


def _early_breaks(text: str) -> list[str]:
    """Lines that end although the next line's first word, which continues the same text,
    would have fit: a paragraph broken mid-sentence."""
    bad = []
    lines = text.splitlines()
    for a, b in zip(lines, lines[1:], strict=False):
        boxed = a.startswith("│") and b.startswith("│")
        if a.startswith("│") != b.startswith("│"):
            continue
        limit = a.rstrip().rfind("│") - 1 if boxed else 79
        body_a = a.rstrip().removesuffix("│").rstrip()
        body_b = b.rstrip().removesuffix("│").rstrip()
        m = re.search(r"\S", body_b[1:] if boxed else body_b)
        if not m:
            continue
        start = m.start() + (1 if boxed else 0)
        if boxed and start <= 2:  # a new row of the panel
            continue
        if len(body_a) <= start or body_a[start] == " " or (start and body_a[start - 1] != " "
                                                              and body_a[start - 1] != "│"):
            continue  # the line above has no text in this column
        word = body_b[start:].split()[0]
        if _LIST.match(word) or body_a.endswith(":"):
            continue
        if len(body_a) + 1 + len(word) <= limit:
            bad.append(f"{a.strip()!r} / {b.strip()!r}")
    return bad


def test_early_break_detector_flags_a_hard_wrapped_line():
    assert _early_breaks(" A sentence that stops\n here although it fits.")
    assert not _early_breaks(" A sentence.\n\n Another one.")


def test_every_help_renders_as_paragraphs_at_80_columns_uncut():
    _load()
    runner = CliRunner()
    problems = []
    root = typer.main.get_command(app)
    paths = list(_commands(root, []))
    assert len(paths) > 20
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], terminal_width=80,
                               env={"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1"})
        assert result.exit_code == 0, (path, result.output)
        assert max(map(len, result.output.splitlines())) <= 80, path
        # option names are copied: each whole on one line, never split mid-word
        command = root
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        for param in command.params:
            for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
                if opt.startswith("-") and not re.search(
                        rf"(?<![\w-]){re.escape(opt)}(?![\w-])", result.output):
                    problems.append(f"careful {' '.join(path)}: {opt} split or missing")
        problems += [f"careful {' '.join(path)}: {p}" for p in _early_breaks(result.output)]
        # nothing cut off: an option name or a long word folds whole, never ends in "…"
        problems += [f"careful {' '.join(path)}: cut: {line.strip()!r}"
                     for line in result.output.splitlines() if "…" in line]
    assert not problems, "\n".join(problems)


def test_option_help_stays_readable_at_80_columns():
    """Options beyond a command's own (effect rules, CI gate, replay budget) sit in panels of
    their own, so a long option name (``--max-seconds-per-conversation``) or a second name
    (``--no-effects``) narrows only its panel: at 80 columns every option's help column is at
    least 28 characters wide (it was 15 for score)."""
    _load()
    runner = CliRunner()
    narrow = []
    for command in ("score", "compare", "leaderboard", "sensitivity", "provenance"):
        out = runner.invoke(app, [command, "--help"], terminal_width=80,
                            env={"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1"}).output
        # a help text's continuation line: the border, then blanks up to the help column
        starts = [len(line) - len(line[1:].lstrip(" ")) for line in out.splitlines()
                  if line.startswith("│ ") and not line[1:].lstrip(" ").startswith(("-", "│"))]
        width = 80 - 2 - max(starts)
        if width < 28:
            narrow.append(f"careful {command} --help: help column {width} characters")
    assert not narrow, "\n".join(narrow)


def test_a_command_module_that_fails_to_import_is_an_error(monkeypatch) -> None:
    """Commands are registered explicitly: a module that cannot be imported stops `careful`
    (main turns it into exit 3 with a log), it is never skipped or renamed."""
    import careful_cli

    monkeypatch.setattr(careful_cli, "app", typer.Typer())
    monkeypatch.setattr(careful_cli, "_added", [])
    monkeypatch.setattr(careful_cli, "COMMAND_MODULES", ("score", "no_such_commands"))
    with pytest.raises(ModuleNotFoundError):
        careful_cli._load()
    monkeypatch.setattr(careful_cli, "COMMAND_MODULES", ("score", "compare"))
    careful_cli._load()
    names = {c.name or c.callback.__name__ for g in careful_cli.app.registered_groups
             for c in g.typer_instance.registered_commands}
    assert names == {"score", "decoders", "doctor", "compare"}


@pytest.mark.parametrize("package", ["core", "scoring", "effects", "analysis", "present", "demo"])
def test_layer_packages_list_their_modules(package):
    """Each layer package's public ``__all__`` names exactly its modules and subpackages, so the
    folder list and the package's stated contents cannot drift apart."""
    import ast

    folder = ROOT / "careful_engine" / package
    tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    listed = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", None) == "__all__")
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    assert sorted(listed) == sorted(modules)


def test_the_readme_layout_names_every_module():
    """README's Layout names every module and package of the engine and both front ends (a
    new module that the folder list does not show fails here)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    words = set(re.findall(r"[A-Za-z_]+", layout))
    missing = sorted(
        str(p.relative_to(ROOT)) for top in ("careful_engine", "careful_cli", "workbench")
        for p in (ROOT / top).rglob("*.py")
        if p.stem != "__init__" and p.stem not in words
        or p.stem == "__init__" and p.parent.name not in words)
    assert not missing


def test_every_option_says_what_it_does_and_no_word_is_split():
    """Every option of every command has a help text; no hyphenated word of a docstring is
    split across lines (the help reflow joins "two-\\n sided" as "two- sided")."""
    import re

    _load()
    runner = CliRunner()
    root = typer.main.get_command(app)
    silent, split = [], []
    for path in _commands(root, []):
        command = root
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        for param in command.params:
            if param.param_type_name == "option" and not (getattr(param, "help", "") or "").strip():
                silent.append(f"careful {' '.join(path)} {param.opts[0]}")
        result = runner.invoke(app, [*path, "--help"], terminal_width=80,
                               env={"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1"})
        split += [f"careful {' '.join(path)}: {m.group()!r}"
                  for m in re.finditer(r"\b[a-z]+- [a-z]+\b", result.output)]
    assert not silent, silent
    assert not split, split
