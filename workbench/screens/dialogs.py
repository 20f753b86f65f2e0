"""Small modal dialogs: a line of text, a yes/no decision with a reason, a confirmation."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from ..context import plain


class TextDialog(ModalScreen[str | None]):
    """Ask for one line of text (Enter accepts, Escape cancels)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, prompt: str, *, value: str = "",
                 placeholder: str = "") -> None:
        super().__init__()
        self._title, self._prompt = title, prompt
        self._value, self._placeholder = value, placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = plain(self._title)
            yield Static(plain(self._prompt), classes="dialog-prompt")
            yield Input(self._value, placeholder=self._placeholder, id="dialog-input")
            yield Label("Enter to accept · Escape to cancel", classes="dialog-keys")

    @on(Input.Submitted)
    def _accept(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class DecisionDialog(ModalScreen[tuple[bool, str] | None]):
    """A manual adjudication decision: y or n, then a reason and Enter (as when labelling)."""

    BINDINGS = [Binding("y", "choose(True)", "Destructive"),
                Binding("n", "choose(False)", "Not destructive"),
                Binding("escape", "cancel", "Cancel")]

    def __init__(self, function: str, proposed: bool | None = None) -> None:
        super().__init__()
        self._function = function
        self._proposed = proposed
        self.choice: bool | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = plain(f"Decide {self._function}")
            proposal = ("" if self._proposed is None else
                        f" (the signals propose: {'destructive' if self._proposed else 'not'})")
            yield Static(f"Destructive? y / n{proposal}", id="decision-choice",
                         classes="dialog-prompt")
            yield Input(placeholder="reason (required), then Enter", id="dialog-input",
                        disabled=True)
            yield Label("y / n to choose · Enter to record · Escape to cancel",
                        classes="dialog-keys")

    def action_choose(self, destructive: bool) -> None:
        self.choice = destructive
        self.query_one("#decision-choice", Static).update(
            "Decision: " + ("destructive" if destructive else "not destructive"))
        field = self.query_one("#dialog-input", Input)
        field.disabled = False
        field.focus()

    @on(Input.Submitted)
    def _accept(self, event: Input.Submitted) -> None:
        if self.choice is not None and event.value.strip():
            self.dismiss((self.choice, event.value.strip()))

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    """Ask before doing something that cannot be undone (y / Enter: yes; n / Escape: no)."""

    BINDINGS = [Binding("y,enter", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self._title, self._message = title, message

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = plain(self._title)
            yield Static(plain(self._message), classes="dialog-prompt")
            yield Label("y / Enter: yes · n / Escape: no", classes="dialog-keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
