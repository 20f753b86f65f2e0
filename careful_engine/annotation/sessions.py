"""Sessions on a round: the only code that reads or writes labels.

The :class:`~.store.Store` manages annotators and rounds and never reads a label; it opens the
sessions below and hands each the database connection. Every query on the ``labels`` table
(beyond the progress counts) lives here:

- :class:`AnnotatorSession`: one annotator's own labels. In a blind round nothing in it
  returns another annotator's label or any agreement. The labels under a name belong to the
  login that wrote the first of them: another login opens them in a blind, open round only
  with an override, recorded in the round's reveal log (who, what, when, why).
- :class:`AdjudicationSession`: every label, agreement, splits, decisions, the boundary; it
  opens once the round is closed, or with an override that is recorded.
- :class:`ImportSession`: a label set made elsewhere, imported in one transaction.
"""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from careful_engine.annotation.database import Connection, now
from careful_engine.annotation.errors import (
    AnnotationError,
    BlindnessError,
    LabelError,
    RoundError,
)
from careful_engine.annotation.names import (
    NAME_MAX,
    check_line,
    check_model,
    check_name,
    check_reason,
    time_problem,
)
from careful_engine.annotation.records import Annotator, Decision, Label, LabelSet, Round
from careful_engine.annotation.signals import FunctionInput, RoundInputs
from careful_engine.core.json_values import a_kind
from careful_engine.core.safe_text import clip, misleading, visible

if TYPE_CHECKING:
    from careful_engine.annotation.adjudication import Adjudication
    from careful_engine.annotation.agreement import AgreementReport, Split
    from careful_engine.annotation.store import Store
    from careful_engine.effects.boundary import Boundary

T = TypeVar("T")
CLOSED_BY_MAX = 200  # who closed a round: a name, and the login beside it where they differ
IMPORTED = "(imported)"  # the owner of labels brought in from a file: never a login


def current_account() -> str:
    """The login running this process ($USER, else what :func:`getpass.getuser` finds)."""
    try:
        return check_person(os.environ.get("USER") or getpass.getuser(), "login")
    except (OSError, KeyError, AnnotationError):
        return "unknown"


def check_person(who: object, what: str = "who") -> str:
    """A person's or login's name: 1-64 characters, no leading or trailing whitespace (inner
    spaces are allowed), none of the characters careful refuses in text it stores
    (:func:`~careful_engine.core.safe_text.misleading`: controls, bidi overrides...)."""
    import unicodedata

    if not isinstance(who, str):
        raise AnnotationError(f"{what}: expected a name, got {a_kind(who)}")
    nfc = unicodedata.normalize("NFC", who)
    if not nfc or nfc != nfc.strip() or len(nfc) > NAME_MAX or misleading(nfc):
        shown = repr(who) if len(who) < 80 else repr(who[:77]) + "..."
        raise AnnotationError(
            f"invalid {what} {shown}: 1-{NAME_MAX} characters, no control characters, "
            "no leading or trailing whitespace")
    return nfc


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


def _flag(value: object, what: str = "destructive") -> bool:
    """A stored true/false (0 or 1), or AnnotationError."""
    if type(value) is not int or value not in (0, 1):
        raise AnnotationError(f"{what} is {a_kind(value)} {_clipped(value)}, not 0 or 1")
    return bool(value)


def _clipped(value: object) -> str:
    return visible(clip(repr(value), 60))


def _stamp(value: object, what: str) -> str:
    """A stored time, or AnnotationError."""
    problem = time_problem(value)
    if problem:
        raise AnnotationError(f"{what}: {problem}")
    return str(value)


def label_row(r: Mapping[str, Any], functions: Mapping[str, FunctionInput]) -> Label:
    """A ``labels`` row checked as an imported label is (:mod:`.release`), or
    AnnotationError saying what is wrong with it."""
    annotator = check_name(r["annotator"])
    fn = functions.get(r["function"]) if isinstance(r["function"], str) else None
    if fn is None:
        raise AnnotationError("not a function of the round")
    destructive = _flag(r["destructive"])
    reason = check_reason(r["reason"])
    problem = reason_rule(fn, destructive, reason)
    if problem:
        raise AnnotationError(problem)
    created = _stamp(r["created"], "created")
    updated = _stamp(r["updated"], "updated") if r["updated"] not in (None, "") else created
    return Label(annotator, fn.name, destructive, reason, created, updated)


