"""The annotation database file: opening it safely, its schema, and write transactions.

Nothing here knows what a label means. :class:`Connection` is handed by the
:class:`~.store.Store` to the sessions it opens (:mod:`.sessions`), which alone hold the label
queries. A file that is not SQLite, lacks the store's tables or carries another schema version
is refused with a :class:`DatabaseError` before anything is read or written.

Every write runs in a ``BEGIN IMMEDIATE`` transaction (nested ones are savepoints) on a WAL
database with a busy timeout, so a killed process loses nothing already committed and several
processes can label at the same time on one file.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from careful_engine.annotation.errors import AnnotationError

SCHEMA_VERSION = 2
SQLITE_MAGIC = b"SQLite format 3\x00"
FILE_MODE = 0o660  # a new database file: its owner and group (the team), nobody else

# table -> columns every version of the store needs (more columns are tolerated)
TABLES: dict[str, tuple[str, ...]] = {
    "meta": ("key", "value"),
    "annotators": ("name", "kind", "model", "created", "account"),
    "rounds": ("name", "created", "created_by", "declarations_source", "declarations_sha256",
               "blind", "closed_at", "closed_by", "note"),
    "round_functions": ("round", "function", "class", "kind", "proposed", "extra", "position"),
    "round_annotators": ("round", "annotator", "added", "submitted_at"),
    "labels": ("id", "round", "annotator", "function", "destructive", "reason", "created",
               "updated"),
    "label_revisions": ("id", "round", "annotator", "function", "destructive", "reason",
                        "created", "replaced"),
    "decisions": ("id", "round", "function", "destructive", "author", "reason", "created"),
    "reveals": ("id", "round", "who", "what", "override", "created"),
    "adjudications": ("id", "round", "author", "policy", "params", "boundary", "path",
                      "destructive", "created"),
    "llm_calls": ("id", "round", "annotator", "function", "model", "request_id", "ok", "error",
                  "stop_reason", "input_tokens", "output_tokens",
                  "cache_creation_input_tokens", "cache_read_input_tokens", "response",
                  "created"),
}


class DatabaseError(AnnotationError):
    """The file is not a usable annotation database (not SQLite, damaged, other schema)."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Connection:
    """One SQLite connection to an annotation database, checked (or created) on opening."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0):
        self.path = Path(path)
        self._depth = 0
        _check_file(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DatabaseError(f"{self.path}: cannot create its folder ({e.strerror})") from e
        _create_private(self.path)
        try:
            conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise DatabaseError(f"{self.path}: cannot open the database ({e})") from e
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            self.db = sqlite_utils.Database(conn)
            self._init_schema()  # refuses a foreign file before anything is written to it
            if self.db.journal_mode != "wal":
                self.db.enable_wal()
        except sqlite3.Error as e:
            conn.close()
            raise DatabaseError(f"{self.path}: not a usable annotation database ({e})") from e
        except DatabaseError:
            conn.close()
            raise

    def close(self) -> None:
        self.db.conn.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite_utils.Database]:
        """One write transaction taking the write lock up front; nested, a savepoint."""
        conn = self.db.conn
        if self._depth:
            name = f"sp{self._depth}"
            conn.execute(f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield self.db
            except BaseException:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
                raise
            finally:
                self._depth -= 1
            conn.execute(f"RELEASE {name}")
            return
        conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self.db
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            self._depth = 0
        conn.execute("COMMIT")

    def rows(self, sql: str, params: Iterable[Any] | dict = ()) -> list[dict]:
        return list(self.db.query(sql, params if isinstance(params, dict) else list(params)))

    def execute(self, sql: str, params: Iterable[Any] = ()) -> int:
        """Run one statement that returns no rows; returns the number of rows changed."""
        return self.db.conn.execute(sql, list(params)).rowcount

    def insert(self, table: str, row: dict) -> int:
        """Insert one row (inside a transaction); returns its rowid."""
        cur = self.db.conn.execute(
            f"insert into [{table}] ({', '.join(f'[{k}]' for k in row)}) "
            f"values ({', '.join('?' for _ in row)})", list(row.values()),
        )
        return int(cur.lastrowid or 0)

    # ------------------------------------------------------------ schema

    def _init_schema(self) -> None:
        tables = set(self.db.table_names())
        if not tables:
            with self.tx() as db:
                _create(db)
            return
        if "meta" not in tables:
            raise DatabaseError(
                f"{self.path}: not a careful annotation database (it has tables "
                f"{', '.join(sorted(tables)[:6])} but no 'meta')")
        version = self.rows("select value from meta where key = 'schema'")
        got = str(version[0]["value"]) if version else "none"
        if got == "1":
            with self.tx() as db:
                _migrate_1_to_2(db)
        elif got != str(SCHEMA_VERSION):
            raise DatabaseError(
                f"{self.path}: schema version {got!r}, this careful reads version "
                f"{SCHEMA_VERSION} (and upgrades version 1)")
        self._verify()

    def _verify(self) -> None:
        tables = set(self.db.table_names())
        for table, columns in TABLES.items():
            if table not in tables:
                raise DatabaseError(
                    f"{self.path}: table {table!r} is missing: the file is damaged or "
                    "was written by another program")
            have = {c.name for c in self.db[table].columns}
            missing = [c for c in columns if c not in have]
            if missing:
                raise DatabaseError(
                    f"{self.path}: table {table!r} lacks columns {', '.join(missing)}")


def _create_private(path: Path) -> None:
    """Create a missing database file for its owner and group only (``FILE_MODE`` under the
    umask; SQLite would make it readable by every login on the machine): it holds every
    annotator's labels and reasons. Its journal files take its permissions. An existing file
    is left as it is."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE))
    except FileExistsError:
        return
    except OSError as e:
        raise DatabaseError(f"{path}: cannot create it ({e.strerror})") from e


