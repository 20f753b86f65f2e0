"""Small modal dialogs: a line of text, a yes/no decision with a reason, a confirmation."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from careful_engine.annotation.names import parse_names

from ..widgets.picker import Picker
from ..widgets.shared import plain


class TextDialog(ModalScreen[str | None]):
    """Ask for one line of text (Enter accepts, Escape cancels)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, prompt: str, *, value: str = "",
                 placeholder: str = "", allow_empty: bool = False) -> None:
        super().__init__()
        self._title, self._prompt = title, prompt
        self._value, self._placeholder = value, placeholder
        self._allow_empty = allow_empty

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = plain(self._title)
            yield Static(plain(self._prompt), classes="dialog-prompt")
            yield Input(self._value, placeholder=self._placeholder, id="dialog-input")
            yield Label("Enter to accept · Escape to cancel", classes="dialog-keys")

    @on(Input.Submitted)
    def _accept(self, event: Input.Submitted) -> None:
        if event.value.strip() or self._allow_empty:
            self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class DecisionDialog(ModalScreen[tuple[bool, str] | None]):
    """A manual adjudication decision: y or n, then a reason and Enter (as when labelling)."""

    BINDINGS = [Binding("y", "choose(True)", "Destructive"),
                Binding("n", "choose(False)", "Not destructive"),
                Binding("up", "back", "Change y / n"),
                Binding("escape", "cancel", "Cancel")]
    KEYS = "y / n to choose · Enter to record · Escape to cancel"
    TYPING = "type the reason, then Enter to record · Up: change y / n · Escape to cancel"

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
                        disabled=True, select_on_focus=False)  # (back to it: typed on)
            yield Label(self.KEYS, id="decision-keys", classes="dialog-keys")

    def action_choose(self, destructive: bool) -> None:
        """Choose; then the reason field has the focus (y and n are typed there)."""
        self.choice = destructive
        self.query_one("#decision-choice", Static).update(
            "Decision: " + ("destructive" if destructive else "not destructive"))
        self.query_one("#decision-keys", Label).update(self.TYPING)
        field = self.query_one("#dialog-input", Input)
        field.disabled = False
        field.focus()

    def action_back(self) -> None:
        """Out of the reason field (kept as typed): y and n choose again."""
        self.set_focus(None)
        self.query_one("#decision-keys", Label).update(self.KEYS)

    @on(Input.Submitted)
    def _accept(self, event: Input.Submitted) -> None:
        if self.choice is not None and event.value.strip():
            self.dismiss((self.choice, event.value.strip()))
        else:  # said, never a silent Enter
            self.query_one("#decision-keys", Label).update(Text(
                "a reason is required: why is it " + ("" if self.choice else "not ")
                + "destructive? (recorded with the decision)", style="bold red"))

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


@dataclass(frozen=True)
class NewRound:
    """What the new-round dialog asks: the round's name, its roster (people, and language
    models as NAME=MODEL, as ``careful round new --llm`` takes them) and its functions."""

    name: str
    annotators: tuple[str, ...]
    llms: dict[str, str] = field(default_factory=dict)
    scope: str = "writes"  # "writes" or "all"


def llm_pairs(raw: str) -> dict[str, str]:
    """``NAME=MODEL`` pairs separated by spaces or commas (ValueError names a bad one)."""
    out: dict[str, str] = {}
    for item in parse_names(raw):
        who, sep, model = item.partition("=")
        if not sep or not who or not model:
            raise ValueError(f"expected NAME=MODEL, got {item!r}")
        out[who] = model
    return out


class NewRoundDialog(ModalScreen[NewRound | None]):
    """A new blind round: its name, its roster (fixed from now on, but for its creator:
    people and language-model annotators) and which functions it covers; Enter in a field
    accepts, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default: str) -> None:
        super().__init__()
        self._default = default

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "New round"
            yield Static("Name:")
            yield Input(self._default, compact=True, id="round-name")
            yield Static("Annotators (the roster; names separated by spaces or commas):")
            yield Input(placeholder="e.g. alice bob", compact=True, id="round-annotators")
            yield Static("Language-model annotators, as NAME=MODEL (optional):")
            yield Input(placeholder="e.g. g4=gpt-4o-2024-11-20", compact=True, id="round-llms")
            yield Static("Functions:")
            yield Picker([("the writes (what the boundary decides)", "writes"),
                          ("every function of the declarations", "all")], value="writes",
                         allow_blank=False, compact=True, id="round-scope")
            yield Label("Tab moves · Enter to create · Escape to cancel", classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one("#round-annotators", Input).focus()

    @on(Input.Submitted)
    def _accept(self) -> None:
        name = self.query_one("#round-name", Input).value.strip()
        annotators = parse_names(self.query_one("#round-annotators", Input).value)
        try:
            llms = llm_pairs(self.query_one("#round-llms", Input).value)
        except ValueError as e:
            self.notify(f"language-model annotators: {e}", severity="warning")
            return
        if not name or not (annotators or llms):
            self.notify("a round needs a name and at least one annotator", severity="warning")
            return
        scope = str(self.query_one("#round-scope", Picker).value)
        self.dismiss(NewRound(name, tuple(annotators), llms, scope))

    def action_cancel(self) -> None:
        self.dismiss(None)
