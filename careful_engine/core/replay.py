"""Replay a conversation call by call on owned simulator instances, with bfcl's verdict.

Both sides run in bfcl's checker order: for each turn, the model's decoded steps, then the
reference turn as one batch. The verdict is taken at bfcl's checkpoints as the turns go by;
unlike bfcl, the replay goes on after the first failing turn so that every call of both sides
is in the trace (the rules of the effect-aware score need them). What bfcl would have left
behind in its process-global state is restored afterwards (see careful_engine.core.process).

bfcl quirk: its inference loop counts a step after executing it and quits when the count
exceeds 20, so a turn can hold 21 executed steps; the evaluator and this replay impose no step
limit of their own, and a force-quit shows only as a turn count that differs from the
reference (``multi_turn:force_terminated``), except on the last turn, where it goes unseen.
"""

from __future__ import annotations

from dataclasses import dataclass

from careful_engine.core import bfcl, checker, refcache
from careful_engine.core.budget import Budget, BudgetExceeded, Meter
from careful_engine.core.environment import Environment
from careful_engine.core.process import BfclProcess
from careful_engine.core.trajectory import CallRecord, SideTrace, Trajectory, Verdict


@dataclass
class ConversationTrace:
    """A replayed conversation: both sides' calls with states, and bfcl's verdict."""

    conversation: bfcl.Conversation
    trajectory: Trajectory | None
    model: SideTrace | None
    reference: SideTrace
    verdict: Verdict
    budget_exceeded: str | None = None  # why the replay stopped early (see careful_engine.core.budget)

    @property
    def id(self) -> str:
        return self.conversation.id


class _Side:
    def __init__(self, env: Environment) -> None:
        self.env = env
        self.turns: list[list[CallRecord]] = []
        self.ends: list[dict] = []

    def run(self, turn: int, step: int, texts: list[str]) -> list[CallRecord]:
        execute = self.env.execute
        return [execute(text, turn, step) for text in texts]

    def trace(self) -> SideTrace:
        return SideTrace(self.turns, self.env.initial_state, self.ends)


def replay(
    conv: bfcl.Conversation,
    trajectory: Trajectory | None,
    *,
    model_name: str = "careful",
    process: BfclProcess | None = None,
    snapshots: bool = True,
    extensions: BfclProcess | None = None,
    budget: Budget | None = None,
) -> ConversationTrace:
    """Replay ``trajectory`` (None: reference only) against ``conv`` and compute the verdict.

    ``process`` is the ``bfcl evaluate`` process this conversation is part of (its shared
    simulator objects carry over from earlier conversations of the file); it is left as bfcl
    would leave it. Without one, the conversation runs as in a fresh process.
    (``extensions`` is the former name of ``process``.)

    The replay runs under ``budget`` (default: :data:`careful_engine.core.budget.DEFAULT_BUDGET`);
    a conversation that exceeds it stops where it did and gets the verdict
    ``careful:budget_exceeded`` with the reason (see :mod:`careful_engine.core.budget`).
    """
    process = process or extensions or BfclProcess()
    # the classes whose process-global objects the conversation can reach (the others' are
    # never read or changed by it: see refcache.process_classes)
    classes = refcache.process_classes(conv)
    start = process.checkpoint(classes) if classes else None
    try:
        return _replay(conv, trajectory, model_name, process, snapshots, budget, classes,
                       start, guarded=True)
    except refcache.Diverged:
        # a cached reference met shared objects holding other values than it recorded:
        # everything again from the start, the reference live
        process.restore(classes, start)
        return _replay(conv, trajectory, model_name, process, snapshots, budget, classes,
                       start, guarded=False)


