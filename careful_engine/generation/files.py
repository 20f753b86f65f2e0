"""Writes of a run folder that never follow a planted symbolic link.

A run lives in ``<runs-dir>/<run>/``, where ``<run>`` is a plain name (:func:`run_folder`).
Below the runs folder, every directory the run creates or enters and every file it reads,
appends to or replaces must be what it seems: a symbolic link, a FIFO or any other special
file there is refused with :class:`UnsafePath` (a :class:`~.errors.GenerationError`) before
anything is written. Files are opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK`` until checked to
be regular), and replaced through :mod:`careful_engine.core.safe_write` (a fresh temporary
file created with ``O_EXCL``, renamed over the target).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO

from careful_engine.core import safe_write
from careful_engine.core.runs import ParseBudget, Problem, budgeted_lines, line_over_cap
from careful_engine.core.safe_read import MAX_RESULT_BYTES, TooLarge, read_regular
from careful_engine.generation.errors import GenerationError

MAX_NAME_BYTES = 255


class UnsafePath(GenerationError):
    """A path of the run folder that is a link or not a regular file or directory."""


def run_folder(runs_dir: Path, name: str) -> Path:
    """``runs_dir / name`` for a plain name (no separator, not ``.``/``..``, not absolute, no
    control characters or surrounding spaces); refuses a planted link there."""
    problem = None
    if not name or name in (".", ".."):
        problem = "it is empty, '.' or '..'"
    elif "/" in name or "\\" in name or (os.altsep and os.altsep in name):
        problem = "it contains a path separator"
    elif os.path.isabs(name):
        problem = "it is an absolute path"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name) or name != name.strip():
        problem = "it has control characters or surrounding spaces"
    elif len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        problem = f"it is longer than {MAX_NAME_BYTES} bytes"
    if problem:
        raise GenerationError(f"--run {name!r} must be a plain folder name inside --runs-dir: "
                              f"{problem}")
    path = runs_dir / name
    check(path, directory=True)
    return path


def check(path: Path, *, directory: bool = False, verb: str = "write through") -> bool:
    """Whether ``path`` exists; refuses a link, or something other than a regular file
    (``directory``: a directory)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise UnsafePath(f"{path}: cannot inspect it ({e.strerror})") from e
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symbolic link; refusing to {verb} it")
    if directory and not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a directory")
    if not directory and not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is not a regular file")
    return True


def ensure_dir(path: Path, base: Path) -> Path:
    """``mkdir -p`` of ``path`` below ``base`` (created as given, the caller's choice),
    refusing any level below it that is a link."""
    base.mkdir(parents=True, exist_ok=True)
    rel = path.relative_to(base)
    current = base
    for part in rel.parts:
        current = current / part
        if not check(current, directory=True):
            try:
                current.mkdir()
            except FileExistsError:
                check(current, directory=True)
    return path


def _open(path: Path, flags: int, verb: str = "write through") -> int:
    check(path, verb=verb)  # a link or a special file already there: refused by name
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if os.path.islink(path):
            raise UnsafePath(f"{path} is a symbolic link; refusing to {verb} it") from e
        raise UnsafePath(f"{path}: cannot open it ({e.strerror})") from e
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def open_append(path: Path, binary: bool = False) -> IO:
    """Open a regular file for appending (created if missing), never through a link."""
    fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return os.fdopen(fd, "ab" if binary else "a", **({} if binary else {"encoding": "utf-8"}))


def read_bytes(path: Path, limit: int = MAX_RESULT_BYTES) -> bytes | None:
    """A regular file's bytes (None if missing), never through a link or from a FIFO, and
    never more than ``limit`` (careful_engine.core.safe_read's limit for result files unless
    told: a manifest is read with the one for small documents)."""
    if not check(path, verb="read"):  # (by name: a link or a special file, worded here)
        return None
    try:  # the one bounded reader (careful_engine.core.safe_read), links not followed
        return read_regular(path, limit, follow_links=False)
    except TooLarge as e:
        raise UnsafePath(f"{path}: too large to read ({e.strerror})") from e
    except OSError as e:
        if os.path.islink(path):  # put there since the check
            raise UnsafePath(f"{path} is a symbolic link; refusing to read it") from e
        raise UnsafePath(f"{path}: cannot read it ({e.strerror or e})") from e


def read_records(path: Path, skipped: list[int] | None = None,
                 problems: list[Problem] | None = None) -> list[dict]:
    """The JSON objects of a JSON-lines file, in order (none if it is missing); a line that does
    not parse (one cut by a kill) or holds no object is skipped, and its number is added to
    ``skipped`` unless it is a last line cut short (no newline: a kill); so is a line longer
    than a result line may be (never parsed: it could take gigabytes). The records kept are
    bounded as a result file's entries (:class:`~careful_engine.core.runs.ParseBudget`): the
    lines past it are not read, said in one problem added to ``problems``. A link or special
    file raises :class:`UnsafePath` (:func:`read_bytes`)."""
    raw = read_bytes(path)
    if raw is None:
        return []
    out = []
    # lines end at a newline only: U+2028, NEL... are written raw inside JSON strings
    text = raw.decode("utf-8", errors="replace")
    del raw
    ended = text.count("\n")  # the lines before the last end with a newline
    budget = ParseBudget()
    for n, line in budgeted_lines(text, str(path), [] if problems is None else problems,
                                  budget):
        try:
            record = None if line_over_cap(line) else json.loads(line)
        except (ValueError, RecursionError):  # cut short, not JSON, nested too deep
            record = None
        if isinstance(record, dict):
            out.append(record)
            budget.keep(line)
        elif skipped is not None and n <= ended:  # (last: no newline)
            skipped.append(n)
    return out


def atomic_write(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` (fsynced) through
    :func:`careful_engine.core.safe_write.write_text` (``write_bytes`` for bytes): a new file
    created exclusively, then renamed; a link or a special file at ``path`` (or as its folder)
    is refused."""
    try:
        if isinstance(text, bytes):
            safe_write.write_bytes(path, text)
        else:
            safe_write.write_text(path, text)
    except safe_write.UnsafeWrite as e:
        raise UnsafePath(str(e)) from e


def drop_torn_tail(path: Path) -> str | None:
    """Cut a last line without its newline (a kill during its write) off a JSON-lines file,
    so that the next line appended starts a line of its own (the lines before it are kept
    byte for byte); a note saying what was cut, or None when nothing was."""
    raw = read_bytes(path)
    if not raw or raw.endswith(b"\n"):
        return None
    keep = raw[:raw.rfind(b"\n") + 1]
    atomic_write(path, keep)
    return f"{path.name}: dropped a last line cut short ({len(raw) - len(keep):,} bytes)"
