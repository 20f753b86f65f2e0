"""A modal list of lines shown literally: a run's input problems (``file:line [id]: reason``),
or a value too long for its column (with a character-level diff against another)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from careful_engine.core.safe_text import clip, visible

from ..widgets.shared import plain

LIMIT = 2000  # lines shown; the rest are counted
WIDTH = 2000  # characters of a line given as a string; longer ones cut in the middle


class LinesScreen(ModalScreen[None]):
    """Lines of text from files, shown literally (never as markup); Escape closes."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, title: str, lines: Sequence[str | Text], *, empty: str = "nothing") -> None:
        super().__init__()
        self._title, self._lines, self._empty = title, list(lines), empty

    def compose(self) -> ComposeResult:
        body = Text()
        for i, line in enumerate(self._lines[:LIMIT]):
            if i:
                body.append("\n")
            body.append(line if isinstance(line, Text) else Text(visible(clip(line, WIDTH))))
        if len(self._lines) > LIMIT:
            body.append(f"\n… and {len(self._lines) - LIMIT} more", style="dim")
        if not self._lines:
            body = Text(self._empty, style="dim")
        with VerticalScroll(id="lines") as box:
            box.border_title = plain(self._title)  # (a string title is read as markup)
            box.border_subtitle = "Escape to close"
            yield Static(body, id="lines-body")
