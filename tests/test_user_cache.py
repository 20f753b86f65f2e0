"""The user's cache folder (careful_engine.core.user_cache): one place, and nothing written
through a link planted there or waited on from a FIFO planted there."""

from __future__ import annotations

import os
from pathlib import Path

from careful_engine.core import user_cache

from . import hostile_corpus as hc


def _env(tmp_path: Path) -> dict:
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "CAREFUL_CACHE_DIR": ""}


def test_links_in_the_cache_folder_are_not_written_through(tmp_path) -> None:
    """``careful`` and ``logs`` planted as links: the internal-error log goes to the temporary
    folder instead, and the scorer's caches (reference cache, bfcl's scratch root) are not
    made where the links point."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "cache").mkdir()
    os.symlink(victim, tmp_path / "cache" / "careful")
    run = tmp_path / "run"
    hc.write_model(run, "m")
    res = hc.run_cli("score", str(run), "--out", str(tmp_path / "out"), "-q",
                     env={**_env(tmp_path), "CAREFUL_REFCACHE": "on"}, timeout=300)
    assert res.returncode == 1, res.stderr  # ids missing; scored
    assert list(victim.iterdir()) == []
    os.unlink(tmp_path / "cache" / "careful")
    (tmp_path / "cache" / "careful").mkdir()
    os.symlink(victim, tmp_path / "cache" / "careful" / "logs")
    prelude = ("import careful_engine.scoring.score as s\n"
               "def boom(*a, **k):\n    raise ZeroDivisionError('engine bug')\n"
               "import careful_cli.score as cs\ncs.score_run = boom\n")
    res = hc.run_cli("score", str(run), "--out", str(tmp_path / "out2"), prelude=prelude,
                     env=_env(tmp_path), timeout=300)
    assert res.returncode == 3 and "the traceback is in" in res.stderr, res.stderr
    assert list(victim.iterdir()) == []


def test_fifos_in_the_reference_cache_are_not_waited_on(tmp_path) -> None:
    env = {**_env(tmp_path), "CAREFUL_REFCACHE": "on"}
    run = tmp_path / "run"
    hc.write_model(run, "m")
    first = hc.run_cli("score", str(run), "--out", str(tmp_path / "o1"), "-q", env=env)
    assert first.returncode == 1, first.stderr
    folder = tmp_path / "cache" / "careful" / "refcache"
    planted = [p for p in folder.iterdir() if p.suffix == ".bin" or p.name == "key"]
    assert planted
    for p in planted:
        p.unlink()
        os.mkfifo(p)
    again = hc.run_cli("score", str(run), "--out", str(tmp_path / "o2"), "-q", env=env,
                       timeout=120)
    assert again.returncode == 1, again.stderr
    assert ((tmp_path / "o1" / "conversations.jsonl").read_bytes()
            == (tmp_path / "o2" / "conversations.jsonl").read_bytes())


def test_cache_dir_refuses_a_link_and_makes_its_folders(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CAREFUL_CACHE_DIR", str(tmp_path / "c"))
    made = user_cache.cache_dir("logs")
    assert made == tmp_path / "c" / "logs" and made.is_dir()
    assert oct(made.stat().st_mode & 0o777) == "0o700"
    os.symlink(tmp_path, tmp_path / "c" / "linked")
    try:
        user_cache.cache_dir("linked")
    except user_cache.UnsafeCache as e:
        assert "symbolic link" in str(e)
    else:
        raise AssertionError("a link was accepted")
