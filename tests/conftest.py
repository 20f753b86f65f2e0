from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("CAREFUL_SHARED", REPO.parent / "shared"))
SHARED_RUNS = SHARED / "runs"

# the reference cache (careful_engine.core.refcache) of this test session: never the user's own
_CACHE = tempfile.mkdtemp(prefix="careful-test-cache-")
os.environ["CAREFUL_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)


@pytest.fixture(autouse=True)
def _own_config_folder(tmp_path_factory, monkeypatch) -> None:
    """The workbench remembers settings in $XDG_CONFIG_HOME: each test its own, never the
    user's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture(scope="session")
def shared_runs() -> Path:
    """The real logged runs in ../shared/runs; tests that need them skip cleanly without."""
    if not SHARED_RUNS.is_dir():
        pytest.skip(f"{SHARED_RUNS} is not present")
    return SHARED_RUNS


# ---------------------------------------------------------------- the workbench's tests


@pytest.fixture(scope="session")
def runs_template(tmp_path_factory) -> Path:
    """Two small runs, scored (tests/workbench_support.py: ``build_runs``); copy before writing."""
    from tests.workbench_support import build_runs

    return build_runs(tmp_path_factory.mktemp("workbench"))


@pytest.fixture
def workdir(tmp_path, runs_template, monkeypatch) -> Iterator[Path]:
    """A working folder with the runs and a fresh annotation database; the current directory."""
    from tests.workbench_support import build_db

    shutil.copytree(runs_template, tmp_path / "runs")
    build_db(tmp_path / "careful.db").close()
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.fixture
def no_blink(monkeypatch) -> None:
    """No blinking cursor in Textual inputs (screenshots and key timing stay stable)."""
    from textual.widgets import Input

    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)
