"""Raw access to an annotation database file, for tests that inspect what was stored.

The engine offers no way around its sessions; a test looks at the file itself.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlite_utils


def raw(path: str | Path) -> sqlite_utils.Database:
    """A separate, plain connection to the database file at ``path``."""
    return sqlite_utils.Database(sqlite3.connect(str(path)))


def rows(path: str | Path, sql: str, params: list | tuple = ()) -> list[dict]:
    db = raw(path)
    try:
        return list(db.query(sql, list(params)))
    finally:
        db.conn.close()
