"""Writing outputs without following planted symbolic links, and never half a file.

Every output goes through :func:`writer` (or :func:`write_text`, :func:`write_bytes`): every
folder below the output root is checked not to be a link (``lstat``; a link where a folder
should be is refused), the text is written to a fresh temporary file (``O_CREAT | O_EXCL | O_NOFOLLOW``)
beside the target and renamed over it only once complete, so an interrupted writer
(``kill -9``) leaves the previous file as it was. A target that is a link, a folder or
anything but a regular file is refused with :class:`UnsafeWrite` (a cache's own file may
instead have a link at its name replaced: :func:`write_bytes`). Paths are absolute (no
``dir_fd``), so an audit hook (tests/guard.py) sees where each write goes.

The output folder given by a person (``--out``) may itself sit under links (``/tmp`` on some
systems); only the folders this module creates or enters below it, and the folder itself,
must not be links. :func:`check_out_dir` checks ``--out`` before any work is done.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

_TMP_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))


class UnsafeWrite(OSError):
    """An output that cannot be written safely: a link, a non-folder, no permission."""


def _folder(path: Path, *, create: bool, parents: bool = False) -> None:
    """Make sure ``path`` is a folder and not a link (creating it if ``create``)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise UnsafeWrite(f"{path}: no such folder") from None
        try:
            if parents:  # folders above the root are the person's choice: links there are fine
                os.makedirs(path.parent, exist_ok=True)
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as e:
            raise UnsafeWrite(f"{path}: cannot create the folder ({e.strerror})") from None
        st = os.lstat(path)
    except OSError as e:
        raise UnsafeWrite(f"{path}: {e.strerror}") from None
    _require_folder(path, st)


