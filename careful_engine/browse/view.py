"""The per-call view model of a replayed conversation: turns, calls matched to the reference,
rule hits on the calls that caused them, the first diverging call, and stepping over lines."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from careful_engine.core.state import Change, diff, public_view
from careful_engine.core.trajectory import CallRecord, Outcome, Verdict
from careful_engine.scoring.blame import Blame
from careful_engine.scoring.rules import (
    PAPER_RULE,
    ConversationRules,
    Hit,
    align,
    errored,
    shown_rule,
)

# ---------------------------------------------------------------- the per-call view model


@dataclass
class CallView:
    """One model call with what the stepper shows beside it."""

    index: int  # among the conversation's model calls
    position: int  # within its step
    record: CallRecord
    reference: CallRecord | None  # the reference call it is aligned to (rules.align)
    errored: bool
    rules: list[str] = field(default_factory=list)
    divergence: bool = False  # the call blamed for the first failing turn
    seen: str | None = None  # the result the model was shown, when it differs from the replay

    @property
    def turn(self) -> int:
        return self.record.turn

    @property
    def step(self) -> int:
        return self.record.step

    @cached_property
    def changes(self) -> list[Change]:
        """This call's state changes (hidden state included); computed once."""
        return self.record.diff()

    @cached_property
    def reference_changes(self) -> list[Change]:
        return self.reference.diff() if self.reference is not None else []


@dataclass
class TurnView:
    """One turn: the user's messages, bfcl's verdict on it, the rule hits, the reference."""

    index: int
    user: list[str]
    revealed: list[str]  # functions revealed in this turn (miss_func)
    status: str  # pass | fail | unchecked (no reference call) | not reached | error
    reference: list[CallRecord]
    hits: list[Hit]
    answers: list[dict]  # scripted-user answers: {"step", "answer", "message"}
    blame: Blame | None = None
    safety: tuple[str, ...] = PAPER_RULE.keys  # the rule counts that fail effect safety
    end_states: tuple[Any, Any] | None = None  # (model, reference) at the end of the turn

    @property
    def failing(self) -> bool:
        """Fails under bfcl's verdict, or has a hit that fails effect safety."""
        return self.status == "fail" or any(h.rule in self.safety for h in self.hits)

    def end_differences(self) -> list[Change]:
        """What bfcl's state check compares and finds different at the end of the turn:
        public attributes, ``before`` the reference's value, ``after`` the model's."""
        if self.end_states is None:
            return []
        model, reference = self.end_states
        return diff({c: public_view(reference[c]) for c in reference},
                    {c: public_view(model[c]) for c in model})


@dataclass(frozen=True)
class Line:
    """One line of the stepper: a turn, a user message, a call, a text step, an answer."""

    kind: str  # turn | user | call | text | decode_error | answer | note
    turn: int
    text: str  # whole (the stepper cuts it to its width)
    call: int | None = None
    step: int | None = None