def decision_row(r: Mapping[str, Any], functions: Mapping[str, FunctionInput]) -> Decision:
    """A ``decisions`` row checked as :meth:`AdjudicationSession.decision` checks a new one,
    or AnnotationError saying what is wrong with it."""
    if not isinstance(r["function"], str) or r["function"] not in functions:
        raise AnnotationError("not a function of the round")
    destructive = _flag(r["destructive"])
    author = check_person(r["author"], "author")
    reason = check_reason(r["reason"])
    if not reason:
        raise AnnotationError("a manual decision needs a reason")
    return Decision(r["id"], r["function"], destructive, author, reason,
                    _stamp(r["created"], "created"))


def round_row(r: Mapping[str, Any]) -> Round:
    """A ``rounds`` row checked as ``round new`` and the label-set import write one, or
    AnnotationError saying what is wrong with it."""
    sha = r["declarations_sha256"]
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef"
                                                         for c in sha):
        raise AnnotationError(f"declarations_sha256 {_clipped(sha)} is not 64 lower-case "
                              "hex digits")
    created_by = r["created_by"] or ""
    return Round(
        name=check_name(r["name"], "round"), created=_stamp(r["created"], "created"),
        created_by=check_person(created_by, "creator") if created_by else "",
        declarations_source=check_line(r["declarations_source"] or "", "declarations_source"),
        declarations_sha256=sha, blind=_flag(r["blind"], "blind"),
        note=check_reason(r["note"], "note"),
        closed_at=None if r["closed_at"] is None else _stamp(r["closed_at"], "closed_at"),
        closed_by=None if r["closed_by"] is None else check_line(r["closed_by"], "closed_by",
                                                                    CLOSED_BY_MAX),
    )


def annotator_row(r: Mapping[str, Any]) -> Annotator:
    """An ``annotators`` row checked as :meth:`.store.Store.add_annotator` writes one, or
    AnnotationError saying what is wrong with it."""
    name = check_name(r["name"])
    kind, model = r["kind"], r["model"]
    if kind not in ("human", "llm"):
        raise AnnotationError(f"kind {_clipped(kind)} is neither human nor llm")
    if (kind == "llm") != (model is not None):
        raise AnnotationError("a language-model annotator needs its model, a human has none")
    account = r["account"]
    if account is not None and account != IMPORTED:
        account = check_person(account, "login")
    return Annotator(name, kind, None if model is None else check_model(model),
                     _stamp(r["created"], "created"), account)


def _row_id(*parts: object) -> str:
    return "/".join(visible(clip(str(p), 64)) for p in parts)


def checked_rows(store: Store, rows: Iterable[Mapping[str, Any]],
                 convert: Callable[[Mapping[str, Any]], T],
                 where: Callable[[Mapping[str, Any]], tuple[object, ...]]) -> list[T]:
    """``convert`` of each row; a row it refuses (:class:`AnnotationError`: not careful's) is
    left out and noted in the store's problems (:meth:`.store.Store.problem`) under
    ``where(row)``'s parts (round, annotator, function...)."""
    out = []
    for r in rows:
        try:
            out.append(convert(r))
        except AnnotationError as e:
            store.problem(_row_id(*where(r)), str(e))
    return out


def _labels(store: Store, conn: Connection, round_name: str, annotator: str | None = None,
            functions: Mapping[str, FunctionInput] | None = None) -> list[Label]:
    """The round's labels (of ``annotator``); a row the checks refuse is left out and noted
    in the store's problems (:meth:`.store.Store.problem`)."""
    sql = "select * from labels where round = ?"
    params: list[Any] = [round_name]
    if annotator is not None:
        sql += " and annotator = ?"
        params.append(annotator)
    known = functions if functions is not None else {
        f.name: f for f in store.round_functions(round_name)}
    return checked_rows(store, conn.rows(sql + " order by id", params),
                        lambda r: label_row(r, known),
                        lambda r: (round_name, r["annotator"], r["function"]))


