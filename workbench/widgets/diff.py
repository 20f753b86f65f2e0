"""State diffs as coloured text: red removed, green added, yellow changed, hidden state dim."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from careful_engine.core.safe_text import visible

STYLES = {"removed": "red", "added": "green", "changed": "yellow", "more": "dim"}
MARKS = {"removed": "-", "added": "+", "changed": "~", "more": " "}


def diff_text(rows: Sequence[dict], empty: str = "(no state change)") -> RenderableType:
    """Change rows (path, kind, before, after, hidden): a mark, then the path with its old
    and new values below it (long paths and values fold inside their column)."""
    if not rows:
        return Text(empty, style="dim italic")
    table = Table.grid(padding=(0, 1))
    table.add_column(width=1, no_wrap=True)
    table.add_column(overflow="fold", ratio=1)
    for row in rows:
        kind = row.get("kind", "changed")
        style = STYLES.get(kind, "") + (" dim" if row.get("hidden") else "")
        body = Text(visible(row.get("path", "")), style=style + " bold")
        if row.get("hidden"):
            body.append(" (hidden)", style="dim italic")
        if kind in ("removed", "changed"):
            body.append(f"\n  was {visible(row.get('before', ''))}", style=style)
        if kind in ("added", "changed"):
            body.append(f"\n  {'now' if kind == 'changed' else '='} "
                        f"{visible(row.get('after', ''))}",
                        style=style)
        table.add_row(Text(MARKS.get(kind, " "), style=style + " bold"), body)
    return table


class DiffView(VerticalScroll):
    """A titled, scrollable state diff."""

    DEFAULT_CSS = """
    DiffView { height: 1fr; border: round $panel; padding: 0 1; }
    DiffView:focus-within { border: round $accent; }
    """

    def __init__(self, title: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = Text(visible(title))  # titles quote model text: never markup
        self._body = Static("", markup=False)

    def compose(self):  # noqa: D102
        yield self._body

    def show(self, rows: Sequence[dict] | None, *, title: str | None = None,
             empty: str = "(no state change)") -> None:
        """Show ``rows`` (None: ``empty`` as a note)."""
        if title is not None:
            self.border_title = Text(visible(title))
        self._body.update(diff_text(rows or [], empty))
        self.scroll_home(animate=False)