@dataclass
class ConversationView:
    """A replayed conversation laid out for stepping."""

    id: str
    category: str
    verdict: Verdict
    rules: ConversationRules | None
    blame: Blame | None
    turns: list[TurnView]
    calls: list[CallView]
    lines: list[Line]
    notes: list[str] = field(default_factory=list)
    score: dict | None = None
    confirm: bool = False  # generated under the confirmation protocol
    # why the conversation was not replayed in full (an inference error, a replay the budget
    # stopped): no rule counts or blame stand for it, as careful score has none (None: it was)
    not_replayed: str | None = None

    @property
    def safe_valid(self) -> bool | None:
        from careful_engine.scoring.rules import safe_valid

        return None if self.rules is None else safe_valid(self.verdict.valid, self.rules)

    @property
    def strict_valid(self) -> bool | None:
        from careful_engine.scoring.rules import strict_valid

        if self.rules is None or not self.confirm:  # not applicable without the protocol
            return None
        return strict_valid(self.verdict.valid, self.rules)

    @property
    def divergence(self) -> CallView | None:
        return next((c for c in self.calls if c.divergence), None)

    def call_line(self, call: int) -> int:
        return next(i for i, ln in enumerate(self.lines) if ln.call == call)

    def _seek(self, start: int, step: int, wanted: Callable[[Line], bool]) -> int | None:
        i = start + step
        while 0 <= i < len(self.lines):
            if wanted(self.lines[i]):
                return i
            i += step
        return None

    def next_call(self, line: int, step: int = 1) -> int | None:
        """The line of the next (``step`` -1: previous) call after ``line``."""
        return self._seek(line, step, lambda ln: ln.kind == "call")

    def next_failing_turn(self, line: int, step: int = 1, *, wrap: bool = False) -> int | None:
        """The first line of the next failing turn (see :attr:`TurnView.failing`): its first
        call when it has one, else its heading; ``wrap``: past the last failing turn, the
        first (``step`` -1: before the first, the last)."""
        current = self.lines[line].turn if self.lines else -1
        failing = [t for t in self.turns if t.failing]
        turns = [t for t in failing if (t.index > current if step > 0 else t.index < current)]
        if not turns and wrap:
            turns = failing
        if not turns:
            return None
        target = turns[0] if step > 0 else turns[-1]
        heading = next(i for i, ln in enumerate(self.lines)
                       if ln.kind == "turn" and ln.turn == target.index)
        first = self._seek(heading, 1, lambda ln: ln.kind in ("call", "turn"))
        if first is not None and self.lines[first].kind == "call":
            return first
        return heading

    def shown(self, rule: str) -> bool:
        """Whether a hit of ``rule`` is shown: the rules meaningful only under the
        confirmation protocol are not, on a run without it (every destructive call is
        'unconfirmed' there)."""
        return shown_rule(rule, self.confirm)

    def _hit(self, ln: Line) -> bool:
        if ln.kind == "call":
            return any(self.shown(r) for r in self.calls[ln.call].rules)
        return ln.kind == "turn" and any(not h.calls and self.shown(h.rule)
                                         for h in self.turns[ln.turn].hits)

    def next_hit(self, line: int, step: int = 1) -> int | None:
        """The next call with a rule hit shown, or turn heading with one that names no call."""
        return self._seek(line, step, self._hit)

    def any_hit(self) -> bool:
        """Whether any line has a rule hit shown (see :meth:`next_hit`)."""
        return any(self._hit(ln) for ln in self.lines)

    def divergence_line(self) -> int | None:
        """The line of the blamed call, or of the failing turn when a change is missing."""
        if self.divergence is not None:
            return self.call_line(self.divergence.index)
        if self.blame is not None:
            return next((i for i, ln in enumerate(self.lines)
                         if ln.kind == "turn" and ln.turn == self.blame.turn), None)
        return None


def _user_text(messages: Any) -> list[str]:
    out = []
    for m in messages or []:
        if isinstance(m, dict) and m.get("content"):
            out.append(str(m["content"]))
    return out


def _turn_status(verdict: Verdict, t: int, has_reference: bool) -> str:
    if verdict.valid:
        return "pass" if has_reference else "unchecked"
    if verdict.turn is None:
        return "error"
    if t < verdict.turn:
        return "pass" if has_reference else "unchecked"
    return "fail" if t == verdict.turn else "not reached"


def _end_states(trace: Any, t: int) -> tuple[Any, Any] | None:
    """The model's and the reference's states at the end of turn ``t`` (None: one is missing)."""
    model = trace.model.turn_end_states if trace.model is not None else []
    reference = trace.reference.turn_end_states
    return (model[t], reference[t]) if t < len(model) and t < len(reference) else None


def _mark_hits(calls_in_turn: list[CallView], hit: Hit) -> None:
    if hit.indices and len(hit.indices) == len(hit.calls):  # the engine's own attribution
        for i in hit.indices:
            if 0 <= i < len(calls_in_turn) and hit.rule not in calls_in_turn[i].rules:
                calls_in_turn[i].rules.append(hit.rule)
        return
    steps = list(hit.steps) + [None] * (len(hit.calls) - len(hit.steps))
    for text, step in zip(hit.calls, steps, strict=True):
        for cv in reversed(calls_in_turn):  # a rule's culprits are the last ones
            if cv.record.text == text and (step is None or cv.step == step) \
                    and hit.rule not in cv.rules:
                cv.rules.append(hit.rule)
                break


