"""Sessions on a round: what an annotator, and what an adjudicator, may read and do.

An :class:`AnnotatorSession` reads the round's functions and its own labels and writes its own
labels; in a blind round nothing in it returns another annotator's label or any agreement. An
:class:`AdjudicationSession` (opened by :meth:`.store.Store.adjudication_session`, only once
the round is closed or with a recorded override) reads everything and decides.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import AnnotationError, BlindnessError, LabelError
from .signals import FunctionInput
from .store import Annotator, Decision, Label, Round, Store, now

if TYPE_CHECKING:
    from ..boundary import Boundary
    from .adjudication import Adjudication
    from .agreement import AgreementReport, Split


class AnnotatorSession:
    """One annotator in one round: reads the functions and its own labels, writes its labels.

    In a blind round nothing here returns another annotator's labels or any agreement.
    """

    def __init__(self, store: Store, round_name: str, annotator: str):
        store.round(round_name)
        if annotator not in store.round_annotators(round_name):
            raise AnnotationError(
                f"{annotator!r} is not an annotator of round {round_name} "
                f"(annotators: {', '.join(store.round_annotators(round_name)) or 'none'})"
            )
        self._store = store
        self.round_name = round_name
        self.annotator = annotator
        self._functions = {f.name: f for f in store.round_functions(round_name)}

    @property
    def round(self) -> Round:
        return self._store.round(self.round_name)

    def functions(self) -> list[FunctionInput]:
        return list(self._functions.values())

    def function(self, name: str) -> FunctionInput:
        try:
            return self._functions[name]
        except KeyError:
            raise LabelError(f"{name!r} is not a function of round {self.round_name}") from None

    def labels(self) -> dict[str, Label]:
        """This annotator's own labels, by function."""
        return {lb.function: lb for lb in self._store._label_rows(self.round_name, self.annotator)}

    def remaining(self) -> list[str]:
        done = self.labels()
        return [n for n in self._functions if n not in done]

    @property
    def submitted(self) -> str | None:
        return self._store._submitted_at(self.round_name, self.annotator)

    def label(self, function: str, destructive: bool, reason: str = "") -> Label:
        """Record (or, before submitting, revise) one label; committed before returning."""
        return self._store._write_label(
            self.round_name, self.annotator, self.function(function), destructive, reason
        )

    def submit(self) -> str:
        """Freeze this annotator's labels (all functions must be labelled)."""
        return self._store._submit(self.round_name, self.annotator)

    def others(self) -> dict[str, dict[str, Label]]:
        """The other annotators' labels: only in a round that is not blind."""
        if self.round.blind:
            raise BlindnessError(
                f"round {self.round_name} is blind: an annotator sees only its own labels"
            )
        out: dict[str, dict[str, Label]] = {}
        for lb in self._store._label_rows(self.round_name):
            if lb.annotator != self.annotator:
                out.setdefault(lb.annotator, {})[lb.function] = lb
        return out

    def log_call(self, function: str, **fields: Any) -> None:
        """Record one language-model call made for this annotator (usage, raw answer)."""
        row = {"round": self.round_name, "annotator": self.annotator, "function": function,
               "created": now(), **fields}
        with self._store._tx() as db:
            db["llm_calls"].insert(row)


