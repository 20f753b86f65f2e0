"""Small modal dialogs: a line of text, a yes/no decision with a reason, a confirmation."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from ..widgets.shared import plain


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

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("enter", "enter", "Yes"),
                Binding("n,escape", "answer(False)", "No")]

    def __init__(self, title: str, message: str, *, enter: bool = True) -> None:
        super().__init__()
        self._title, self._message, self._enter = title, message, enter

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = plain(self._title)
            yield Static(plain(self._message), classes="dialog-prompt")
            yield Label("y / Enter: yes · n / Escape: no" if self._enter else
                        "y: yes · n / Escape: no", classes="dialog-keys")

    def action_enter(self) -> None:
        """Enter answers yes unless the question wants a deliberate y."""
        if self._enter:
            self.dismiss(True)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class NewRoundDialog(ModalScreen[tuple[str, list[str], str] | None]):
    """A new blind round: its name, its roster (fixed from now on, but for its creator) and
    which functions it covers; Enter in a field accepts, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default: str) -> None:
        super().__init__()
        self._default = default

    def compose(self) -> ComposeResult:
        from textual.widgets import Select

        with Vertical(classes="dialog") as box:
            box.border_title = "New round"
            yield Static("Name:", classes="dialog-prompt")
            yield Input(self._default, id="round-name")
            yield Static("Annotators (the roster; names separated by spaces or commas):",
                         classes="dialog-prompt")
            yield Input(placeholder="e.g. alice bob", id="round-annotators")
            yield Select([("the writes (what the boundary decides)", "writes"),
                          ("every function of the declarations", "all")], value="writes",
                         allow_blank=False, compact=True, id="round-scope")
            yield Label("Enter to create · Escape to cancel", classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one("#round-annotators", Input).focus()

    @on(Input.Submitted)
    def _accept(self) -> None:
        from textual.widgets import Select

        name = self.query_one("#round-name", Input).value.strip()
        raw = self.query_one("#round-annotators", Input).value.replace(",", " ")
        annotators = list(dict.fromkeys(raw.split()))
        if not name or not annotators:
            self.notify("a round needs a name and at least one annotator", severity="warning")
            return
        self.dismiss((name, annotators, str(self.query_one("#round-scope", Select).value)))

    def action_cancel(self) -> None:
        self.dismiss(None)
