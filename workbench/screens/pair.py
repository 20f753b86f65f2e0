"""Compare drill-down: one conversation replayed in runs A and B, side by side."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import OptionList

from careful_engine.browse import ConversationView

from ..widgets import CallList, KeyFooter, NavBar, VerdictBar
from ..widgets.shared import plain
from .base import WorkbenchScreen


class PairScreen(WorkbenchScreen):
    """The same conversation in run A (left) and run B (right); Enter steps through the
    focused side; Escape goes back to Compare."""

    HELP = ("The conversation that changed verdict between the compared runs, replayed in "
            "both: run A on the left, run B on the right, each with its verdicts and rule "
            "counts. Tab switches sides; Enter opens the focused side in the stepper (Escape "
            "there comes back here); v shows the selected line whole; Escape returns to the "
            "comparison.")
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back to Compare"),
        Binding("enter", "step", "Step this side"),
        Binding("v", "whole", "Whole", tooltip="The selected line of the focused side, whole"),
    ]

    def __init__(self, runs: tuple[str, str], views: tuple[ConversationView, ConversationView]
                 ) -> None:
        super().__init__()
        self.runs, self.views = runs, views

    def compose(self) -> ComposeResult:
        yield NavBar("leaderboard")
        with Horizontal(id="pair"):
            for side, run in zip("ab", self.runs, strict=True):
                with Vertical(classes="pair-side") as box:
                    box.border_title = plain(f"{side.upper()}: {run}")  # (never markup)
                    yield VerdictBar(id=f"pair-verdict-{side}")
                    yield CallList(id=f"pair-calls-{side}")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = f"Compare · {self.views[0].id}"
        for side, view in zip("ab", self.views, strict=True):
            self.query_one(f"#pair-verdict-{side}", VerdictBar).show(view)
            calls = self.query_one(f"#pair-calls-{side}", CallList)
            calls.show(view)
            if view.lines:  # where it first went wrong, else the start
                line = view.divergence_line()
                calls.highlighted = line if line is not None else 0
        self.query_one("#pair-calls-a", CallList).focus()

    @on(OptionList.OptionSelected)
    def _selected(self) -> None:
        self.action_step()

    def _side(self) -> int:
        return 1 if self.focused is self.query_one("#pair-calls-b") else 0

    def action_whole(self) -> None:
        """The focused side's selected line whole (values uncut, diffed against the
        reference)."""
        from ..widgets.whole import line_whole
        from .problems import LinesScreen

        side = self._side()
        line = self.query_one(f"#pair-calls-{'ab'[side]}", CallList).highlighted
        if line is None:
            self.notify("nothing selected on this side")
            return
        title, lines = line_whole(self.views[side], line)
        self.app.push_screen(LinesScreen(f"{'AB'[side]}: {self.runs[side]} · {title}", lines))

    def action_step(self) -> None:
        """The focused side in the stepper."""
        from .conversation import ConversationScreen

        side = self._side()
        self.app.replay_run = self.runs[side]
        self.app.push_screen(ConversationScreen(self.views[side]))
