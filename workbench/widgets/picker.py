"""A drop-down that opens only on Enter or Space (Up and Down move the focus on), shows its
focus clearly, and cuts a long value in the middle so that names sharing a prefix differ."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import Select, Static
from textual.widgets._select import SelectCurrent

from .shared import middle


class Picker(Select):
    """A :class:`Select` for keyboard use: Down on it never opens it unasked."""

    inherit_bindings = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,space", "show_overlay", "Choose", show=False),
        Binding("down", "app.focus_next", "Next", show=False),
        Binding("up", "app.focus_previous", "Previous", show=False),
    ]
    DEFAULT_CSS = """
    Picker.-textual-compact:focus > SelectCurrent {
        background: $accent 40%;
        text-style: bold;
    }
    """

    _cut = False  # the label on view is cut (Select shows a new value whole)

    def _watch_value(self, value) -> None:
        super()._watch_value(value)
        self._cut = False
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        """Show the value whole if it fits, else cut in the middle (``gpt-oss…v0.11.0``)."""
        if not self.is_mounted:
            return
        current = self.query_one(SelectCurrent)
        label = current.label
        if label is Select.NULL:
            return
        text = label.plain if isinstance(label, Text) else str(label)
        static = current.query_one("#label", Static)
        width = static.content_size.width
        if width <= 0:
            return
        fitted = middle(text, width)
        if fitted == text and not self._cut:
            return  # shown whole already: no update, no new layout
        static.update(Text(fitted, style=label.style if isinstance(label, Text) else ""))
        self._cut = fitted != text