def _replay(conv: bfcl.Conversation, trajectory: Trajectory | None, model_name: str,
            process: BfclProcess, snapshots: bool, budget: Budget | None,
            classes: tuple[str, ...], start: bytes | None, guarded: bool) -> ConversationTrace:
    """:func:`replay` (``guarded``: whether a guarded reference may come from the cache)."""
    shares = bool(classes)
    kw = dict(model_name=model_name, snapshots=snapshots, meter=Meter(budget))
    # the reference side from careful_engine.core.refcache where it holds it (guarded where it
    # depends on the process: see refcache.guardable), else live
    ref = (refcache.reference_side(conv, model_name, snapshots, budget, kw["meter"], guarded)
           or _Side(Environment.for_conversation(conv, "reference", **kw)))
    gt = conv.ground_truth

    verdict: Verdict | None = None
    executes = True  # whether bfcl executes this entry at all
    model: _Side | None = None
    if trajectory is None or trajectory.turns is None:
        verdict, executes = checker.inference_error(), False
    else:
        model = _Side(Environment.for_conversation(conv, "model", **kw))
        if len(trajectory.turns) != len(gt):
            verdict, executes = checker.force_terminated(len(trajectory.turns), len(gt)), False

    progress = _Progress(verdict)
    stopped: str | None = None
    try:
        _turns(conv, trajectory, model, ref, progress, process, classes)
    except (BudgetExceeded, RecursionError) as e:
        stopped = str(e) if isinstance(e, BudgetExceeded) else f"state too deep to compare ({e})"
        for side in (model, ref):
            if side is not None and len(side.ends) < len(side.turns):
                side.ends.append(side.env.state)
    verdict, carried = progress.verdict, progress.carried
    if stopped is not None and verdict is None:
        # bfcl's verdict is unknown (it would have gone on); bfcl's shared objects stay as
        # far as the replay got. A verdict bfcl had already reached stands.
        verdict = checker.budget_exceeded(stopped, len(ref.turns))
        carried = process.checkpoint(classes) if shares else None

    if verdict is None:
        verdict = Verdict(True)
    if shares:
        if not executes:
            process.restore(classes, start)
        elif carried is not None:
            process.restore(classes, carried)
    return ConversationTrace(
        conversation=conv,
        trajectory=trajectory,
        model=model.trace() if model else None,
        reference=ref.trace(),
        verdict=verdict,
        budget_exceeded=stopped,
    )


class _Progress:
    """bfcl's verdict so far, and its shared objects where it stopped executing."""

    def __init__(self, verdict: Verdict | None) -> None:
        self.verdict = verdict
        self.carried: bytes | None = None


def _turns(conv: bfcl.Conversation, trajectory: Trajectory | None, model: _Side | None,
           ref: _Side, progress: _Progress, process: BfclProcess,
           classes: tuple[str, ...]) -> None:
    """Run every turn of both sides; bfcl's verdict and its shared objects where it stopped
    (``classes``: those whose process-global objects the conversation can reach)."""
    shares = bool(classes)
    gt = conv.ground_truth
    all_model_results: list[str] = []
    n_turns = max(len(gt), len(trajectory.turns) if model and trajectory else 0)
    execute = model.env.execute if model is not None else None  # (_Side.run, inlined)
    over = trajectory.over_budget if model is not None else None  # where decoding stopped
    for t in range(n_turns):
        model_turn: list[CallRecord] = []
        decoded_steps = 0
        if model is not None and t < len(trajectory.turns):
            steps = trajectory.turns[t]
            if over is not None and over[0] == t:
                steps = steps[:over[1]]
            for s, step in enumerate(steps):
                texts = step.calls
                if texts:
                    decoded_steps += 1
                    for text in texts:
                        model_turn.append(execute(text, t, s))
            model.turns.append(model_turn)
            model.ends.append(model.env.state)
            if over is not None and over[0] == t:
                raise BudgetExceeded(over[2])
        ref_turn = ref.run(t, -1, gt[t]) if t < len(gt) else []
        if t < len(gt):
            ref.turns.append(ref_turn)
            ref.ends.append(ref.env.state)
        if progress.verdict is not None or model is None:
            continue
        all_model_results.extend([r.result for r in model_turn])
        if gt[t]:
            progress.verdict = (
                (checker.empty_turn(t) if decoded_steps == 0 else None)
                or checker.state_check(model.env.instances, ref.env.instances, t,
                                       (model.env.state, ref.env.state, classes))
                or checker.response_check(all_model_results, [r.result for r in ref_turn], t)
            )
        if progress.verdict is not None and shares:
            progress.carried = process.checkpoint(classes)  # bfcl stops; later turns never run
