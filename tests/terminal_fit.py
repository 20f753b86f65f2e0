"""What the 80-column tests share: a terminal table shown whole on an 80-column screen."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from careful_engine.present.tables import Name, pieces


def cut_at_80(table: Table, natural: bool = True) -> list[str]:
    """What of ``table`` an 80-column terminal loses: a line wider than 80 columns at its
    natural width (with ``natural``: a table laid out for 80 columns), a column header or caption words cropped off (rich crops a table wider than
    the screen on the right, its caption wrapped at the table's width with it), a name (a
    :class:`~careful_engine.present.tables.Name` header or cell) folded mid-word or cut with
    "…". Empty: whole."""
    wide = Console(width=200, record=True, file=io.StringIO())
    wide.print(table)
    problems = [f"{len(line.rstrip())} columns: {line.rstrip()!r}"
                for line in wide.export_text().splitlines()
                if natural and len(line.rstrip()) > 80]
    screen = Console(width=80, record=True, file=io.StringIO())
    screen.print(table)
    text = screen.export_text()
    problems += [f"column {str(c.header)!r} cut" for c in table.columns  # folded: piece by piece
                 if any(p not in text for p in pieces(str(c.header)))]
    problems += [f"name {str(n)!r} folded mid-word or cut" for c in table.columns
                 for n in [c.header, *c.cells] if isinstance(n, Name)
                 if any(p not in text for p in pieces(str(n)))]
    caption = str(table.caption or "")  # wrapped, a long path folded: every character kept
    if "".join(caption.split()) not in "".join(text.split()):
        problems.append(f"caption cut: {caption!r}")
    return problems
