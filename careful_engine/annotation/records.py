"""The annotation engine's records: what the store and the sessions hand out (frozen)."""

from __future__ import annotations

from dataclasses import dataclass

from careful_engine.annotation.signals import FunctionInput


@dataclass(frozen=True)
class Annotator:
    name: str
    kind: str  # human | llm
    model: str | None
    created: str
    account: str | None = None  # the login whose labels these are (set by the first write)


@dataclass(frozen=True)
class Round:
    name: str
    created: str
    created_by: str
    declarations_source: str
    declarations_sha256: str
    blind: bool
    note: str
    closed_at: str | None = None  # when every annotator had submitted, or it was closed
    closed_by: str | None = None  # who closed it before that (its creator), if anyone


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
    reveals: tuple[dict, ...]  # the reveal log: who, what, override (a reason or None), created


@dataclass(frozen=True)
class ImportedLabel:
    function: str
    destructive: bool | None  # None: not labelled in the set
    reason: str
    labelled: str | None
    updated: str | None


@dataclass(frozen=True)
class LabelSet:
    """One annotator's label set, read and validated from the release format."""

    source: str
    round_name: str
    blind: bool
    declarations_source: str
    declarations_sha256: str
    annotator: str
    kind: str
    model: str | None
    submitted: str | None
    functions: tuple[FunctionInput, ...]
    labels: tuple[ImportedLabel, ...]