class AdjudicationSession:
    """Everything about a round: all labels, agreement, splits, decisions, the boundary."""

    def __init__(self, store: Store, round_name: str, who: str, *, override: str | None = None):
        # the check lives here, so that no way of making a session skips it
        self.overridden = store._open_labels(round_name, who, override)
        self._store = store
        self.round_name = round_name
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

    def labels(self) -> dict[str, dict[str, Label]]:
        """annotator -> function -> label, for every annotator of the round."""
        out: dict[str, dict[str, Label]] = {a: {} for a in self._store.round_annotators(
            self.round_name)}
        for lb in self._store._label_rows(self.round_name):
            out.setdefault(lb.annotator, {})[lb.function] = lb
        return out

    def _subset(self, subset: str) -> list[str]:
        functions = self.functions()
        if subset == "all":
            return [f.name for f in functions]
        if subset == "writes":
            return [f.name for f in functions if f.kind == "write"]
        raise AnnotationError(f"subset must be 'writes' or 'all', not {subset!r}")

    def _chosen(self, annotators: Iterable[str] | None) -> dict[str, dict[str, Label]]:
        labels = self.labels()
        chosen = list(dict.fromkeys(annotators)) if annotators else list(labels)
        unknown = [a for a in chosen if a not in labels]
        if unknown:
            raise AnnotationError(
                f"not annotators of round {self.round_name}: {', '.join(unknown)}"
            )
        return {a: labels[a] for a in chosen}

    def _matrix(self, annotators: Iterable[str] | None) -> dict[str, dict[str, bool]]:
        return {
            a: {f: lb.destructive for f, lb in labels.items()}
            for a, labels in self._chosen(annotators).items()
        }

    def agreement(
        self, subset: str = "writes", annotators: Iterable[str] | None = None
    ) -> AgreementReport:
        from .agreement import agreement_report

        return agreement_report(self._matrix(annotators), self._subset(subset), subset=subset)

    def splits(self, subset: str = "all", annotators: Iterable[str] | None = None) -> list[Split]:
        from .agreement import splits

        fns = {f.name: f for f in self.functions()}
        return splits(self._chosen(annotators), [fns[n] for n in self._subset(subset)])

    def decide(self, function: str, destructive: bool, reason: str) -> Decision:
        """Append a manual decision (it never overwrites a label or an earlier decision)."""
        if function not in {f.name for f in self.functions()}:
            raise AnnotationError(f"{function!r} is not a function of round {self.round_name}")
        if not isinstance(destructive, bool):
            raise AnnotationError(f"{function}: a decision is true or false")
        if not reason.strip():
            raise AnnotationError(f"{function}: a manual decision needs a reason")
        with self._store._tx() as db:
            db["decisions"].insert({
                "round": self.round_name, "function": function, "destructive": int(destructive),
                "author": self.who, "reason": reason.strip(), "created": now(),
            })
        return self.decisions()[-1]

    def decisions(self) -> list[Decision]:
        return [
            Decision(r["id"], r["function"], bool(r["destructive"]), r["author"], r["reason"],
                     r["created"])
            for r in self._store._rows(
                "select * from decisions where round = ? order by id", [self.round_name]
            )
        ]

    def adjudicate(
        self,
        policy: str = "any",
        *,
        tie: str = "error",
        annotators: Iterable[str] | None = None,
        use_decisions: bool = True,
    ) -> Adjudication:
        from .adjudication import adjudicate

        return adjudicate(
            self._chosen(annotators),
            self.functions(),
            policy,
            tie=tie,
            decisions=self.decisions() if use_decisions else (),
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
    ) -> tuple[Boundary, Path]:
        """Write ``result`` as a boundary file (refusing to replace one unless ``force``)."""
        from .adjudication import save_boundary

        rnd = self.round
        boundary, out = save_boundary(
            result, name, round_=rnd, path=path, force=force, created=created,
            provenance={"adjudicated_by": self.who, "override": self.overridden},
        )
        with self._store._tx() as db:
            db["adjudications"].insert({
                "round": self.round_name, "author": self.who, "policy": result.policy,
                "params": json.dumps(result.params, sort_keys=True), "boundary": name,
                "path": str(out), "destructive": json.dumps(sorted(result.destructive)),
                "created": now(),
            })
        return boundary, out

    def export_label_set(self, annotator: str) -> dict:
        """One annotator's label set in the release format (see :mod:`.release`)."""
        from .release import label_set_document

        labels = self.labels()
        if annotator not in labels:
            raise AnnotationError(f"{annotator!r} is not an annotator of round {self.round_name}")
        return label_set_document(
            self.round, self._store.annotator(annotator), self.functions(), labels[annotator],
            self.submitted().get(annotator),
        )
