"""The ``?`` help screen: what the screen below is for and every key active on it."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from ..widgets.shared import plain

GLOBAL_HELP = (
    "Keyboard first: the footer shows the main keys, this screen all of them; Ctrl+P opens "
    "the command palette (go to a screen, open a conversation by id, score a run). 1-5 switch "
    "screens: Home, Label, Agreement, Replay, Leaderboard. Everything shown is computed by "
    "careful_engine; each screen has a headless twin (careful score, label, agree, adjudicate, "
    "leaderboard, compare)."
)


def key_tables(screen: Screen) -> tuple[Table, Table, Table]:
    """The bindings active on ``screen``: its own, the app's, the focused widget's."""
    tables = []
    for _ in range(3):
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        table.add_column(style="bold cyan", no_wrap=True, min_width=12)
        table.add_column()
        tables.append(table)
    groups: dict[tuple[int, str, str], list[str]] = {}
    for active in screen.active_bindings.values():
        b = active.binding
        if not b.description:
            continue
        own = active.node is screen and b.action in {
            x.action for x in type(screen).BINDINGS if isinstance(x, Binding)}
        where = 0 if own else 2 if active.node not in (screen, screen.app) else 1
        groups.setdefault((where, b.action, b.tooltip or b.description), []).append(
            screen.app.get_key_display(b))
    for (where, _, description), keys in groups.items():
        tables[where].add_row(" / ".join(dict.fromkeys(keys)), description)
    return tables[0], tables[1], tables[2]


class HelpScreen(ModalScreen[None]):
    """Help for the screen it was opened on: its keys first, then what it shows."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self._screen = screen

    def compose(self) -> ComposeResult:
        own, app, widget = key_tables(self._screen)
        with VerticalScroll(id="help") as box:
            # (a string title is read as markup: a conversation id in it shown literally)
            box.border_title = plain(f"Help: {self._screen.sub_title or self._screen.title or ''}")
            box.border_subtitle = "Escape to close"
            yield Static(own, id="help-keys")
            yield Static(Text(getattr(self._screen, "HELP", None) or ""), id="help-text")
            yield Static(Text("Everywhere", style="bold"), classes="help-title")
            yield Static(app, id="help-app-keys")
            yield Static(Text(GLOBAL_HELP, style="dim"), id="help-global")
            if widget.row_count:
                yield Static(Text("In the focused list or table", style="bold"),
                             classes="help-title")
                yield Static(widget, id="help-widget-keys")

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
