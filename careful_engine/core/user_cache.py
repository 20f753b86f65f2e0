"""The user's cache folder for careful (reference cache, bfcl's scratch root, workbench scores,
internal-error logs), one definition of where it is, and its folders made without following
planted links.

Where: ``$CAREFUL_CACHE_DIR``, else ``$XDG_CACHE_HOME/careful`` (an absolute
``XDG_CACHE_HOME`` only), else ``~/.cache/careful``. The folders above it are the user's (they
may be links, as ``~/.cache`` sometimes is); that folder and the ones careful makes in it must
be real folders owned by this user, so that nothing careful writes there lands where a planted
link points.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeCache(OSError):
    """A cache folder that is a link, not a folder, or someone else's."""


def cache_root() -> Path:
    """``$CAREFUL_CACHE_DIR``, else ``$XDG_CACHE_HOME/careful``, else ``~/.cache/careful``."""
    explicit = os.environ.get("CAREFUL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "careful"


def cache_dir(name: str) -> Path:
    """``<cache root>/<name>``, made if missing (mode 0700); :class:`UnsafeCache` where it or
    the cache root is a link, not a folder, or another user's."""
    root = cache_root()
    if not root.parent.is_dir():  # (made only where missing: no needless mkdir)
        root.parent.mkdir(parents=True, exist_ok=True)
    _own_folder(root)
    return _own_folder(root / name)


def _own_folder(path: Path) -> Path:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeCache(0, f"{path} is a symbolic link; careful does not write through it")
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise UnsafeCache(0, f"{path} is not a folder of this user's")
    return path
