"""The test guard itself: it must catch what it promises to catch, and let ordinary work pass."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.guard import (
    EXPRESSIONS,
    FORMATS,
    Blocked,
    GuardViolation,
    guarded,
    hostile_payloads,
    new_canary,
)


@pytest.mark.parametrize("action", [
    "eval", "exec", "compile", "system", "popen", "write_outside", "read_outside",
    "mkdir_outside", "import_from_text", "lambda_from_text",
])
def test_the_guard_catches(action: str, tmp_path: Path) -> None:
    canary = new_canary()
    # code compiled from a string before the block: calling it inside is caught even though
    # writing into the test folder is allowed
    from_text = eval("lambda p: open(p, 'w')")  # noqa: S307 (test-authored text)
    with pytest.raises(GuardViolation), guarded(tmp_path, canary=canary):
        try:
            if action == "eval":
                eval("1 + 1")
            elif action == "exec":
                exec("x = 1")
            elif action == "compile":
                compile("1", "<model>", "eval")
            elif action == "system":
                os.system(f"touch {canary}")
            elif action == "popen":
                subprocess.run(["touch", str(canary)], check=False)
            elif action == "write_outside":
                open(canary, "w").close()
            elif action == "read_outside":
                open("/etc/hostname").close()
            elif action == "mkdir_outside":
                os.mkdir(canary)
            elif action == "import_from_text":
                fn = eval  # noqa: S307 (the guard refuses the eval first)
                fn("__import__('antigravity')")
            elif action == "lambda_from_text":
                from_text(tmp_path / "x").close()
        except Blocked:
            pass  # the code under test may swallow it: the block still fails on exit
    assert not canary.exists()


def test_a_swallowed_block_still_fails_and_a_planted_canary_is_found(tmp_path: Path) -> None:
    canary = new_canary()
    canary.write_text("planted outside the block")
    try:
        with pytest.raises(GuardViolation, match="canary"), guarded(tmp_path, canary=canary):
            pass
    finally:
        canary.unlink()


def test_ordinary_work_passes(tmp_path: Path) -> None:
    import ast

    with guarded(tmp_path):
        (tmp_path / "a.json").write_text(json.dumps({"x": 1}))
        assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
        assert ast.literal_eval("[1, 'a']") == [1, "a"]
        ast.parse("[cd(folder=__import__('os'))]")  # parsing model text runs nothing
        Path(__file__).read_text()  # the repository may be read


def test_the_corpus_is_large_and_covers_every_kind() -> None:
    payloads = hostile_payloads("/nonexistent/canary")
    per_format = {f: sum(p.format == f for p in payloads) for f in FORMATS}
    assert all(n >= 100 for f, n in per_format.items() if f in ("prompting", "fc")), per_format
    kinds = {k for k, _ in EXPRESSIONS}
    assert {"import", "builtin", "dunder", "attribute", "binop", "call", "lambda",
            "comprehension", "size"} <= kinds
    assert any(len(p.steps) > 1 for p in payloads)  # split across steps


def test_paths_relative_to_a_directory_fd_are_resolved_there(tmp_path: Path) -> None:
    """Writers that avoid symlinks work with dir_fd: inside the test folder that is allowed,
    outside it is caught, although the relative name alone says neither."""
    import tempfile
    import uuid

    inside = os.open(tmp_path, os.O_RDONLY)
    outside = os.open(tempfile.gettempdir(), os.O_RDONLY)
    name = f"careful_guard_{uuid.uuid4().hex}"
    try:
        with guarded(tmp_path):
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=inside))
            os.replace(name, name + ".2", src_dir_fd=inside, dst_dir_fd=inside)
            os.unlink(name + ".2", dir_fd=inside)
        with pytest.raises(GuardViolation), guarded(tmp_path):
            try:
                os.mkdir(name, dir_fd=outside)
            except Blocked:
                pass
    finally:
        os.close(inside)
        os.close(outside)
    assert not os.path.exists(os.path.join(tempfile.gettempdir(), name))


def _read_hostname() -> None:
    try:
        open("/etc/hostname").close()
    except Exception:  # noqa: BLE001 (the guard blocks it; the parent must still hear of it)
        pass


def test_a_forked_worker_stays_guarded_and_reports_back(tmp_path: Path) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    with pytest.raises(GuardViolation, match="in a worker process"), guarded(tmp_path):
        p = ctx.Process(target=_read_hostname)
        p.start()
        p.join(60)