def _record_reveal(conn: Connection, round_name: str, who: str, what: str,
                   override: str | None) -> None:
    with conn.tx():
        conn.insert("reveals", {"round": round_name, "who": who, "what": what,
                                "override": override, "created": now()})


def _mark_closed(conn: Connection, store: Store, round_name: str, stamp: str) -> None:
    if store.is_closed(round_name):
        conn.execute("update rounds set closed_at = ? where name = ? and closed_at is null",
                  [stamp, round_name])


class AnnotatorSession:
    """One annotator in one round: reads the functions and its own labels, writes its labels.

    In a blind round nothing here returns another annotator's labels or any agreement.
    """

    def __init__(self, store: Store, conn: Connection, round_name: str, annotator: str, *,
                 account: str, override: str | None = None):
        rnd = store.round(round_name)
        annotator = check_name(annotator)
        account = check_person(account, "login")
        roster = store.round_annotators(rnd.name)
        if annotator not in roster:
            raise AnnotationError(
                f"{annotator!r} is not an annotator of round {rnd.name} "
                f"(annotators: {', '.join(roster) or 'none'})"
            )
        self._store = store
        self._conn = conn
        self.round_name = rnd.name
        self.annotator = annotator
        self.account = account
        self.overridden = False
        self._functions = {f.name: f for f in store.round_functions(rnd.name)}
        owner = self._owner()
        if owner is None and conn.rows(
            "select 1 from labels where round = ? and annotator = ? limit 1",
            [rnd.name, annotator],
        ):
            owner = self._claim()  # labels from before owners were recorded
        if owner is not None and owner != account:
            self._foreign(rnd, owner, override)

    def _owner(self) -> str | None:
        rows = self._conn.rows("select account from annotators where name = ?",
                               [self.annotator])
        return rows[0]["account"] if rows else None

    def _claim(self) -> str:
        """Record this login as the owner of the name's labels, unless one is recorded."""
        self._conn.execute("update annotators set account = ? where name = ? and account is null",
                        [self.account, self.annotator])
        return self._owner() or self.account

    def _foreign(self, rnd: Round, owner: str, override: str | None) -> None:
        """Another login opens these labels: refused in a blind, open round unless
        overridden; the override is recorded."""
        if not rnd.blind or self._store.is_closed(rnd.name):
            return
        reason = check_reason(override, "override") if override else ""
        shown = "a file import" if owner == IMPORTED else f"login {owner!r}"
        if not reason:
            raise BlindnessError(
                f"round {rnd.name} is blind and still open: {self.annotator}'s labels were "
                f"written by {shown}, and you are {self.account!r}. Label under your own "
                "name, or open them with an explicit override (its reason is recorded in the "
                "round's reveal log)")
        _record_reveal(self._conn, rnd.name, self.account,
                       f"labels of {self.annotator} (annotator session)", reason)
        self.overridden = True

    @property
    def round(self) -> Round:
        return self._store.round(self.round_name)

    def functions(self) -> list[FunctionInput]:
        return list(self._functions.values())

    def function(self, name: str) -> FunctionInput:
        try:
            return self._functions[name]
        except (KeyError, TypeError):
            raise LabelError(f"{name!r} is not a function of round {self.round_name}") from None

    def labels(self) -> dict[str, Label]:
        """This annotator's own labels, by function."""
        return {lb.function: lb for lb in _labels(self._store, self._conn, self.round_name,
                                                  self.annotator, self._functions)}

    def remaining(self) -> list[str]:
        done = self.labels()
        return [n for n in self._functions if n not in done]

    @property
    def submitted(self) -> str | None:
        rows = self._conn.rows(
            "select submitted_at from round_annotators where round = ? and annotator = ?",
            [self.round_name, self.annotator],
        )
        return rows[0]["submitted_at"] if rows else None

    def _writable(self) -> None:
        """Inside a write: the labels are not final, and this login owns them (or claims
        them now, or holds a recorded override)."""
        if self.submitted:
            raise LabelError(
                f"{self.annotator} has submitted round {self.round_name}; labels are final")
        if self._store.round(self.round_name).closed_by:
            raise LabelError(f"round {self.round_name} is closed; labels are final")
        owner = self._owner() or self._claim()
        if owner != self.account and not self.overridden:
            rnd = self._store.round(self.round_name)
            if rnd.blind:
                raise BlindnessError(
                    f"{self.annotator}'s labels in round {self.round_name} belong to login "
                    f"{owner!r}; you are {self.account!r}")

    def label(self, function: str, destructive: bool, reason: str = "") -> Label:
        """Record (or, before submitting, revise) one label; committed before returning."""
        fn = self.function(function)
        if not isinstance(destructive, bool):
            raise LabelError(f"{fn.name}: the label must be true or false, not {destructive!r}")
        try:
            reason = check_reason(reason, fn.name)
        except AnnotationError as e:
            raise LabelError(str(e)) from None
        problem = reason_rule(fn, destructive, reason)
        if problem:
            raise LabelError(problem)
        stamp = now()
        conn = self._conn
        with conn.tx():
            self._writable()
            old = conn.rows(
                "select * from labels where round = ? and annotator = ? and function = ?",
                [self.round_name, self.annotator, fn.name],
            )
            if old:
                prev = {k: v for k, v in old[0].items() if k not in ("id", "updated")}
                conn.insert("label_revisions", {**prev, "replaced": stamp})
                conn.execute(
                    "update labels set destructive = ?, reason = ?, updated = ? where id = ?",
                    [int(destructive), reason, stamp, old[0]["id"]],
                )
            else:
                conn.insert("labels", {
                    "round": self.round_name, "annotator": self.annotator, "function": fn.name,
                    "destructive": int(destructive), "reason": reason,
                    "created": stamp, "updated": stamp,
                })
        return self.labels()[fn.name]

    def submit(self) -> str:
        """Freeze this annotator's labels (all functions must be labelled)."""
        stamp = now()
        conn = self._conn
        with conn.tx():
            if self.submitted:
                raise LabelError(
                    f"{self.annotator} has submitted round {self.round_name} already")
            self._writable()
            done = set(self.labels())
            missing = [f for f in self._functions if f not in done]
            if missing:
                raise LabelError(
                    f"{self.annotator} cannot submit round {self.round_name}: {len(missing)} "
                    f"functions unlabelled ({', '.join(missing[:8])}"
                    f"{', ...' if len(missing) > 8 else ''})"
                )
            conn.execute(
                "update round_annotators set submitted_at = ? where round = ? and annotator = ?",
                [stamp, self.round_name, self.annotator],
            )
            _mark_closed(conn, self._store, self.round_name, stamp)
        return stamp

    def others(self) -> dict[str, dict[str, Label]]:
        """The other annotators' labels: only in a round that is not blind."""
        if self.round.blind:
            raise BlindnessError(
                f"round {self.round_name} is blind: an annotator sees only its own labels"
            )
        out: dict[str, dict[str, Label]] = {}
        for lb in _labels(self._store, self._conn, self.round_name,
                          functions=self._functions):
            if lb.annotator != self.annotator:
                out.setdefault(lb.annotator, {})[lb.function] = lb
        return out

    def log_call(self, function: str, **fields: Any) -> None:
        """Record one language-model call made for this annotator (usage, raw answer)."""
        row = {"round": self.round_name, "annotator": self.annotator, "function": function,
               "created": now(), **fields}
        with self._conn.tx():
            self._conn.insert("llm_calls", row)


