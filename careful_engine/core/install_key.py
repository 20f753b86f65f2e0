"""This install's secret key: 32 random bytes made once (``<cache root>/refcache/key``, mode
0600, owned by this user), with which careful signs what only it may have written (the
reference cache's entry files, the score lines the workbench reuses). A key file that is a
link, not a regular file, someone else's, readable by others or of another length is not
used (None: nothing is signed or trusted)."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from careful_engine.core.user_cache import cache_dir


def key_file(folder: Path) -> bytes | None:
    """The key in ``folder/key`` (made on first use); None if it cannot be had safely."""
    path = folder / "key"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO: no wait
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            except OSError:
                return None
            key = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
            return key
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read(33)
        if (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
                and not st.st_mode & 0o077 and len(key) == 32):
            return key
        return None  # someone else's or tampered: nothing signed
    return None


def install_key() -> bytes | None:
    """This install's key (``<cache root>/refcache/key``); None if it cannot be had safely."""
    try:
        folder = cache_dir("refcache")
    except OSError:
        return None
    return key_file(folder)