def _require_folder(path: Path, st: os.stat_result) -> None:
    """Refuse ``path`` (with its ``lstat``) unless it is a real folder, not a link to one."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeWrite(f"{path} is a symbolic link; refusing to write through it")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeWrite(f"{path} exists and is not a folder")


def _check_target(path: Path, replace_link: bool = False) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        if replace_link:  # the rename replaces the link itself, never what it points to
            return
        raise UnsafeWrite(f"{path} is a symbolic link; refusing to write through it")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeWrite(f"{path} exists and is not a regular file; refusing to replace it")


def _temp(folder: Path, name: str, mode: int = 0o644) -> tuple[int, Path]:
    """A new file beside the target: never an existing path, never through a link."""
    for _ in range(100):
        tmp = folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, _TMP_FLAGS, mode), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise UnsafeWrite(f"{folder / name}: cannot write ({e.strerror})") from None
    raise UnsafeWrite(f"{folder / name}: no free temporary name")


@contextlib.contextmanager
def _replacing(root: Path, relative: str | Path, *, binary: bool, encoding: str, errors: str,
               mode: int, fsync: bool, replace_link: bool) -> Iterator[IO[Any]]:
    """The one implementation behind :func:`writer` and :func:`write_bytes`."""
    root, parts = Path(os.path.abspath(root)), Path(relative).parts
    if not parts:  # root is the file itself
        root, parts = root.parent, (root.name,)
    if any(p in ("..", "/", "") for p in parts) or Path(relative).is_absolute():
        raise UnsafeWrite(f"{relative}: not a path inside {root}")
    _folder(root, create=True, parents=True)
    folder = root
    for part in parts[:-1]:
        folder = folder / part
        _folder(folder, create=True)
    target = folder / parts[-1]
    _check_target(target, replace_link)
    fd, tmp = _temp(folder, parts[-1], mode)
    ok = False
    try:
        opened = (os.fdopen(fd, "wb") if binary else
                  os.fdopen(fd, "w", encoding=encoding, errors=errors, newline=""))
        with opened as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        _check_target(target, replace_link)  # planted while we wrote
        os.replace(tmp, target)  # rename replaces a name; it never follows a link
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def writer(root: Path, relative: str | Path = "", *, encoding: str = "utf-8",
           errors: str = "strict") -> contextlib.AbstractContextManager[IO[str]]:
    """A text file to write ``root/relative`` through; it replaces the target only when the
    ``with`` block ends without an exception. Folders below ``root`` are created as needed;
    ``root`` and every folder below it must not be links, nor the target."""
    return _replacing(root, relative, binary=False, encoding=encoding, errors=errors,
                      mode=0o644, fsync=True, replace_link=False)


def write_text(path: Path, text: str, *, root: Path | None = None, encoding: str = "utf-8",
               errors: str = "strict") -> Path:
    """Write ``text`` to ``path`` as :func:`writer` does; ``root`` is the folder from which on
    no link is followed (default: the file's own folder)."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    with writer(root, path.relative_to(root), encoding=encoding, errors=errors) as f:
        f.write(text)
    return path


def write_bytes(path: Path, data: bytes, *, root: Path | None = None, mode: int = 0o644,
                fsync: bool = True, replace_link: bool = False) -> Path:
    """Write ``data`` to ``path`` as :func:`writer` does, with the new file's permission
    ``mode`` (0o600: private to this user). ``fsync=False`` skips forcing it to disk (a
    cache that checks what it reads back); ``replace_link=True`` renames over a link at
    ``path`` itself (a file this program owns, such as a cache entry) instead of refusing
    it; what the link points to is never written either way."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    with _replacing(root, path.relative_to(root), binary=True, encoding="", errors="",
                    mode=mode, fsync=fsync, replace_link=replace_link) as f:
        f.write(data)
    return path


def check_out_dir(out: Path) -> None:
    """Refuse an output folder that is an existing file, a link, or not writable, before any
    work is done (raises :class:`UnsafeWrite`). Writability is tried, not guessed: a folder is
    made and removed in ``out`` (or in its nearest existing parent)."""
    out = Path(out)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        parent = out.parent
        while not os.path.lexists(parent) and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise UnsafeWrite(f"{out}: {parent} is not a folder") from None
        _probe(parent, out)
        return
    except OSError as e:
        raise UnsafeWrite(f"{out}: {e.strerror}") from None
    _require_folder(out, st)
    _probe(out, out)


def check_out_file(path: Path) -> None:
    """Refuse an output file that is a folder, a link or not a regular file, or whose folder
    cannot be written, before any work is done (raises :class:`UnsafeWrite`)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UnsafeWrite(f"{path}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeWrite(f"{path} is a symbolic link; refusing to write through it")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeWrite(f"{path} exists and is not a regular file")
    check_out_dir(path.parent)


def check_targets(root: Path, relatives: Iterable[str | Path]) -> None:
    """Refuse, before anything of a set of outputs is written, what :func:`writer` would
    refuse part-way through it: ``root`` or a folder below it that is a link or not a folder,
    a target that is a link or not a regular file (raises :class:`UnsafeWrite` with the
    writer's message). Folders not there yet are fine: the writer creates them."""
    root = Path(os.path.abspath(root))
    for relative in relatives:
        *folders, name = Path(relative).parts
        folder = root
        try:
            for part in folders:
                _require_folder(folder, os.lstat(folder))
                folder = folder / part
            _require_folder(folder, os.lstat(folder))
            _check_target(folder / name)
        except FileNotFoundError:
            continue  # a folder the writer creates: nothing in it to refuse
        except UnsafeWrite:
            raise
        except OSError as e:
            raise UnsafeWrite(f"{folder}: {e.strerror}") from None


def _probe(folder: Path, out: Path) -> None:
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".careful-probe-", dir=folder))
    except OSError as e:
        raise UnsafeWrite(f"{out}: not writable ({e.strerror or e})") from None


__all__ = ["UnsafeWrite", "check_out_dir", "check_out_file", "check_targets", "write_bytes",
           "write_text", "writer"]