class AdjudicationSession:
    """Everything about a round: all labels, agreement, splits, decisions, the boundary."""

    def __init__(self, store: Store, conn: Connection, round_name: str, who: str, *,
                 override: str | None = None, account: str | None = None):
        rnd = store.round(round_name)
        if not isinstance(who, str) or not who.strip():
            raise AnnotationError("an adjudication session needs the name of who opens it")
        who = check_person(who)
        # ``who`` is a name the caller gives (``--by``); the login is recorded beside it
        account = check_person(account, "login") if account else None
        closed = store.is_closed(rnd.name)
        reason = check_reason(override, "override") if override else ""
        if rnd.blind and not closed and not reason:
            pending = [p.annotator for p in store.status(rnd.name).progress
                       if p.submitted is None]
            who_submits = pending[0] if len(pending) == 1 else "NAME"
            raise BlindnessError(
                f"round {rnd.name} is blind and still open: "
                f"{', '.join(pending) or 'no annotator'} "
                f"{'has' if len(pending) == 1 else 'have'} not submitted. The labels and "
                "the agreement open when every annotator has submitted (`careful round "
                f"submit {rnd.name} -a {who_submits}`"
                + (", for each of them" if len(pending) > 1 else "")
                + "), or with an explicit override, which is recorded (`--override REASON`)"
            )
        recorded = reason if rnd.blind and not closed else None
        what = "all labels (adjudication session" + (
            f", by login {account})" if account and account != who else ")")
        _record_reveal(conn, rnd.name, who, what, recorded)
        self.overridden = recorded is not None
        self._store = store
        self._conn = conn
        self.round_name = rnd.name
        self.who = who

    @property
    def round(self) -> Round:
        return self._store.round(self.round_name)

    def functions(self) -> list[FunctionInput]:
        return self._store.round_functions(self.round_name)

    def annotators(self) -> list[Annotator]:
        names = self._store.round_annotators(self.round_name)
        return [a for a in self._store.annotators() if a.name in names]

    def submitted(self) -> dict[str, str | None]:
        return {p.annotator: p.submitted for p in self._store.status(self.round_name).progress}

    def reveal_log(self) -> list[dict]:
        return self._store.reveal_log(self.round_name)

    def problem(self, annotator: str, reason: str) -> None:
        """Note something of ``annotator``'s in this round left out
        (:meth:`.store.Store.problem`)."""
        self._store.problem(_row_id(self.round_name, annotator), reason)

    def labels(self) -> dict[str, dict[str, Label]]:
        """annotator -> function -> label, for every annotator on the round's roster."""
        roster = self._store.round_annotators(self.round_name)
        out: dict[str, dict[str, Label]] = {a: {} for a in roster}
        for lb in _labels(self._store, self._conn, self.round_name):
            if lb.annotator in out:
                out[lb.annotator][lb.function] = lb
        return out

    def _subset(self, subset: str) -> list[str]:
        functions = self.functions()
        if subset == "all":
            return [f.name for f in functions]
        if subset == "writes":
            return [f.name for f in functions if f.kind == "write"]
        raise AnnotationError(f"subset must be 'writes' or 'all', not {subset!r}")

    def declares_writes(self) -> bool:
        """Whether the round's inputs declare a write."""
        return any(f.kind == "write" for f in self.functions())

    def subsets(self, asked: str) -> list[str]:
        """The subsets the figures are over when ``asked`` ('writes', 'all' or 'both'), the
        widest last: a round whose inputs declare no write falls back to all functions."""
        if asked not in ("writes", "all", "both"):
            raise AnnotationError(f"subset must be 'writes', 'all' or 'both', not {asked!r}")
        subsets = ["writes", "all"] if asked == "both" else [asked]
        if "writes" in subsets and not self.declares_writes():
            subsets = ["all"]
        return subsets

    def default_boundary_name(self, policy: str) -> str:
        """The name of the boundary adjudicated under ``policy`` when none is given:
        ``<round>-<policy>``, a ``:`` as ``-`` (``r1-annotator-A1``)."""
        return f"{self.round_name}-{policy.replace(':', '-')}"

    def counted(self) -> dict[str, dict[str, Label]]:
        """The labels agreement and adjudication count: once the round is closed, those of
        the annotators who submitted (a draft left when its creator closed the round does not
        count); before that (an override, a round that is not blind), every annotator's."""
        labels = self.labels()
        if not self._store.is_closed(self.round_name):
            return labels
        submitted = self.submitted()
        return {a: got for a, got in labels.items() if submitted.get(a)}

    def _chosen(self, annotators: Iterable[str] | None) -> dict[str, dict[str, Label]]:
        labels = self.counted()
        chosen = list(dict.fromkeys(check_name(a) for a in annotators)) if annotators else list(
            labels)
        roster = self._store.round_annotators(self.round_name)
        drafts = [a for a in chosen if a in roster and a not in labels]
        if drafts:
            raise AnnotationError(
                f"{', '.join(drafts)} did not submit round {self.round_name} before it was "
                f"closed: only the annotators who submitted count "
                f"({', '.join(labels) or 'none'})")
        unknown = [a for a in chosen if a not in labels]
        if unknown:
            raise AnnotationError(
                f"not annotators of round {self.round_name}: {', '.join(unknown)} "
                f"(annotators: {', '.join(roster) or 'none'})"
            )
        return {a: labels[a] for a in chosen}

    def _left_out(self, labels: Mapping[str, Mapping[str, Label]],
                  then: str = "not adjudicated") -> list[str]:
        """The annotators of ``labels`` who submitted, yet lack labels because rows were left
        out (a submitted set labels every function); each noted as a problem (``then``: what
        becomes of the set)."""
        n = len(self.functions())
        submitted = self.submitted()
        out = [a for a, got in labels.items() if submitted.get(a) and len(got) < n]
        for a in out:
            self._store.problem(_row_id(self.round_name, a),
                                f"{n - len(labels[a])} label(s) left out: the label set is "
                                f"incomplete, {then}")
        return out

    def _matrix(self, annotators: Iterable[str] | None) -> dict[str, dict[str, bool]]:
        return {
            a: {f: lb.destructive for f, lb in labels.items()}
            for a, labels in self._chosen(annotators).items()
        }

    def agreement(
        self, subset: str = "writes", annotators: Iterable[str] | None = None
    ) -> AgreementReport:
        from careful_engine.annotation.agreement import agreement_report

        return agreement_report(self._matrix(annotators), self._subset(subset), subset=subset)

    def splits(self, subset: str = "all", annotators: Iterable[str] | None = None) -> list[Split]:
        from careful_engine.annotation.agreement import splits

        fns = {f.name: f for f in self.functions()}
        return splits(self._chosen(annotators), [fns[n] for n in self._subset(subset)])

    def decision(self, function: str, destructive: bool, reason: str) -> Decision:
        """A manual decision, checked and not saved (``id`` -1): what :meth:`decide` would
        append, for a dry run's :meth:`adjudicate` (``pending``)."""
        if function not in {f.name for f in self.functions()}:
            raise AnnotationError(f"{function!r} is not a function of round {self.round_name}")
        if not isinstance(destructive, bool):
            raise AnnotationError(f"{function}: a decision is true or false")
        reason = check_reason(reason, function)
        if not reason:
            raise AnnotationError(f"{function}: a manual decision needs a reason")
        return Decision(-1, function, destructive, self.who, reason, now())

    def decide(self, function: str, destructive: bool, reason: str) -> Decision:
        """Append a manual decision (it never overwrites a label or an earlier decision)."""
        d = self.decision(function, destructive, reason)
        with self._conn.tx():
            self._insert_decision(d)
        return self.decisions()[-1]

    def _insert_decision(self, d: Decision) -> None:
        self._conn.insert("decisions", {
            "round": self.round_name, "function": d.function,
            "destructive": int(d.destructive), "author": d.author, "reason": d.reason,
            "created": d.created,
        })

    def decisions(self) -> list[Decision]:
        """The round's manual decisions; a row the checks refuse is left out and noted in
        the store's problems."""
        functions = {f.name: f for f in self.functions()}
        return checked_rows(
            self._store, self._conn.rows("select * from decisions where round = ? order by id",
                                         [self.round_name]),
            lambda r: decision_row(r, functions),
            lambda r: (self.round_name, f"decision {r['id']}", r["function"]))

    def adjudicate(
        self,
        policy: str = "any",
        *,
        tie: str = "error",
        annotators: Iterable[str] | None = None,
        use_decisions: bool = True,
        pending: Iterable[Decision] = (),
    ) -> Adjudication:
        """The round adjudicated under ``policy``; ``pending``: decisions from
        :meth:`decision` taken as if appended after the saved ones (a dry run's; ignored
        with the saved ones where ``use_decisions`` is False)."""
        from careful_engine.annotation.adjudication import adjudicate

        chosen = self._chosen(annotators)
        left_out = self._left_out(chosen)
        if left_out:
            raise AnnotationError(
                f"round {self.round_name}: the labels of {', '.join(left_out)} are incomplete "
                "(rows of the database left out, listed as problems): the votes would be "
                "counted without them, so nothing is adjudicated; repair the database, or "
                "adjudicate the other annotators (-a)")
        return adjudicate(
            chosen,
            self.functions(),
            policy,
            tie=tie,
            decisions=[*self.decisions(), *pending] if use_decisions else (),
            round_name=self.round_name,
        )

    def write_boundary(
        self,
        result: Adjudication,
        name: str,
        *,
        path: str | Path | None = None,
        force: bool = False,
        created: str | None = None,
        decisions: Iterable[Decision] = (),
    ) -> tuple[Boundary, Path]:
        """Write ``result`` as a boundary file (refusing to replace one unless ``force``).

        ``decisions`` (from :meth:`decision`, already taken into ``result`` as ``pending``)
        are appended in the same transaction as the adjudication's record: where the file
        cannot be written, neither is recorded."""
        from careful_engine.annotation.adjudication import save_boundary

        rnd = self.round
        with self._conn.tx():
            for d in decisions:
                self._insert_decision(d)
            boundary, out = save_boundary(
                result, name, round_=rnd, path=path, force=force, created=created,
                provenance={"adjudicated_by": self.who, "override": self.overridden},
                private=self.overridden,
            )
            self._conn.insert("adjudications", {
                "round": self.round_name, "author": self.who, "policy": result.policy,
                "params": json.dumps(result.params, sort_keys=True), "boundary": name,
                "path": str(out), "destructive": json.dumps(sorted(result.destructive)),
                "created": now(),
            })
        return boundary, out

    def export_label_set(self, annotator: str) -> dict:
        """One annotator's label set in the release format (see :mod:`.release`)."""
        from careful_engine.annotation.release import label_set_document

        annotator = check_name(annotator)
        labels = self.labels()
        if annotator not in labels:
            raise AnnotationError(f"{annotator!r} is not an annotator of round {self.round_name}")
        functions = self.functions()
        submitted = self.submitted().get(annotator)
        if self._left_out({annotator: labels[annotator]}, "exported as not submitted"):
            submitted = None
        return label_set_document(
            self.round, self._store.annotator(annotator), functions, labels[annotator],
            submitted,
        )


