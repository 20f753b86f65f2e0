"""Reading files that others wrote, bounded: a regular file only (a FIFO, socket or device is
refused at once, never waited on), and no bigger than a limit (a planted ``/dev/zero`` link
or a sparse file of gigabytes is refused, not read into memory).

The limits are generous for what each kind of file holds: a bfcl result file of 200
conversations is about 3 MB (:data:`MAX_RESULT_BYTES` is 256 MiB); manifests, boundaries and
other small documents stay under a few kilobytes (:data:`MAX_SMALL_BYTES` is 8 MiB).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_RESULT_BYTES = 256 * 2**20  # result and score files
MAX_SMALL_BYTES = 8 * 2**20  # manifests, boundaries, declarations, label sets
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))


class NotRegular(OSError):
    """A path that is a FIFO, socket, device or folder where a file was expected."""


class TooLarge(OSError):
    """A file bigger than the limit for its kind."""


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | Path, limit: int = MAX_RESULT_BYTES, *,
                 follow_links: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes. A FIFO, socket or device
    raises :class:`NotRegular` at once (opened without blocking, checked on the open
    descriptor); a bigger file raises :class:`TooLarge` (checked by size, and by reading at
    most one byte more than the limit: a file that grows while read is caught too). Both are
    OSErrors whose ``strerror`` says what is wrong. ``follow_links=False``: a link at
    ``path`` itself is refused (ELOOP)."""
    fd = os.open(path, _READ_FLAGS if follow_links else _READ_FLAGS | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = file_kind(st.st_mode)
            raise NotRegular(0, f"{kind}, not a regular file")
        if st.st_size > limit:
            raise TooLarge(0, f"{st.st_size:,} bytes, more than the {limit:,} bytes read")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise TooLarge(0, f"more than the {limit:,} bytes read")
        return data
    finally:
        os.close(fd)


def same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name the same file (links resolved); False where either cannot be
    resolved."""
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
