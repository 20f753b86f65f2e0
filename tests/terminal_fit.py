"""What the 80-column tests share: a terminal table shown whole on an 80-column screen."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table


def cut_at_80(table: Table) -> list[str]:
    """What of ``table`` an 80-column terminal loses: a line wider than 80 columns at its
    natural width, a column header or caption words cropped off (rich crops a table wider than
    the screen on the right, its caption wrapped at the table's width with it). Empty: whole."""
    wide = Console(width=200, record=True, file=io.StringIO())
    wide.print(table)
    problems = [f"{len(line.rstrip())} columns: {line.rstrip()!r}"
                for line in wide.export_text().splitlines() if len(line.rstrip()) > 80]
    screen = Console(width=80, record=True, file=io.StringIO())
    screen.print(table)
    text = screen.export_text()
    problems += [f"column {c.header!r} cut" for c in table.columns  # folded: line by line
                 if any(line not in text for line in str(c.header).splitlines())]
    caption = str(table.caption or "")  # wrapped, a long path folded: every character kept
    if "".join(caption.split()) not in "".join(text.split()):
        problems.append(f"caption cut: {caption!r}")
    return problems