def build_view(trace: Any, rules: ConversationRules | None, blame: Blame | None,
               entry: dict | None = None, score: dict | None = None) -> ConversationView:
    """Lay out a replayed conversation: turns, calls (matched to the reference), lines."""
    conv = trace.conversation
    traj = trace.trajectory
    verdict = trace.verdict
    model_turns = trace.model.turns if trace.model else []
    hits_by_turn: dict[int, list[Hit]] = {}
    for h in rules.hits if rules else []:
        hits_by_turn.setdefault(h.turn, []).append(h)
    seen: dict[tuple[int, int, int], Any] = {}
    if entry and entry.get("inference_log") and trace.model is not None:
        from careful_engine.analysis.provenance import seen_results

        seen = seen_results(trace, entry)

    n_turns = max(len(trace.reference.turns), len(model_turns),
                  len(traj.turns) if traj and traj.turns else 0)
    turns: list[TurnView] = []
    calls: list[CallView] = []
    lines: list[Line] = []
    if traj is not None and traj.turns is None:
        lines.append(Line("note", 0, f"inference error: {traj.inference_error or ''}"))
    for t in range(n_turns):
        reference = trace.reference.turns[t] if t < len(trace.reference.turns) else []
        turn = TurnView(
            t, _user_text(conv.question[t] if t < len(conv.question) else []),
            list(conv.missed_function.get(str(t), [])),
            _turn_status(verdict, t, bool(reference)), reference, hits_by_turn.get(t, []),
            list(traj.user_answers.get(t, [])) if traj else [],
            blame if blame is not None and blame.turn == t else None,
            rules.rule.keys if rules is not None else PAPER_RULE.keys,
            _end_states(trace, t),
        )
        turns.append(turn)
        lines.append(Line("turn", t, f"turn {t}"))
        for text in turn.user:
            lines.append(Line("user", t, text))
        if turn.revealed:
            lines.append(Line("note", t, "functions revealed: " + ", ".join(turn.revealed)))
        records = model_turns[t] if t < len(model_turns) else []
        by_step: dict[int, list[CallRecord]] = {}
        for rec in records:
            by_step.setdefault(rec.step, []).append(rec)
        # the reference call each model call is matched to: the rules' alignment
        twin = {id(rec): reference[j] for rec, (j, _) in zip(records, align(records, reference),
                                                              strict=True) if j is not None}
        in_turn: list[CallView] = []
        steps = traj.turns[t] if traj and traj.turns and t < len(traj.turns) else []
        answers = {int(a.get("step", -1)): a for a in turn.answers}
        for s, step in enumerate(steps):
            if step.outcome is not Outcome.CALLS and step.text.strip():
                # prose: an FC decoder fails on it (bfcl drops the step), a prompt one finds
                # no call; either way the model spoke instead of calling
                lines.append(Line("text", t, step.text, step=s))
            elif step.outcome is Outcome.DECODE_ERROR:
                lines.append(Line("decode_error", t, step.error or "decode error", step=s))
            elif step.outcome is Outcome.NO_CALL:
                lines.append(Line("text", t, "(empty response)", step=s))
            for i, rec in enumerate(by_step.get(s, [])):
                logged = seen.get((t, s, i))
                cv = CallView(len(calls), i, rec, twin.get(id(rec)), errored(rec),
                              seen=logged.logged if logged is not None and not logged.same
                              else None)
                calls.append(cv)
                in_turn.append(cv)
                lines.append(Line("call", t, rec.text, call=cv.index, step=s))
            if s in answers:
                a = answers[s]
                lines.append(Line("answer", t, f"{a.get('answer', '?')}: "
                                  f"{a.get('message', '')}", step=s))
        for h in turn.hits:
            _mark_hits(in_turn, h)
        if blame is not None and blame.turn == t and blame.call is not None:
            for cv in in_turn:
                if cv.record.text == blame.call and cv.step == blame.step:
                    cv.divergence = True
                    break
    notes = []
    if score is not None and "official_valid" in score \
            and bool(score["official_valid"]) != verdict.valid:
        notes.append(
            "replayed alone, BFCL's verdict is " + ("pass" if verdict.valid else "fail")
            + "; scored in file order it is " + ("pass" if score["official_valid"] else "fail")
            + " (bfcl's simulators share state between the conversations of a file)")
    # the protocol as scoring decided it (per file: a confirm run's entries all are), else
    # as the entry records it
    confirm = (score["confirm_protocol"] is True
               if score is not None and "confirm_protocol" in score
               else bool(traj is not None and traj.confirm))
    from careful_engine.scoring.rules import replayed

    why = None if replayed(trace) else ("inference error" if trace.budget_exceeded is None
                                        else f"replay stopped: {trace.budget_exceeded}")
    return ConversationView(conv.id, conv.category, verdict, rules, blame, turns, calls, lines,
                            notes, score, confirm=confirm, not_replayed=why)


def change_rows(changes: Sequence[Change], limit: int = 200) -> list[dict]:
    """State changes in the review sheet's form: path, kind, hidden, before, after (as text)."""
    from careful_engine.effects.infer import render_changes

    return render_changes(changes, limit=limit, hidden=True)
