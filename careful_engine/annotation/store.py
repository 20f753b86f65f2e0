"""The annotation store: SQLite through sqlite-utils, one transaction per label.

Annotators label functions in *rounds*. What a caller may read depends on the session it holds
(:mod:`.sessions`); the store itself offers no public way to read labels:

- an :class:`AnnotatorSession` reads the round's functions and its own labels, and writes its
  own labels; in a blind round it can never read another annotator's labels;
- an :class:`AdjudicationSession` reads every label, the agreement and the splits, and records
  manual decisions; it opens only once every annotator of the round has submitted, or with an
  explicit override whose author and reason are recorded.

Every write runs in its own ``BEGIN IMMEDIATE`` transaction on a WAL database with a busy
timeout, so a killed process loses nothing already committed and several processes can label
at the same time on one file.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from .errors import AnnotationError, BlindnessError, LabelError, RoundError
from .signals import FunctionInput, RoundInputs

if TYPE_CHECKING:
    from .sessions import AdjudicationSession, AnnotatorSession

SCHEMA_VERSION = 1
ANNOTATOR_KINDS = ("human", "llm")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def repo_root() -> Path:
    """The repository root: the parent of the careful_engine package."""
    return Path(__file__).resolve().parents[2]


def default_db_path() -> Path:
    """``$CAREFUL_DB`` if set, else ``annotations/careful.db`` in the repository."""
    env = os.environ.get("CAREFUL_DB")
    return Path(env) if env else repo_root() / "annotations" / "careful.db"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise AnnotationError(
            f"invalid {what} name {name!r}: use letters, digits, '.', '_' or '-' (max 64)"
        )
    return name


def reason_rule(function: FunctionInput, destructive: bool, reason: str) -> str | None:
    """Why a reason is required and missing, or None when the label is acceptable."""
    if reason.strip():
        return None
    if destructive:
        return f"{function.name}: a reason is required for every 'destructive' label"
    if function.proposed is not None and destructive != function.proposed:
        return (
            f"{function.name}: a reason is required when departing from the signals' proposal "
            f"({'destructive' if function.proposed else 'not destructive'})"
        )
    return None


@dataclass(frozen=True)
class Annotator:
    name: str
    kind: str  # human | llm
    model: str | None
    created: str


@dataclass(frozen=True)
class Round:
    name: str
    created: str
    created_by: str
    declarations_source: str
    declarations_sha256: str
    blind: bool
    note: str


@dataclass(frozen=True)
class Label:
    annotator: str
    function: str
    destructive: bool
    reason: str
    created: str
    updated: str


@dataclass(frozen=True)
class Decision:
    """A manual adjudication decision; decisions are appended, the latest per function wins."""

    id: int
    function: str
    destructive: bool
    author: str
    reason: str
    created: str


@dataclass(frozen=True)
class Progress:
    annotator: str
    kind: str
    model: str | None
    labelled: int
    total: int
    submitted: str | None


@dataclass(frozen=True)
class RoundStatus:
    round: Round
    functions: int
    writes: int
    progress: tuple[Progress, ...]
    closed: bool
    reveals: tuple[dict, ...]  # adjudication sessions opened: who, when, override reason


class Store:
    """One connection to an annotation database (created, with its schema, on first use)."""

    def __init__(self, path: str | Path | None = None, *, timeout: float = 30.0):
        self.path = Path(path) if path is not None else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        self.db = sqlite_utils.Database(conn)
        if self.db.journal_mode != "wal":
            self.db.enable_wal()
        self._init_schema()

    # ------------------------------------------------------------ plumbing

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite_utils.Database]:
        """One write transaction, taking the write lock up front (waits up to the timeout)."""
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _rows(self, sql: str, params: Iterable[Any] | dict = ()) -> list[dict]:
        return list(self.db.query(sql, params if isinstance(params, dict) else list(params)))

    def _init_schema(self) -> None:
        if "meta" in self.db.table_names():
            version = self._rows("select value from meta where key = 'schema'")
            if version and int(version[0]["value"]) != SCHEMA_VERSION:
                raise AnnotationError(
                    f"{self.path}: schema version {version[0]['value']}, expected {SCHEMA_VERSION}"
                )
            return
        with self._tx() as db:
            t = dict(if_not_exists=True)
            db.create_table("meta", {"key": str, "value": str}, pk="key", **t)
            db.execute(
                "insert or ignore into meta (key, value) values ('schema', ?)", [SCHEMA_VERSION]
            )
            db.create_table(
                "annotators",
                {"name": str, "kind": str, "model": str, "created": str},
                pk="name", not_null={"kind", "created"}, **t,
            )
            db.create_table(
                "rounds",
                {"name": str, "created": str, "created_by": str, "declarations_source": str,
                 "declarations_sha256": str, "blind": int, "closed_at": str, "note": str},
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
            db["labels"].create_index(
                ["round", "annotator", "function"], unique=True, if_not_exists=True
            )
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
                {"id": int, "round": str, "who": str, "override": str, "created": str},
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

    # ------------------------------------------------------------ annotators

    def annotator(self, name: str) -> Annotator | None:
        rows = self._rows("select * from annotators where name = ?", [name])
        return Annotator(**rows[0]) if rows else None

    def annotators(self) -> list[Annotator]:
        return [Annotator(**r) for r in self._rows("select * from annotators order by name")]

    def add_annotator(self, name: str, kind: str = "human", model: str | None = None) -> Annotator:
        """Register an annotator (a no-op if it exists with the same kind and model)."""
        check_name(name, "annotator")
        if kind not in ANNOTATOR_KINDS:
            raise AnnotationError(f"annotator kind must be one of {ANNOTATOR_KINDS}, not {kind!r}")
        if kind == "llm" and not model:
            raise AnnotationError(f"{name}: a language-model annotator needs its model name")
        if kind == "human" and model:
            raise AnnotationError(f"{name}: a human annotator has no model")
        with self._tx() as db:
            existing = self.annotator(name)
            if existing is None:
                db["annotators"].insert(
                    {"name": name, "kind": kind, "model": model, "created": now()}
                )
                existing = self.annotator(name)
            elif (existing.kind, existing.model) != (kind, model):
                described = existing.model and f"{existing.kind}, {existing.model}"
                raise AnnotationError(
                    f"annotator {name} exists already as {described or existing.kind}"
                )
        assert existing is not None
        return existing

    # ------------------------------------------------------------ rounds

    def new_round(
        self,
        name: str,
        inputs: RoundInputs,
        annotators: Iterable[str] = (),
        *,
        blind: bool = True,
        created_by: str = "",
        note: str = "",
    ) -> Round:
        """Create a round over ``inputs`` (its functions, kinds and proposals are frozen)."""
        check_name(name, "round")
        if not inputs.functions:
            raise RoundError(f"round {name}: no functions to label")
        names = list(dict.fromkeys(annotators))
        missing = [a for a in names if self.annotator(a) is None]
        if missing:
            raise AnnotationError(f"unknown annotators: {', '.join(missing)} (add them first)")
        with self._tx() as db:
            if self._rows("select 1 from rounds where name = ?", [name]):
                raise RoundError(f"round {name} exists already")
            db["rounds"].insert({
                "name": name, "created": now(), "created_by": created_by,
                "declarations_source": inputs.source, "declarations_sha256": inputs.sha256,
                "blind": int(blind), "closed_at": None, "note": note,
            })
            db["round_functions"].insert_all(
                {"round": name, "function": f.name, "class": f.cls, "kind": f.kind,
                 "proposed": None if f.proposed is None else int(f.proposed),
                 "extra": json.dumps(f.extra, sort_keys=True), "position": i}
                for i, f in enumerate(inputs.functions.values())
            )
            for a in names:
                db["round_annotators"].insert(
                    {"round": name, "annotator": a, "added": now(), "submitted_at": None}
                )
        return self.round(name)

    def round(self, name: str) -> Round:
        rows = self._rows("select * from rounds where name = ?", [name])
        if not rows:
            known = [r["name"] for r in self._rows("select name from rounds order by created")]
            raise RoundError(f"no round {name!r}; rounds: {', '.join(known) or 'none'}")
        r = rows[0]
        return Round(
            name=r["name"], created=r["created"], created_by=r["created_by"] or "",
            declarations_source=r["declarations_source"] or "",
            declarations_sha256=r["declarations_sha256"], blind=bool(r["blind"]),
            note=r["note"] or "",
        )

    def rounds(self) -> list[Round]:
        return [self.round(r["name"]) for r in self._rows("select name from rounds order by created")]

    def round_functions(self, round_name: str) -> list[FunctionInput]:
        self.round(round_name)
        return [
            FunctionInput(
                name=r["function"], cls=r["class"], kind=r["kind"],
                proposed=None if r["proposed"] is None else bool(r["proposed"]),
                extra=json.loads(r["extra"] or "{}"),
            )
            for r in self._rows(
                "select * from round_functions where round = ? order by position", [round_name]
            )
        ]

    def round_annotators(self, round_name: str) -> list[str]:
        return [
            r["annotator"] for r in self._rows(
                "select annotator from round_annotators where round = ? order by annotator",
                [round_name],
            )
        ]

    def add_to_round(self, round_name: str, annotator: str) -> None:
        """Add a registered annotator to a round (a no-op if it is in the round already)."""
        self.round(round_name)
        if self.annotator(annotator) is None:
            raise AnnotationError(f"unknown annotator {annotator!r} (add it first)")
        with self._tx() as db:
            db.execute(
                "insert or ignore into round_annotators (round, annotator, added) values (?, ?, ?)",
                [round_name, annotator, now()],
            )

    def is_closed(self, round_name: str) -> bool:
        """True once the round has annotators and every one of them has submitted."""
        rows = self._rows(
            "select count(*) as n, count(submitted_at) as done from round_annotators "
            "where round = ?", [round_name],
        )
        return rows[0]["n"] > 0 and rows[0]["n"] == rows[0]["done"]

    def status(self, round_name: str) -> RoundStatus:
        """Progress per annotator: counts only, never labels."""
        rnd = self.round(round_name)
        functions = self.round_functions(round_name)
        rows = self._rows(
            "select ra.annotator, a.kind, a.model, ra.submitted_at, "
            "(select count(*) from labels l where l.round = ra.round "
            " and l.annotator = ra.annotator) as labelled "
            "from round_annotators ra join annotators a on a.name = ra.annotator "
            "where ra.round = ? order by ra.annotator", [round_name],
        )
        progress = tuple(
            Progress(r["annotator"], r["kind"], r["model"], r["labelled"], len(functions),
                     r["submitted_at"])
            for r in rows
        )
        reveals = tuple(self._rows(
            "select who, override, created from reveals where round = ? order by id",
            [round_name],
        ))
        return RoundStatus(
            rnd, len(functions), sum(f.kind == "write" for f in functions), progress,
            self.is_closed(round_name), reveals,
        )

    # ------------------------------------------------------------ sessions

    def annotator_session(self, round_name: str, annotator: str) -> AnnotatorSession:
        """The labelling session of one annotator of a round (blind to the others)."""
        from .sessions import AnnotatorSession

        return AnnotatorSession(self, round_name, annotator)

    def adjudication_session(
        self, round_name: str, who: str, *, override: str | None = None
    ) -> AdjudicationSession:
        """A session that sees every label of a round.

        It opens once every annotator of the round has submitted (or at any time in a round
        that is not blind); otherwise only with ``override``, a reason that is recorded.
        """
        from .sessions import AdjudicationSession

        return AdjudicationSession(self, round_name, who, override=override)

    def _open_labels(self, round_name: str, who: str, override: str | None) -> bool:
        """Check that ``who`` may see the round's labels now, and record it.

        Returns whether an override was needed (and recorded).
        """
        rnd = self.round(round_name)
        if not who or not who.strip():
            raise AnnotationError("an adjudication session needs the name of who opens it")
        closed = self.is_closed(round_name)
        if rnd.blind and not closed and not (override and override.strip()):
            pending = [p.annotator for p in self.status(round_name).progress
                       if p.submitted is None]
            raise BlindnessError(
                f"round {round_name} is blind and still open: "
                f"{', '.join(pending) or 'no annotator'} "
                f"{'has' if len(pending) == 1 else 'have'} not submitted. The labels and "
                "the agreement open when every annotator has submitted, or with an "
                "explicit override (which is recorded)"
            )
        recorded = override.strip() if override and rnd.blind and not closed else None
        with self._tx() as db:
            db["reveals"].insert(
                {"round": round_name, "who": who, "override": recorded, "created": now()}
            )
        return recorded is not None

    # ------------------------------------------------------------ label rows (private)

    def _label_rows(self, round_name: str, annotator: str | None = None) -> list[Label]:
        sql = "select * from labels where round = ?"
        params: list[Any] = [round_name]
        if annotator is not None:
            sql += " and annotator = ?"
            params.append(annotator)
        return [
            Label(r["annotator"], r["function"], bool(r["destructive"]), r["reason"],
                  r["created"], r["updated"] or r["created"])
            for r in self._rows(sql + " order by id", params)
        ]

    def _submitted_at(self, round_name: str, annotator: str) -> str | None:
        rows = self._rows(
            "select submitted_at from round_annotators where round = ? and annotator = ?",
            [round_name, annotator],
        )
        return rows[0]["submitted_at"] if rows else None

    def _write_label(
        self, round_name: str, annotator: str, fn: FunctionInput, destructive: bool, reason: str,
        created: str | None = None,
    ) -> Label:
        if not isinstance(destructive, bool):
            raise LabelError(f"{fn.name}: the label must be true or false, not {destructive!r}")
        reason = (reason or "").strip()
        problem = reason_rule(fn, destructive, reason)
        if problem:
            raise LabelError(problem)
        stamp = now()
        with self._tx() as db:
            if self._submitted_at(round_name, annotator):
                raise LabelError(f"{annotator} has submitted round {round_name}; labels are final")
            old = self._rows(
                "select * from labels where round = ? and annotator = ? and function = ?",
                [round_name, annotator, fn.name],
            )
            if old:
                prev = {k: v for k, v in old[0].items() if k not in ("id", "updated")}
                db["label_revisions"].insert({**prev, "replaced": stamp})
                db.execute(
                    "update labels set destructive = ?, reason = ?, updated = ? where id = ?",
                    [int(destructive), reason, stamp, old[0]["id"]],
                )
            else:
                db["labels"].insert({
                    "round": round_name, "annotator": annotator, "function": fn.name,
                    "destructive": int(destructive), "reason": reason,
                    "created": created or stamp, "updated": created or stamp,
                })
        return next(lb for lb in self._label_rows(round_name, annotator) if lb.function == fn.name)

    def _import_labels(
        self,
        round_name: str,
        annotator: str,
        labels: list[tuple[str, bool, str, str | None, str | None]],
        submitted: str | None,
    ) -> int:
        """Insert a whole label set in one transaction (see :mod:`.release`); 0 if present."""
        functions = {f.name: f for f in self.round_functions(round_name)}
        rows = []
        for name, destructive, reason, created, updated in labels:
            if name not in functions:
                raise LabelError(f"{name!r} is not a function of round {round_name}")
            problem = reason_rule(functions[name], destructive, reason)
            if problem:
                raise LabelError(f"{annotator}: {problem}")
            stamp = created or now()
            rows.append({"round": round_name, "annotator": annotator, "function": name,
                         "destructive": int(destructive), "reason": reason.strip(),
                         "created": stamp, "updated": updated or stamp})
        if submitted and len(rows) != len(functions):
            raise LabelError(f"{annotator}: a submitted label set must label every function")
        with self._tx() as db:
            existing = self._label_rows(round_name, annotator)
            if existing:
                have = {(lb.function, lb.destructive, lb.reason) for lb in existing}
                if have == {(r["function"], bool(r["destructive"]), r["reason"]) for r in rows}:
                    return 0
                raise LabelError(
                    f"{annotator} has other labels in round {round_name} already; "
                    "import under another round or annotator name"
                )
            db.execute(
                "insert or ignore into round_annotators (round, annotator, added) values (?, ?, ?)",
                [round_name, annotator, now()],
            )
            db["labels"].insert_all(rows)
            if submitted:
                db.execute(
                    "update round_annotators set submitted_at = ? "
                    "where round = ? and annotator = ?", [submitted, round_name, annotator],
                )
                if self.is_closed(round_name):
                    db.execute(
                        "update rounds set closed_at = ? where name = ? and closed_at is null",
                        [now(), round_name],
                    )
        return len(rows)

    def _submit(self, round_name: str, annotator: str, when: str | None = None) -> str:
        functions = self.round_functions(round_name)
        stamp = when or now()
        with self._tx() as db:
            if self._submitted_at(round_name, annotator):
                raise LabelError(f"{annotator} has submitted round {round_name} already")
            done = {lb.function for lb in self._label_rows(round_name, annotator)}
            missing = [f.name for f in functions if f.name not in done]
            if missing:
                raise LabelError(
                    f"{annotator} cannot submit round {round_name}: {len(missing)} functions "
                    f"unlabelled ({', '.join(missing[:8])}{', ...' if len(missing) > 8 else ''})"
                )
            db.execute(
                "update round_annotators set submitted_at = ? where round = ? and annotator = ?",
                [stamp, round_name, annotator],
            )
            if self.is_closed(round_name):
                db.execute(
                    "update rounds set closed_at = ? where name = ? and closed_at is null",
                    [stamp, round_name],
                )
        return stamp
