"""The stepper: one replayed conversation, call by call, with model and reference diffs."""

from __future__ import annotations

import time

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import OptionList

from careful_engine.browse import ConversationView, change_rows
from careful_engine.scoring.rules import RULES, rule_legend

from ..widgets import SYNTHETIC, CallDetail, CallList, DiffView, KeyFooter, NavBar, VerdictBar
from ..widgets.calls import safe_rule
from .base import WorkbenchScreen


class ConversationScreen(WorkbenchScreen):
    """Turns, steps and calls; the selected call's diffs, model beside reference."""

    HELP = ("Each turn shows bfcl's verdict on it (✓ pass, ✗ the failing turn, after which "
            "bfcl checks nothing), the user's message, the model's steps and calls (✗: the "
            "call errored), the rule hits as tags and the scripted user's answers where they "
            "came. ▶ marks the first diverging call: the first model call that changed what "
            "differs from the reference at the end of the first failing turn. Below, the "
            "selected call's result and state diff, beside the reference call of the same "
            "function (matched first-come within the turn); on a turn heading, the whole "
            "turn's changes on both sides. Red: removed, green: added, yellow: changed, dim: "
            "hidden state that bfcl never compares. v (or Enter) shows the selected line whole: "
            "every value uncut, and where the model's value differs from the reference's, "
            "the differing characters marked. f from the last failing turn wraps to the "
            "first. The tags: " + rule_legend(RULES) + ".")
    BINDINGS = [
        Binding("n", "call(1)", "Next", tooltip="Next call"),
        Binding("p", "call(-1)", "Prev", tooltip="Previous call"),
        Binding("right", "call(1)", "Next", show=False, priority=True, tooltip="Next call"),
        Binding("left", "call(-1)", "Prev", show=False, priority=True,
                tooltip="Previous call"),
        Binding("f", "failing(1)", "Failing",
                tooltip="Next failing turn (bfcl's failing turn, or an effect-safety hit)"),
        Binding("F", "failing(-1)", "Prev failing", show=False,
                tooltip="Previous failing turn"),
        Binding("h", "hit(1)", "Hit", tooltip="Next call with a rule hit"),
        Binding("H", "hit(-1)", "Prev hit", show=False,
                tooltip="Previous call with a rule hit"),
        Binding("d", "divergence", "Divergence", tooltip="The first diverging call"),
        Binding("v", "whole", "Whole",
                tooltip="The selected line whole: every value uncut, model against reference "
                        "character by character"),
        Binding("escape", "app.pop_screen", "Back", tooltip="Back to the conversation list"),
    ]

    def __init__(self, view: ConversationView) -> None:
        super().__init__()
        self.view = view
        self.line = 0
        self._rows: dict[tuple, tuple[list[dict], list[dict]]] = {}
        self.last_render_s = 0.0

    def compose(self) -> ComposeResult:
        run = self.app.replay_run
        synthetic = run is not None and self.app.context.synthetic(self.app.context.ref(run))
        yield NavBar("replay", SYNTHETIC if synthetic else "")
        yield VerdictBar(id="verdict")
        yield CallList(id="calls")
        yield CallDetail(id="detail")
        with Horizontal(id="diffs"):
            yield DiffView("model", id="model-diff")
            yield DiffView("reference", id="ref-diff")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = f"Replay · {self.view.id}"
        self.query_one("#verdict", VerdictBar).show(self.view)
        calls = self.query_one("#calls", CallList)
        calls.show(self.view)
        start = self.view.divergence_line()
        if start is None:
            start = self.view.next_call(-1)
        self.go(start if start is not None else 0)
        calls.focus()

    @property
    def selected_call(self) -> int | None:
        """The index of the selected model call (None on a turn, user or text line)."""
        return self.view.lines[self.line].call if self.view.lines else None

    def go(self, line: int | None, why: str = "nothing further that way") -> None:
        """Select ``line`` and show its diffs (None: say ``why`` there is nothing to go to)."""
        if line is None:
            self.notify(why, timeout=2.5)
            return
        if not self.view.lines:
            return
        started = time.perf_counter()
        self.line = line
        calls = self.query_one("#calls", CallList)
        if calls.highlighted != line:
            calls.highlighted = line
        self._show_line()
        self.last_render_s = time.perf_counter() - started

    def _show_line(self) -> None:
        ln = self.view.lines[self.line]
        detail = self.query_one("#detail", CallDetail)
        model, reference = self._diff_rows(ln.call, ln.turn)
        if ln.call is not None:
            cv = self.view.calls[ln.call]
            detail.show_call(cv, confirm=self.view.confirm, safe=safe_rule(self.view))
            ref_title = (f"reference: {cv.reference.text}" if cv.reference is not None
                         else "reference: no matching call")
            self.query_one("#model-diff", DiffView).show(model, title=f"model: {cv.record.text}")
            self.query_one("#ref-diff", DiffView).show(
                reference, title=ref_title,
                empty="(no state change)" if cv.reference is not None
                else "(beyond the reference: no call of this function left in the turn)")
        else:
            turn = self.view.turns[ln.turn]
            detail.show_turn(turn, self.view)
            self.query_one("#model-diff", DiffView).show(
                model, title=f"model: turn {ln.turn}", empty="(the model changed nothing)")
            self.query_one("#ref-diff", DiffView).show(
                reference, title=f"reference: turn {ln.turn}",
                empty="(the reference changes nothing)")

    def _diff_rows(self, call: int | None, turn: int) -> tuple[list[dict], list[dict]]:
        """Change rows of a call (or a whole turn) on both sides, computed once."""
        key = ("call", call) if call is not None else ("turn", turn)
        if key not in self._rows:
            if call is not None:
                cv = self.view.calls[call]
                self._rows[key] = (change_rows(cv.changes), change_rows(cv.reference_changes))
            else:
                model = [c for cv in self.view.calls if cv.turn == turn for c in cv.changes]
                ref = [c for r in self.view.turns[turn].reference for c in r.diff()]
                self._rows[key] = (change_rows(model), change_rows(ref))
        return self._rows[key]

    @on(OptionList.OptionHighlighted, "#calls")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        # a highlight the keys have moved past is stale: only the list's current one counts
        if event.option_index != event.option_list.highlighted:
            return
        if event.option_index != self.line:
            self.go(event.option_index)

    def action_call(self, step: int) -> None:
        if not self.view.calls:
            self.go(None, "the model made no call in this conversation")
        else:
            self.go(self.view.next_call(self.line, step),
                    "this is the last call" if step > 0 else "this is the first call")

    def action_failing(self, step: int) -> None:
        """The next (previous) failing turn, wrapping around past the last (first)."""
        view = self.view
        if not any(t.failing for t in view.turns):
            self.go(None, "no failing turn: bfcl passes every turn and no hit fails effect "
                          "safety")
            return
        target = view.next_failing_turn(self.line, step)
        if target is None:  # past the last: around to the first (the last, going back)
            target = view.next_failing_turn(self.line, step, wrap=True)
            here = view.lines[self.line].turn
            if view.lines[target].turn == here:
                self.notify(f"turn {here} is the only failing turn", timeout=2.5)
            else:
                self.notify("wrapped around to the " + ("first" if step > 0 else "last")
                            + " failing turn", timeout=2.5)
            if target == self.line:
                return
        self.go(target)

    def action_hit(self, step: int) -> None:
        self.go(self.view.next_hit(self.line, step),
                ("no rule hit after this line" if step > 0 else "no rule hit before this line")
                if self.view.any_hit() else "no rule hit in this conversation")

    def action_whole(self) -> None:
        """The selected line whole, in a modal (Escape closes it)."""
        from ..widgets.whole import line_whole
        from .problems import LinesScreen

        if not self.view.lines:
            self.notify("nothing to show: the conversation has no line")
            return
        title, lines = line_whole(self.view, self.line)
        self.app.push_screen(LinesScreen(title, lines))

    @on(OptionList.OptionSelected, "#calls")
    def _selected(self) -> None:
        self.action_whole()

    def action_divergence(self) -> None:
        line = self.view.divergence_line()
        if line is None:
            self.notify("no divergence: the conversation passes bfcl's check", timeout=2)
            return
        self.go(line)
