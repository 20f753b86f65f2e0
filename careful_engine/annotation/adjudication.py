"""Adjudication: from labels (and manual decisions) to a destructive boundary.

Policies:

- ``any``: destructive if any annotator says so (the paper's final rule);
- ``majority``: destructive if more than half say so; a tie follows ``tie``: ``yes``, ``no``,
  or ``error`` (the default, which names the tied functions);
- ``unanimous``: destructive only if every annotator says so;
- ``annotator:NAME``: one annotator's labels.

Only labels present count (an annotator who has not labelled a function abstains on it).
Manual decisions are applied on top, the latest per function winning; they are kept apart
from the labels, which they never change. The result is written with
:class:`careful_engine.effects.boundary.Boundary`, the format the scorer's ``--boundary`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from careful_engine.annotation.errors import AnnotationError
from careful_engine.core import safe_write
from careful_engine.core.safe_text import visible
from careful_engine.effects.boundary import NAME, Boundary, BoundaryError, boundary_dir, read_file

if TYPE_CHECKING:
    from careful_engine.annotation.signals import FunctionInput
    from careful_engine.annotation.store import Decision, Label, Round

POLICIES = ("any", "majority", "unanimous", "annotator:NAME")
TIES = ("yes", "no", "error")


@dataclass(frozen=True)
class Outcome:
    function: str
    destructive: bool
    yes: tuple[str, ...]
    no: tuple[str, ...]
    by: str  # "policy", "tie", or "decision"
    reason: str  # for the boundary file (empty when not destructive by policy)


@dataclass(frozen=True)
class Adjudication:
    round: str
    policy: str
    annotators: tuple[str, ...]
    outcomes: dict[str, Outcome]
    params: dict = field(default_factory=dict)
    decisions: tuple[Decision, ...] = ()

    @property
    def destructive(self) -> dict[str, str]:
        """function -> reason, for the functions adjudicated destructive."""
        return {f: o.reason for f, o in self.outcomes.items() if o.destructive}

    @property
    def ties(self) -> list[str]:
        return [f for f, o in self.outcomes.items() if o.by == "tie"]


def parse_policy(policy: str) -> tuple[str, str | None]:
    """(``any`` | ``majority`` | ``unanimous`` | ``annotator``, annotator name or None)."""
    kind, _, who = policy.partition(":")
    if kind in ("any", "majority", "unanimous") and not who:
        return kind, None
    if kind == "annotator" and who:
        return kind, who
    raise AnnotationError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")


def adjudicate(
    labels: Mapping[str, Mapping[str, Label]],
    functions: Sequence[FunctionInput],
    policy: str = "any",
    *,
    tie: str = "error",
    decisions: Iterable[Decision] = (),
    round_name: str = "",
) -> Adjudication:
    """Apply ``policy`` to annotator -> function -> label, then the manual ``decisions``."""
    kind, only = parse_policy(policy)
    if tie not in TIES:
        raise AnnotationError(f"tie rule must be one of {', '.join(TIES)}, not {tie!r}")
    if not labels:
        raise AnnotationError("no annotators to adjudicate")
    if only is not None and only not in labels:
        raise AnnotationError(f"{only!r} is not an annotator here ({', '.join(labels)})")
    voters = [only] if only else list(labels)
    latest: dict[str, Decision] = {}
    decisions = tuple(decisions)
    for d in decisions:
        latest[d.function] = d

    outcomes: dict[str, Outcome] = {}
    ties: list[str] = []
    unlabelled: list[str] = []
    for fn in functions:
        f = fn.name
        yes = tuple(a for a in voters if f in labels[a] and labels[a][f].destructive)
        no = tuple(a for a in voters if f in labels[a] and not labels[a][f].destructive)
        n = len(yes) + len(no)
        by = "policy"
        if f in latest:
            d = latest[f]
            reason = f"{d.reason} (manual decision by {d.author})" if d.destructive else ""
            outcomes[f] = Outcome(f, d.destructive, yes, no, "decision", reason)
            continue
        if n == 0:
            unlabelled.append(f)
            continue
        if kind in ("any", "annotator"):
            destructive = bool(yes)
        elif kind == "unanimous":
            destructive = len(yes) == n
        elif 2 * len(yes) == n:
            ties.append(f)
            by = "tie"
            destructive = tie == "yes"
        else:
            destructive = 2 * len(yes) > n
        reason = ""
        if destructive:
            said = " | ".join(f"{a}: {labels[a][f].reason}" for a in yes)
            rule = f"{policy}, tie -> yes" if by == "tie" else policy
            reason = f"{said} [{len(yes)} of {n} ({', '.join(yes)}); {rule}]"
        outcomes[f] = Outcome(f, destructive, yes, no, by, reason)
    if unlabelled:
        raise AnnotationError(
            f"no label for {', '.join(unlabelled)}: record a decision or add the labels"
        )
    if ties and tie == "error":
        raise AnnotationError(
            f"majority is tied on {', '.join(ties)}: choose a tie rule (yes or no) "
            "or record decisions for them"
        )
    params = {"tie": tie if kind == "majority" else None, "annotators": voters,
              "decisions": len(latest)}
    return Adjudication(round_name, policy, tuple(voters), outcomes, params, decisions)


_RULES = {
    "any": "destructive if any annotator judged it so",
    "majority": "destructive if more than half of the annotators judged it so",
    "unanimous": "destructive only if every annotator judged it so",
    "annotator": "one annotator's labels",
}


def describe(result: Adjudication, round_: Round | None = None) -> str:
    kind, only = parse_policy(result.policy)
    text = f"Annotators {', '.join(result.annotators)}"
    if round_ is not None:
        text = (f"Round {round_.name} ({'blind' if round_.blind else 'not blind'}; declarations "
                f"sha256 {round_.declarations_sha256[:12]}): " + text.lower()[0] + text[1:])
    text += f"; adjudicated '{result.policy}': {_RULES[kind]}"
    if only:
        text += f" ({only})"
    if kind == "majority":
        text += f", ties -> {result.params.get('tie')}"
    partial = sum(len(o.yes) + len(o.no) < len(result.annotators)
                  for o in result.outcomes.values())
    if partial and kind != "annotator":  # the rule counts the labels given, not the roster
        text += (f"; an annotator who did not label a function is not counted for it "
                 f"({partial} function{'s' if partial != 1 else ''} judged by fewer)")
    applied = result.params.get("decisions", 0)
    if applied:
        text += f"; {applied} manual decision{'s' if applied != 1 else ''} applied"
    return text + "."


def to_boundary(
    result: Adjudication,
    name: str,
    *,
    round_: Round | None = None,
    version: int = 1,
    created: str | None = None,
    provenance: Mapping | None = None,
) -> Boundary:
    latest = {d.function: d for d in result.decisions}
    extra = {
        "round": result.round or None,
        "policy": result.policy,
        "tie": result.params.get("tie"),
        "declarations_sha256": round_.declarations_sha256 if round_ else None,
        **dict(provenance or {}),
        "decisions": [
            {"function": d.function, "destructive": d.destructive, "author": d.author,
             "reason": d.reason, "created": d.created}
            for d in latest.values()
        ],
    }
    return Boundary(
        name=name,
        destructive=result.destructive,
        version=version,
        decided_by=result.annotators,
        method=describe(result, round_),
        created=created or datetime.now(UTC).date().isoformat(),
        extra=extra,
    )


def save_boundary(
    result: Adjudication,
    name: str,
    *,
    round_: Round | None = None,
    path: str | Path | None = None,
    force: bool = False,
    created: str | None = None,
    provenance: Mapping | None = None,
    private: bool = False,
) -> tuple[Boundary, Path]:
    """Write the boundary file (``declarations/boundary/<name>.json`` unless ``path``).

    An existing file is replaced only with ``force`` and only where the boundary reader
    takes it (else its one-line :class:`BoundaryError`, nothing written); the version is
    then the old one's plus one. ``private``: readable by this login only (a boundary made
    from a blind round opened early with an override: ``annotator:NAME`` is NAME's labels).
    """
    problem = name_problem(name)
    if problem:
        raise AnnotationError(problem)
    out = Path(path) if path is not None else boundary_dir() / f"{name}.json"
    version = 1
    if out.exists():
        if not force:
            raise AnnotationError(f"{out} exists; choose another name or force a new version")
        version = _previous_version(out) + 1
    boundary = to_boundary(result, name, round_=round_, version=version, created=created,
                           provenance=provenance)
    return boundary, _write_atomically(
        out, json.dumps(boundary.to_json(), indent=2, ensure_ascii=False) + "\n",
        0o600 if private else 0o644)


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a boundary (the rule of its reader, ``--boundary``, which also
    keeps ``declarations/boundary/<name>.json`` inside its folder), or None."""
    if isinstance(name, str) and NAME.fullmatch(name):
        return None
    return (f"boundary name {visible(repr(name))[:80]}: 1-100 letters, digits, '.', '_' and "
            "'-' (ASCII), starting with a letter or digit")


def _previous_version(path: Path) -> int:
    """The version of the boundary file at ``path``, read by the boundary reader
    (:func:`careful_engine.effects.boundary.read_file`): a file it refuses (not JSON, a key
    given twice, not a boundary, a version that is no whole number from 1, a FIFO) raises its
    one-line :class:`~careful_engine.effects.boundary.BoundaryError`, and is not replaced."""
    try:
        return read_file(path).version
    except BoundaryError as e:
        raise BoundaryError(f"{e}; it is not replaced (move it away or choose another "
                            "output)") from None


def _write_atomically(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` to a new file beside ``path``, then rename it over ``path``
    (:func:`careful_engine.core.safe_write.write_bytes`): a killed process leaves the old file
    or the new one, never half of one, and a symbolic link planted at ``path`` is replaced,
    not followed."""
    return safe_write.write_bytes(path, text.encode("utf-8"), mode=mode, replace_link=True)
