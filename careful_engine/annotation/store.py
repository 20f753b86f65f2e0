"""The annotation store: annotators, rounds and their rosters, progress, the reveal log.

The store never reads a label. Labels are read and written only through the sessions it opens
(:mod:`.sessions`), which alone hold the label queries; it hands them the database connection
(:class:`~.database.Connection`) and keeps it otherwise to itself:

- an :class:`~.sessions.AnnotatorSession` reads the round's functions and its own labels, and
  writes its own labels; in a blind round it never reads another annotator's labels, and a
  login other than the one that labelled under a name needs a recorded override to open it;
- an :class:`~.sessions.AdjudicationSession` reads every label, the agreement and the splits,
  and records manual decisions; it opens only once the round is closed, or with an explicit
  override whose author and reason go to the round's reveal log;
- an :class:`~.sessions.ImportSession` brings a label set made elsewhere in, in one
  transaction.

Names (annotators, rounds, who opens what) are checked at every entry (:mod:`.names`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from careful_engine.annotation.database import SCHEMA_VERSION, Connection, DatabaseError, now
from careful_engine.annotation.errors import AnnotationError, RoundError, RowError
from careful_engine.annotation.names import (
    check_line,
    check_model,
    check_name,
    check_reason,
    confusable,
)
from careful_engine.annotation.records import (
    Annotator,
    Decision,
    Label,
    Progress,
    Round,
    RoundStatus,
)
from careful_engine.annotation.sessions import (
    CLOSED_BY_MAX,
    AdjudicationSession,
    AnnotatorSession,
    ImportSession,
    annotator_row,
    check_person,
    checked_rows,
    current_account,
    reason_rule,
    round_row,
)
from careful_engine.annotation.signals import FunctionInput, RoundInputs, extra_problem
from careful_engine.core.json_values import refuse_constant
from careful_engine.core.safe_text import visible

ANNOTATOR_KINDS = ("human", "llm")


T = TypeVar("T")


def repo_root() -> Path:
    """The repository root: the parent of the careful_engine package."""
    return Path(__file__).resolve().parents[2]


def default_db_path() -> Path:
    """``$CAREFUL_DB`` if set, else ``annotations/careful.db`` in the repository."""
    env = os.environ.get("CAREFUL_DB")
    return Path(env) if env else repo_root() / "annotations" / "careful.db"


class Store:
    """One connection to an annotation database (created, with its schema, on first use).

    A file that is not an annotation database raises :class:`~.database.DatabaseError`.
    """

    def __init__(self, path: str | Path | None = None, *, timeout: float = 30.0):
        self.path = Path(path) if path is not None else default_db_path()
        self.__conn = Connection(self.path, timeout=timeout)
        self.problems: list[str] = []  # rows left out as not careful's: one line each

    def problem(self, where: str, reason: str) -> None:
        """Note a row of the database that the checks refuse (it is left out) as one line
        ``db-path [round/annotator/function]: reason``, once."""
        line = f"{visible(str(self.path))} [{where}]: {visible(reason)}"
        if line not in self.problems:
            self.problems.append(line)

    def close(self) -> None:
        self.__conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def integrity_check(self) -> str:
        """SQLite's ``integrity_check`` of the file ("ok" when sound)."""
        return str(self.__conn.rows("pragma integrity_check")[0]["integrity_check"])

    def _q(self, sql: str, params: Iterable | dict = ()) -> list[dict]:
        return self.__conn.rows(sql, params)

    # ------------------------------------------------------------ annotators

    def _row_error(self, where: str, e: AnnotationError) -> RowError:
        return RowError(f"{visible(str(self.path))} [{visible(where)}]: {visible(e)}; the "
                        "database was changed by something other than careful")

    def annotator(self, name: str) -> Annotator | None:
        """The annotator, None if unknown; :class:`RowError` where its row is not careful's."""
        rows = self._q("select * from annotators where name = ?", [check_name(name)])
        if not rows:
            return None
        try:
            return annotator_row(rows[0])
        except AnnotationError as e:
            raise self._row_error(name, e) from None

    def annotators(self) -> list[Annotator]:
        """Every annotator; a row that is not careful's is left out, a problem noted."""
        return self._checked("select * from annotators order by name", annotator_row)

    def _checked(self, sql: str, convert: Callable[[Any], T]) -> list[T]:
        """The rows of ``sql`` as ``convert`` makes them; a row it refuses (not careful's) is
        left out, a problem noted under its name (:func:`.sessions.checked_rows`)."""
        return checked_rows(self, self._q(sql), convert, lambda r: (r["name"],))

    def add_annotator(self, name: str, kind: str = "human", model: str | None = None) -> Annotator:
        """Register an annotator (a no-op if it exists with the same kind and model).

        A name that differs from an existing one only by case or Unicode form is refused.
        """
        name = check_name(name)
        if kind not in ANNOTATOR_KINDS:
            raise AnnotationError(f"annotator kind must be one of {ANNOTATOR_KINDS}, not {kind!r}")
        if kind == "llm" and not model:
            raise AnnotationError(f"{name}: a language-model annotator needs its model name")
        if kind == "human" and model:
            raise AnnotationError(f"{name}: a human annotator has no model")
        if model is not None:
            model = check_model(model)
        with self.__conn.tx():
            existing = self.annotator(name)
            if existing is None:
                twin = confusable(name, [a.name for a in self.annotators()])
                if twin:
                    raise AnnotationError(
                        f"annotator name {name!r} would be confused with the existing "
                        f"annotator {twin!r} (names that differ only by case or Unicode "
                        "form are one name); use that one or another name")
                self.__conn.insert("annotators", {"name": name, "kind": kind, "model": model,
                                                  "created": now(), "account": None})
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
        name = check_name(name, "round")
        created_by = check_person(created_by, "creator") if created_by else ""
        note = check_reason(note, "note")
        # as the round's row is read back (round_row): a path careful would refuse there is
        # refused here, before anything is written
        source = check_line(inputs.source, "declarations file name")
        if not inputs.functions:
            raise RoundError(f"round {name}: no functions to label")
        names = list(dict.fromkeys(check_name(a) for a in annotators))
        with self.__conn.tx() as db:
            missing = [a for a in names if self.annotator(a) is None]
            if missing:
                raise AnnotationError(f"unknown annotators: {', '.join(missing)} (add them first)")
            if self._q("select 1 from rounds where name = ?", [name]):
                raise RoundError(f"round {name} exists already")
            twin = confusable(name, [r["name"] for r in self._q("select name from rounds")])
            if twin:
                raise RoundError(f"round name {name!r} would be confused with round {twin!r}")
            self.__conn.insert("rounds", {
                "name": name, "created": now(), "created_by": created_by,
                "declarations_source": source, "declarations_sha256": inputs.sha256,
                "blind": int(blind), "closed_at": None, "note": note,
            })
            db["round_functions"].insert_all(
                {"round": name, "function": f.name, "class": f.cls, "kind": f.kind,
                 "proposed": None if f.proposed is None else int(f.proposed),
                 "extra": json.dumps(f.extra, sort_keys=True), "position": i}
                for i, f in enumerate(inputs.functions.values())
            )
            for a in names:
                self.__conn.insert("round_annotators", {"round": name, "annotator": a,
                                                        "added": now(), "submitted_at": None})
        return self.round(name)

    def round(self, name: str) -> Round:
        name = check_name(name, "round")
        rows = self._q("select * from rounds where name = ?", [name])
        if not rows:
            known = [r["name"] for r in self._q("select name from rounds order by created")]
            raise RoundError(f"no round {name!r}; rounds: {', '.join(known) or 'none'}")
        try:
            return round_row(rows[0])
        except AnnotationError as e:
            raise self._row_error(name, e) from None

    def round_exists(self, name: str) -> bool:
        return bool(self._q("select 1 from rounds where name = ?", [check_name(name, "round")]))

    def rounds(self) -> list[Round]:
        """Every round; a row that is not careful's is left out, a problem noted."""
        return self._checked("select * from rounds order by created", round_row)

    def round_functions(self, round_name: str) -> list[FunctionInput]:
        rnd = self.round(round_name)
        return [
            FunctionInput(
                name=r["function"], cls=r["class"], kind=r["kind"],
                proposed=None if r["proposed"] is None else bool(r["proposed"]),
                extra=self._extra(rnd.name, r["function"], r["extra"]),
            )
            for r in self._q(
                "select * from round_functions where round = ? order by position", [rnd.name]
            )
        ]

    def _extra(self, round_name: str, function: object, text: object) -> dict:
        """A round function's stored inputs, checked (AnnotationError, in one line, where the
        database holds something ``round new`` never writes)."""
        try:
            extra = json.loads(text or "{}", parse_constant=refuse_constant)
        except (ValueError, TypeError, RecursionError) as e:
            reason = "nested too deeply" if isinstance(e, RecursionError) else \
                f"not JSON ({str(e)[:80]})"
            problem: str | None = f"its inputs are {reason}"
        else:
            problem = extra_problem(extra)
        if problem is not None:
            raise AnnotationError(f"{self.path}: round {visible(round_name)}, function "
                                  f"{visible(str(function))}: {problem}; the database was "
                                  "changed by something other than careful")
        return extra

    def round_annotators(self, round_name: str) -> list[str]:
        """The round's roster; a name that is not careful's (edited in the database: control
        characters, markup) is left out, a problem noted, as :meth:`rounds` does."""
        round_name = check_name(round_name, "round")
        return checked_rows(self, self._q("select annotator from round_annotators where "
                                          "round = ? order by annotator", [round_name]),
                            lambda r: check_name(r["annotator"]),
                            lambda r: (round_name, r["annotator"]))

    def roster_final(self, round_name: str) -> str | None:
        """Why no annotator may join or leave the round any more, or None: its creator closed
        it, or its adjudication has begun (a manual decision or an adjudication, its boundary
        written, is recorded): the agreement and the decisions were made on the annotators
        it had then. (Counts only: nothing of a decision is read.)"""
        rnd = self.round(round_name)
        if rnd.closed_by:
            return f"round {rnd.name} was closed by {rnd.closed_by}"
        counts = self._q(
            "select (select count(*) from decisions where round = :r) as decisions, "
            "(select count(*) from adjudications where round = :r) as boundaries",
            {"r": rnd.name})[0]
        done = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in (
            (counts["decisions"], "manual decision"), (counts["boundaries"], "boundary"))
            if n]
        if not done:
            return None
        return (f"the adjudication of round {rnd.name} has begun ({' and '.join(done)} "
                "recorded, on the annotators it had then)")

    def join_refusal(self, round_name: str, annotator: str) -> str | None:
        """Why ``annotator`` may not join the round, in the one wording of ``round add`` and
        ``labels import``; None when it is on the roster already or the roster is not final
        (:meth:`roster_final`)."""
        if annotator in self.round_annotators(round_name):
            return None
        final = self.roster_final(round_name)
        return f"{final}; it takes no new annotator" if final else None

    def new_round_with_roster(
        self,
        name: str,
        inputs: RoundInputs,
        humans: Iterable[str] = (),
        llms: dict[str, str] | None = None,
        *,
        blind: bool = True,
        created_by: str = "",
        note: str = "",
    ) -> Round:
        """Register the roster (people as human annotators, ``llms`` as NAME -> MODEL) and
        create the round on it, all or nothing: what every front end calls. A person's name
        that belongs to a language-model annotator (or the reverse) is refused
        (:meth:`add_annotator`), never put on the roster as what it is not."""
        humans, llms = list(humans), dict(llms or {})
        with self.__conn.tx():
            for who in humans:
                self.add_annotator(who, "human")
            for who, model in llms.items():
                self.add_annotator(who, "llm", model)
            return self.new_round(name, inputs, [*humans, *llms], blind=blind,
                                  created_by=created_by, note=note)

    def add_to_roster(self, round_name: str, humans: Iterable[str] = (),
                      llms: dict[str, str] | None = None, *, by: str) -> list[str]:
        """Register annotators (people as human, ``llms`` as NAME -> MODEL; refused where a
        name belongs to an annotator of the other kind) and add them to a round
        (:meth:`add_to_round`: its creator only), all or nothing. Returns the roster."""
        rnd = self.round(round_name)
        with self.__conn.tx():
            for who in humans:
                self.add_annotator(who, "human")
                self.add_to_round(rnd.name, who, by=by)
            for who, model in (llms or {}).items():
                self.add_annotator(who, "llm", model)
                self.add_to_round(rnd.name, who, by=by)
        return self.round_annotators(rnd.name)

    def add_to_round(self, round_name: str, annotator: str, *, by: str) -> None:
        """Add a registered annotator to a round (only its creator may; a no-op if it is in
        the round already). Refused once the round is closed, by its creator or because every
        annotator submitted (a new one would open it again), and once its adjudication has
        begun (:meth:`roster_final`)."""
        rnd = self.round(round_name)
        annotator = check_name(annotator)
        if self.annotator(annotator) is None:
            raise AnnotationError(f"unknown annotator {annotator!r} (add it first)")
        with self.__conn.tx():
            if annotator in self.round_annotators(rnd.name):
                return
            self._owner(rnd, by, f"add {annotator}")
            refused = self.join_refusal(rnd.name, annotator)
            if refused:
                raise RoundError(refused)
            if self.is_closed(rnd.name):
                raise RoundError(f"every annotator of round {rnd.name} has submitted: it is "
                                 "closed and takes no new annotator (start a new round)")
            self.__conn.execute(
                "insert into round_annotators (round, annotator, added) values (?, ?, ?)",
                [rnd.name, annotator, now()],
            )

    def remove_from_round(self, round_name: str, annotator: str, *, by: str) -> None:
        """Take an annotator off a round's roster (only its creator may; labels are kept but
        no longer count). Refused once the annotator has submitted, the round is closed or
        its adjudication has begun (:meth:`roster_final`)."""
        rnd = self.round(round_name)
        annotator = check_name(annotator)
        self._owner(rnd, by, f"remove {annotator}")
        with self.__conn.tx():
            rows = self._q("select submitted_at from round_annotators "
                           "where round = ? and annotator = ?", [rnd.name, annotator])
            if not rows:
                raise AnnotationError(
                    f"{annotator!r} is not an annotator of round {rnd.name} "
                    f"(annotators: {', '.join(self.round_annotators(rnd.name)) or 'none'})")
            if rows[0]["submitted_at"] or self.is_closed(rnd.name):
                raise RoundError(f"{annotator} has submitted round {rnd.name} (or it is "
                                 "closed): the roster is final")
            final = self.roster_final(rnd.name)
            if final:
                raise RoundError(f"{final}: the roster is final")
            self.__conn.execute("delete from round_annotators where round = ? and annotator = ?",
                             [rnd.name, annotator])

    def close_round(self, round_name: str, *, by: str, account: str | None = None) -> str:
        """Close a round now (only its creator may): labelling stops, and adjudication opens
        on the annotators who submitted. Returns the time it was closed. ``account``: the
        login asking, recorded beside ``by`` where they differ (``--by`` is a name, not an
        identity: closing opens the round's labels)."""
        rnd = self.round(round_name)
        self._owner(rnd, by, "close it")
        closer = check_person(by, "who")
        if account is not None and check_person(account, "login") != closer:
            closer = f"{closer} (login {account})"
        closer = check_line(closer, "closed_by", CLOSED_BY_MAX)  # as round_row reads it
        stamp = now()
        with self.__conn.tx():
            if not self._q("select 1 from round_annotators where round = ? and "
                           "submitted_at is not null", [rnd.name]):
                raise RoundError(f"round {rnd.name}: no annotator has submitted yet")
            self.__conn.execute("update rounds set closed_at = ?, closed_by = ? where name = ?",
                                [stamp, closer, rnd.name])
        return stamp

    def owner_refusal(self, round_name: str, by: str, what: str) -> str | None:
        """Why ``by`` may not ``what`` (change the round's roster, close it: its creator
        only), or None: the one rule, asked by a front end before it offers the change."""
        rnd = self.round(round_name)
        by = check_person(by, "who")
        if rnd.created_by and by != rnd.created_by:
            return f"only {rnd.created_by}, who created round {rnd.name}, may {what}"
        return None

    def _owner(self, rnd: Round, by: str, what: str) -> None:
        refused = self.owner_refusal(rnd.name, by, what)
        if refused:
            raise AnnotationError(refused)

    def is_closed(self, round_name: str) -> bool:
        """True once its creator closed the round, or while it has annotators who have all
        submitted."""
        rnd = self.round(round_name)
        if rnd.closed_by:
            return True
        rows = self._q(
            "select count(*) as n, count(submitted_at) as done from round_annotators "
            "where round = ?", [rnd.name],
        )
        return rows[0]["n"] > 0 and rows[0]["n"] == rows[0]["done"]

    def status(self, round_name: str) -> RoundStatus:
        """Progress per annotator: counts only, never labels; and the reveal log."""
        rnd = self.round(round_name)
        functions = self.round_functions(rnd.name)
        rows = self._q(
            "select ra.annotator, a.kind, a.model, ra.submitted_at, "
            "(select count(*) from labels l where l.round = ra.round "
            " and l.annotator = ra.annotator) as labelled "
            "from round_annotators ra join annotators a on a.name = ra.annotator "
            "where ra.round = ? order by ra.annotator", [rnd.name],
        )
        progress = tuple(
            Progress(r["annotator"], r["kind"], r["model"], r["labelled"], len(functions),
                     r["submitted_at"])
            for r in rows
        )
        return RoundStatus(
            rnd, len(functions), sum(f.kind == "write" for f in functions), progress,
            self.is_closed(rnd.name), tuple(self.reveal_log(rnd.name)),
        )

    def reveal_log(self, round_name: str) -> list[dict]:
        """Every time labels of the round were opened to someone: who, what, override
        (the reason given when the round was blind and open, else None), created."""
        rnd = self.round(round_name)
        return self._q("select who, what, override, created from reveals where round = ? "
                       "order by id", [rnd.name])

    # ------------------------------------------------------------ sessions

    def annotator_session(
        self, round_name: str, annotator: str, *, account: str | None = None,
        override: str | None = None,
    ) -> AnnotatorSession:
        """The labelling session of one annotator of a round (blind to the others).

        ``account`` is the login asking (default: the current one). The labels under a name
        belong to the login that wrote the first of them; another login opens them in a blind,
        open round only with ``override`` (a reason, recorded in the reveal log).
        """
        return AnnotatorSession(self, self.__conn, round_name, annotator,
                                account=account or current_account(), override=override)

    def adjudication_session(
        self, round_name: str, who: str, *, override: str | None = None
    ) -> AdjudicationSession:
        """A session that sees every label of a round.

        It opens once the round is closed (or at any time in a round that is not blind);
        otherwise only with ``override``, a reason that is recorded in the reveal log, with
        ``who`` and, where it is another name, the login asking (the current one).
        """
        return AdjudicationSession(self, self.__conn, round_name, who, override=override,
                                   account=current_account())

    def import_session(self, who: str | None = None) -> ImportSession:
        """A session that imports label sets (see :mod:`.release`)."""
        return ImportSession(self, self.__conn, who or current_account())


__all__ = ["ANNOTATOR_KINDS", "SCHEMA_VERSION", "Annotator", "DatabaseError", "Decision",
           "Label", "Progress", "Round", "RoundStatus", "Store", "default_db_path",
           "reason_rule", "repo_root"]
