"""The cache's entry files: one per (category, dataset version, engine version) in
``<cache root>/refcache``, read and written whole, and the counts of what this process did.

Safety: an entry file is ``MAGIC + HMAC-SHA256(key, MAGIC + payload) + payload``, the key being
32 random bytes made once per install (``refcache/key``, mode 0600, owned by this user;
:mod:`careful_engine.core.install_key`). The
MAC is checked before anything is decoded, then the payload's version fields (format, bfcl-eval,
engine, category, dataset); anything else (corrupted, truncated, foreign, planted, another
version) is ignored and rebuilt. The payload is ``marshal`` data, never pickle: marshal builds
only built-in values and runs no code while loading (no constructors, no ``__reduce__``); its
parser is not hardened against crafted bytes, which is why only MAC-checked bytes reach it.
Files are read without following links and written to a fresh temporary file then renamed.
"""

from __future__ import annotations

import hashlib
import hmac
import marshal
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from careful_engine.core import bfcl, safe_write
from careful_engine.core.install_key import key_file as _key_file
from careful_engine.core.refcache.scope import FORMAT, dataset_version, replay_code_hash
from careful_engine.core.user_cache import cache_dir

MAGIC = b"CRFREF1\n"
MAX_FILE_BYTES = 512 * 2**20
# recorded: references recorded from a live replay; loaded/rejected/written: entry files;
# diverged: guarded references given up on (see sides.CachedSide.run)
STATS = {"recorded": 0, "loaded": 0, "rejected": 0, "written": 0, "diverged": 0}


def _folder() -> Path | None:
    """``<cache root>/refcache``, a real directory of this user's (None if it cannot be)."""
    try:
        return cache_dir("refcache")
    except OSError:
        return None


def _path(folder: Path, category: str) -> Path:
    return folder / f"{category}-{dataset_version(category)}-{replay_code_hash()}.bin"


def _header(category: str) -> dict:
    return {"format": FORMAT, "bfcl": bfcl.BFCL_VERSION, "engine": replay_code_hash(),
            "category": category, "dataset": dataset_version(category)}


def _read(path: Path, key: bytes, category: str) -> dict[str, dict | None] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO: no wait
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            STATS["rejected"] += 1
            return None
        data = f.read(MAX_FILE_BYTES + 1)
    n = len(MAGIC)
    if len(data) < n + 32 or data[:n] != MAGIC:
        STATS["rejected"] += 1
        return None
    mac, payload = data[n:n + 32], memoryview(data)[n + 32:]
    if not hmac.compare_digest(mac, _mac(key, payload)):
        STATS["rejected"] += 1
        return None
    try:  # MAC-checked bytes only; marshal runs no code
        doc = marshal.loads(payload)
        ok = (type(doc) is dict and doc.get("header") == _header(category)
              and type(doc.get("entries")) is dict)
    except (ValueError, EOFError, TypeError):
        ok = False
    if not ok:
        STATS["rejected"] += 1
        return None
    STATS["loaded"] += 1
    return doc["entries"]


def _mac(key: bytes, payload: bytes | memoryview) -> bytes:
    """HMAC-SHA256(key, MAGIC + payload), without joining them first."""
    h = hmac.new(key, MAGIC, hashlib.sha256)
    h.update(payload)
    return h.digest()


def _write(path: Path, key: bytes, category: str, entries: dict[str, dict | None],
           encoded: dict[str, tuple[dict, bytes]] | None = None) -> None:
    if encoded:  # recorded entries as the bytes their check made (see store._Category.encoded)
        entries = dict(entries)
        for i, (entry, data) in encoded.items():
            if entries.get(i) is entry:
                entries[i] = {"data": data, "templates": entry["templates"]}
    payload = marshal.dumps({"header": _header(category), "entries": entries})
    mac = _mac(key, payload)
    try:  # private; a planted link at the name is replaced itself, never its target
        safe_write.write_bytes(path, MAGIC + mac + payload, mode=0o600, fsync=False,
                               replace_link=True)
    except OSError:
        return
    STATS["written"] += 1


def _disk() -> tuple[Path, bytes] | None:
    folder = _folder()
    key = _key_file(folder) if folder is not None else None
    return (folder, key) if key is not None else None


STALE_SECONDS = 7 * 24 * 3600
_ENTRY_FILE = re.compile(r"[a-z_]+-[0-9a-f]{6,64}-([0-9a-f]{6,64})\.bin")


def _prune(folder: Path, keep: Path) -> None:
    """Remove the cache files of other engine versions (every upgrade of careful or
    bfcl-eval leaves its files behind; the engine version covers bfcl-eval's data) that
    nothing has written for :data:`STALE_SECONDS` (a file of another install still in use is
    kept); a link is removed itself, never what it points to; ``keep``: the file just
    written."""
    cutoff, mine = time.time() - STALE_SECONDS, replay_code_hash()
    try:
        with os.scandir(folder) as it:
            for e in it:
                m = _ENTRY_FILE.fullmatch(e.name)
                if m is None or m.group(1) == mine or e.name == keep.name:
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                    if st.st_mtime < cutoff and not stat.S_ISDIR(st.st_mode):
                        os.unlink(e.path)
                except OSError:
                    continue
    except OSError:
        return


@contextmanager
def _locked(folder: Path, wait: float = 5.0) -> Iterator[None]:
    """The cache folder's write lock (``flock`` on its ``lock`` file), waited for at most
    ``wait`` seconds; without it (no flock, a planted link, a holder that never lets go) the
    write goes ahead unlocked: an entry lost then is only recorded again later."""
    try:
        import fcntl
    except ImportError:  # not on POSIX
        yield
        return
    try:
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # releases the lock
