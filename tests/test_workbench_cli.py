"""``careful workbench``: registered on the CLI, arguments to settings, the embedded default."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import COMMAND_MODULES, _load, app


@pytest.fixture
def launched(monkeypatch) -> list:
    """Capture the settings the command would open the app with (no terminal needed)."""
    import workbench.app

    seen: list = []
    monkeypatch.setattr(workbench.app, "run", lambda s: seen.append(s) or True)  # a clean exit
    _load()
    return seen


def test_the_command_is_registered_and_documented() -> None:
    assert "workbench" in COMMAND_MODULES
    _load()
    result = CliRunner().invoke(app, ["workbench", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Open the workbench" in result.output and "--boundary" in result.output


def test_arguments_become_settings(launched, tmp_path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    result = CliRunner().invoke(app, ["workbench", str(run), "--db", str(tmp_path / "x.db"),
                                      "--boundary", "mine", "--decoder", "beta=KEY"])
    assert result.exit_code == 0, result.output
    (settings,) = launched
    assert settings.runs == [run] and settings.db == tmp_path / "x.db"
    assert settings.boundary == "mine" and settings.decoders.by_folder == {"beta": "KEY"}


def test_no_arguments_open_the_embedded_default(launched, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "other").mkdir(parents=True)
    result = CliRunner().invoke(app, ["workbench"])
    assert result.exit_code == 0, result.output
    (settings,) = launched
    assert settings.runs == [Path("runs/other"), Path("runs/reference")]
    assert len(list(Path("runs/reference").rglob("*_result.json"))) == 4
    assert settings.decoders is None


def test_a_missing_run_is_a_usage_error(launched, tmp_path) -> None:
    result = CliRunner().invoke(app, ["workbench", str(tmp_path / "nope")])
    assert result.exit_code == 2 and not launched