def _check_file(path: Path) -> None:
    """Refuse what cannot be an SQLite file before SQLite touches it, and a symbolic link at
    the database's path or at its journal files' (SQLite would write through it)."""
    for side in (path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal")):
        if side.is_symlink():
            raise DatabaseError(f"{side}: a symbolic link; careful does not write through it")
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise DatabaseError(f"{path}: cannot read it ({e.strerror})") from e
    if stat.S_ISLNK(st.st_mode):
        raise DatabaseError(f"{path}: a symbolic link; careful does not write through it")
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseError(f"{path}: not a regular file")
    if st.st_size == 0:
        return
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as e:
        raise DatabaseError(f"{path}: cannot read it ({e.strerror})") from e
    if head != SQLITE_MAGIC:
        raise DatabaseError(f"{path}: not an SQLite database")


def _create(db: sqlite_utils.Database) -> None:
    t = dict(if_not_exists=True)
    db.create_table("meta", {"key": str, "value": str}, pk="key", **t)
    db.execute("insert or replace into meta (key, value) values ('schema', ?)",
               [SCHEMA_VERSION])
    db.create_table(
        "annotators",
        {"name": str, "kind": str, "model": str, "created": str, "account": str},
        pk="name", not_null={"kind", "created"}, **t,
    )
    db.create_table(
        "rounds",
        {"name": str, "created": str, "created_by": str, "declarations_source": str,
         "declarations_sha256": str, "blind": int, "closed_at": str, "closed_by": str,
         "note": str},
        pk="name", not_null={"created", "declarations_sha256", "blind"}, **t,
    )
    db.create_table(
        "round_functions",
        {"round": str, "function": str, "class": str, "kind": str, "proposed": int,
         "extra": str, "position": int},
        pk=("round", "function"), foreign_keys=[("round", "rounds", "name")],
        not_null={"class", "kind", "position"}, **t,
    )
    db.create_table(
        "round_annotators",
        {"round": str, "annotator": str, "added": str, "submitted_at": str},
        pk=("round", "annotator"),
        foreign_keys=[("round", "rounds", "name"), ("annotator", "annotators", "name")],
        **t,
    )
    label_cols = {"id": int, "round": str, "annotator": str, "function": str,
                  "destructive": int, "reason": str, "created": str}
    db.create_table(
        "labels", {**label_cols, "updated": str}, pk="id",
        foreign_keys=[("round", "rounds", "name"), ("annotator", "annotators", "name")],
        not_null={"round", "annotator", "function", "destructive", "reason", "created"},
        **t,
    )
    db["labels"].create_index(["round", "annotator", "function"], unique=True,
                              if_not_exists=True)
    # earlier versions of a label its annotator revised before submitting
    db.create_table("label_revisions", {**label_cols, "replaced": str}, pk="id", **t)
    db.create_table(
        "decisions",
        {"id": int, "round": str, "function": str, "destructive": int, "author": str,
         "reason": str, "created": str},
        pk="id", foreign_keys=[("round", "rounds", "name")],
        not_null={"round", "function", "destructive", "author", "reason"}, **t,
    )
    db.create_table(
        "reveals",
        {"id": int, "round": str, "who": str, "what": str, "override": str, "created": str},
        pk="id", foreign_keys=[("round", "rounds", "name")], **t,
    )
    db.create_table(
        "adjudications",
        {"id": int, "round": str, "author": str, "policy": str, "params": str,
         "boundary": str, "path": str, "destructive": str, "created": str},
        pk="id", foreign_keys=[("round", "rounds", "name")], **t,
    )
    db.create_table(
        "llm_calls",
        {"id": int, "round": str, "annotator": str, "function": str, "model": str,
         "request_id": str, "ok": int, "error": str, "stop_reason": str,
         "input_tokens": int, "output_tokens": int,
         "cache_creation_input_tokens": int, "cache_read_input_tokens": int,
         "response": str, "created": str},
        pk="id", **t,
    )


def _migrate_1_to_2(db: sqlite_utils.Database) -> None:
    """Version 2 adds who may open an annotator's labels, what a reveal showed, and who
    closed a round."""
    tables = set(db.table_names())
    if "rounds" in tables and "closed_by" not in {c.name for c in db["rounds"].columns}:
        db.execute("alter table rounds add column closed_by text")
    if "annotators" in tables and "account" not in {c.name for c in db["annotators"].columns}:
        db.execute("alter table annotators add column account text")
    if "reveals" in tables and "what" not in {c.name for c in db["reveals"].columns}:
        db.execute("alter table reveals add column what text")
    db.execute("update meta set value = ? where key = 'schema'", [SCHEMA_VERSION])


__all__ = ["SCHEMA_VERSION", "Connection", "DatabaseError", "now"]
