"""Re-judging logged scripted-user answers under the stricter scripts, without regenerating
anything (paper §7, "Sensitivity": the user script).

Every answer recorded in a confirm run (``careful_user_answers``) is decided again by
:class:`~careful_engine.protocol.user.ScriptedUser` under each script, from what the script saw
when it answered: the answered step's model response, the turn's request and reference calls,
the answers given earlier in the turn, and the functions the model called in the turn's
earlier steps. An answer changes when the script would give another kind (or none). A
conversation with a changed answer depends on the script: its trajectory after that answer,
and so its verdicts, could differ had the run been generated under the stricter script.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.core.safe_read import MAX_SMALL_BYTES, read_regular
from careful_engine.core.trajectory import Outcome
from careful_engine.effects import boundary as boundaries
from careful_engine.effects.boundary import Boundary
from careful_engine.protocol.hook import turn_references
from careful_engine.protocol.user import (
    STRICTER,
    ScriptedUser,
    TurnReference,
    TurnState,
    function_name,
)

# Which verdicts the affected conversations have, in the order reported.
VERDICTS = ("bfcl", "safe", "strict")


@dataclass(frozen=True)
class Answer:
    """One logged answer and what each script decides in its place (None: no answer)."""

    conversation: str
    turn: int
    step: int
    logged: str
    decided: dict[str, str | None]

    def changed(self, script: str) -> bool:
        return self.decided.get(script) != self.logged


@dataclass
class ScriptSummary:
    """One script over a model's logged answers."""

    script: str
    answers: int = 0
    changed: int = 0
    yes_withheld: int = 0  # a logged yes the script would not give
    conversations: list[str] = field(default_factory=list)  # with a changed answer
    passing: Counter = field(default_factory=Counter)  # verdict -> affected ones that pass


@dataclass
class Reexamination:
    model: str
    boundary: str
    answers: list[Answer]
    summaries: list[ScriptSummary]
    logged: Counter = field(default_factory=Counter)  # logged kinds


def rejudge(trace, users: dict[str, ScriptedUser]) -> list[Answer]:
    """Every logged answer of one replayed conversation, decided again by each user."""
    traj = trace.trajectory
    if traj is None or not traj.user_answers or traj.turns is None:
        return []
    refs = turn_references(trace.conversation)
    out: list[Answer] = []
    for t, answers in sorted(traj.user_answers.items()):
        steps = traj.turns[t] if t < len(traj.turns) else []
        ref = refs[t] if t < len(refs) else TurnReference("", ())
        earlier: list[str] = []
        for a in answers:
            if not isinstance(a, dict):
                continue
            try:
                s = int(a.get("step", -1))
            except (TypeError, ValueError):
                s = -1
            kind = str(a.get("answer"))
            if not 0 <= s < len(steps):
                earlier.append(kind)
                continue
            before = [st for st in steps[:s] if st.outcome is Outcome.CALLS]
            state = TurnState(answers=list(earlier), acted=bool(before),
                              made=frozenset(function_name(c) for st in before
                                             for c in st.calls))
            decided = {name: u.decide(steps[s].raw, ref, state).kind
                       for name, u in users.items()}
            out.append(Answer(trace.conversation.id, t, s, kind, decided))
            earlier.append(kind)
    return out


SCRIPTS = ("paper", *STRICTER)  # the paper's script is a check: it should give the logged answers


def scripted_users(destructive: Iterable[str],
                   scripts: Iterable[str] = SCRIPTS) -> dict[str, ScriptedUser]:
    """A scripted user per script, deciding under the ``destructive`` functions."""
    destructive = frozenset(destructive)
    return {s: ScriptedUser(destructive, s) for s in scripts}


def reexamine_model(ms, destructive: Iterable[str], boundary: str = "",
                    scripts: Iterable[str] = SCRIPTS,
                    rejudged: Callable[[Any], list[Answer] | None] | None = None,
                    ) -> Reexamination | None:
    """Re-judge every logged answer of a model score (None when no category was generated
    under the confirmation protocol): ``rejudged(result)`` gives a conversation's answers
    already re-judged under ``destructive`` and ``scripts`` where it has them (where the
    conversation was replayed: see careful_engine.analysis.sensitivity), else its kept trace
    is re-judged here; a conversation with neither (missing, unscorable) has no answers."""
    confirm = [cs for cs in ms.categories.values() if cs.confirm]
    if not confirm:
        return None
    users = scripted_users(destructive, scripts)
    answers: list[Answer] = []
    verdicts: dict[str, dict[str, bool]] = {}
    for cs in confirm:
        for r in cs.results:
            got = rejudged(r) if rejudged is not None else None
            if got is None:
                if r.trace is None:
                    continue
                got = rejudge(r.trace, users)
            answers += got
            verdicts[r.id] = {"bfcl": r.verdict.valid, "safe": r.safe_valid,
                              "strict": bool(r.strict_valid)}
    summaries = []
    for script in users:
        sm = ScriptSummary(script, len(answers))
        affected: dict[str, None] = {}
        for a in answers:
            if a.changed(script):
                sm.changed += 1
                sm.yes_withheld += a.logged == "yes" and a.decided[script] != "yes"
                affected[a.conversation] = None
        sm.conversations = list(affected)
        for cid in sm.conversations:
            for v in VERDICTS:
                sm.passing[v] += verdicts.get(cid, {}).get(v, False)
        summaries.append(sm)
    return Reexamination(ms.model, boundary, answers, summaries,
                         Counter(a.logged for a in answers))


def reexamine_run(run, ms, default: Boundary, warn: Callable[[str], None] | None = None,
                  rejudged: Callable[[Any], list[Answer] | None] | None = None,
                  ) -> Reexamination | None:
    """The logged scripted-user answers of a confirm model (``ms``, one model score of the
    :class:`~careful_engine.scoring.score.RunScore` ``run``, traces kept or answers re-judged
    already: ``rejudged``, see :func:`reexamine_model`) re-judged under every script, with the
    boundary the run was generated under (:func:`judging_boundary`); ``warn`` hears when the
    generation boundary is not here."""
    if not any(cs.confirm for cs in ms.categories.values()):
        return None
    files = [lf for lf, cs in run.files if cs.model == ms.model]
    destructive, missing = judging_boundary(files[0].file.path if files else None, default)
    if missing and warn:
        warn(f"{ms.model}: generated under boundary {missing}, which is not here; "
             f"re-judging under {destructive.name}")
    return reexamine_model(ms, destructive.destructive, destructive.name, rejudged=rejudged)


def judging_boundary(result_path, default: Boundary) -> tuple[Boundary, str | None]:
    """The boundary a result file's logged answers are re-judged under: the one its run was
    generated under (named in its careful_run.json), else ``default``; and that name where
    it is not here (None otherwise)."""
    name = generation_boundary(result_path) if result_path is not None else None
    if not name:
        return default, None
    try:
        return boundaries.load_named(name), None  # a name from the manifest, never a path
    except (ValueError, OSError):
        return default, name


def generation_boundary(result_path) -> str | None:
    """The boundary named in the ``careful_run.json`` next to a result file, if any."""
    path = Path(result_path)
    folder = path.parent.parent if path.parent.name == "multi_turn" else path.parent
    manifest = folder / "careful_run.json"
    try:
        data = json.loads(read_regular(manifest, MAX_SMALL_BYTES))  # not a FIFO, bounded
    except (OSError, ValueError, RecursionError):
        return None
    b = data.get("boundary") if isinstance(data, dict) else None
    if isinstance(b, dict):
        b = b.get("name")
    return b if isinstance(b, str) and b else None