class ImportSession:
    """Brings label sets made elsewhere into the store; one transaction per set."""

    def __init__(self, store: Store, conn: Connection, who: str):
        self._store = store
        self._conn = conn
        self.who = check_person(who)

    def import_label_set(self, labelset: LabelSet, round_name: str | None = None
                         ) -> tuple[str, int]:
        """Import one checked label set (see :func:`.release.check_label_set`); returns
        (round, labels imported), 0 when the same labels are there already.

        The round is created from the set if the database lacks it; otherwise its functions,
        kinds, proposals and declarations hash must match, and an annotator not on its roster
        joins only while it may take one (:meth:`.store.Store.roster_final`: not once its
        creator closed it or its adjudication has begun; a round whose annotators have all
        submitted, as one made by importing, still takes a further submitted set before that,
        never one that would open it again). Nothing is created on failure.
        """
        store, conn = self._store, self._conn
        name = check_name(round_name or labelset.round_name, "round")
        ann = labelset.annotator
        inputs = RoundInputs({f.name: f for f in labelset.functions},
                             labelset.declarations_sha256, labelset.declarations_source)
        functions = {f.name: f for f in labelset.functions}
        rows = []
        for item in labelset.labels:
            if item.destructive is None:
                continue
            problem = reason_rule(functions[item.function], item.destructive, item.reason)
            if problem:
                raise LabelError(f"{ann}: {problem}")
            stamp = item.labelled or now()
            rows.append({"round": name, "annotator": ann, "function": item.function,
                         "destructive": int(item.destructive), "reason": item.reason,
                         "created": stamp, "updated": item.updated or stamp})
        if labelset.submitted and len(rows) != len(functions):
            raise LabelError(f"{ann}: a submitted label set must label every function")
        with conn.tx() as db:
            if not store.round_exists(name):
                store.new_round(name, inputs, blind=labelset.blind, created_by=self.who,
                                note=f"imported ({ann} first)")
            else:
                rnd = store.round(name)
                have = [(f.name, f.kind, f.proposed) for f in store.round_functions(name)]
                want = [(f.name, f.kind, f.proposed) for f in inputs.functions.values()]
                if rnd.declarations_sha256 != inputs.sha256 or sorted(have, key=str) != sorted(
                    want, key=str
                ):
                    raise AnnotationError(
                        f"round {name} in {store.path} has other inputs than this label set "
                        "(functions, kinds, proposals or declarations hash differ); import it "
                        "under another round name"
                    )
            refused = store.join_refusal(name, ann)
            if refused:  # (what became of the set, and the way round it, are the import's)
                raise RoundError(f"{refused}, so {ann}'s label set is not imported (import it "
                                 "under another round name)")
            existing_ann = store.annotator(ann)
            if existing_ann is not None:
                self._may_write(name, existing_ann)
            store.add_annotator(ann, labelset.kind, labelset.model)
            if existing_ann is None:
                conn.execute("update annotators set account = ? where name = ?", [IMPORTED, ann])
            existing = _labels(store, conn, name, ann)
            if existing:
                have_set = {(lb.function, lb.destructive, lb.reason) for lb in existing}
                if have_set == {(r["function"], bool(r["destructive"]), r["reason"])
                                for r in rows}:
                    return name, 0
                raise LabelError(
                    f"{ann} has other labels in round {name} already; "
                    "import under another round or annotator name"
                )
            if store.round(name).closed_by:
                raise RoundError(f"round {name} is closed; it takes no new label set")
            if not labelset.submitted and store.is_closed(name):
                # as `round add`: a set still open would open the round again, and its name
                # label on after every label of the round could be read
                raise RoundError(
                    f"every annotator of round {name} has submitted: it is closed, and {ann}'s "
                    "label set is not submitted, so it would open the round again; import a "
                    "submitted set, or import it under another round name")
            conn.execute("insert or ignore into round_annotators (round, annotator, added) "
                "values (?, ?, ?)", [name, ann, now()],
            )
            db["labels"].insert_all(rows)
            if labelset.submitted:
                conn.execute("update round_annotators set submitted_at = ? "
                    "where round = ? and annotator = ?", [labelset.submitted, name, ann],
                )
                _mark_closed(conn, store, name, now())
        return name, len(rows)

    def _may_write(self, round_name: str, annotator: Annotator) -> None:
        """The rule of :class:`AnnotatorSession` for a name that exists: its labels belong to
        the login that wrote the first of them (names made by an import belong to the files).
        In a blind, open round another login may not write them; a name on the round's roster
        that no login owns yet is imported only by the login of that name, who then owns it."""
        owner, name = annotator.account, annotator.name
        if owner in (IMPORTED, self.who):
            return
        rnd = self._store.round(round_name)
        if not rnd.blind or self._store.is_closed(rnd.name):
            return
        if owner is None:
            if name not in self._store.round_annotators(rnd.name):
                return
            if self.who == name:
                self._conn.execute("update annotators set account = ? where name = ? "
                                   "and account is null", [self.who, name])
                return
            whose = f"no login has labelled as {name} yet, so only login {name!r} may"
        else:
            whose = f"{name}'s labels belong to login {owner!r}, so only that login may"
        raise BlindnessError(
            f"round {rnd.name} is blind and still open: {whose} import them, and you are "
            f"{self.who!r}; import the set under another annotator name")


__all__ = ["CLOSED_BY_MAX", "IMPORTED", "AdjudicationSession", "AnnotatorSession", "ImportSession",
           "annotator_row", "check_person", "checked_rows", "current_account", "decision_row", "label_row",
           "reason_rule", "round_row"]
