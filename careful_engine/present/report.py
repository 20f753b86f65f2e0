"""Tables in four renderings: the terminal (rich), Markdown, CSV and JSON.

Every command that prints a table builds a :class:`Report` once and renders it where asked,
so what the terminal shows and what the files hold cannot drift apart. A table whose figures
depend on how the rules were evaluated (safe and strict accuracy, rule counts) carries the
settings it was made with (:func:`~careful_engine.scoring.settings.table_settings`), and every
file states them: the CSV as the columns ``boundary``, ``detector`` and ``safe rule`` after the
table's own (and ``replay budget`` where it is not the default), the Markdown as a line under
the table, the JSON as a ``scored_with`` object.
A figure is a float cell: the JSON stores its value to :data:`~careful_engine.core.figures.SNAP`
decimals (a percentage as :func:`~careful_engine.core.figures.percent` gives it, as the CI
document does), the terminal, Markdown and CSV show it rounded half up
(:meth:`Report.format_cell`), so a reader who rounds the JSON's value gets the table's figure.
A :class:`Fixed` cell (a statistic shown to its own places: p, rho, a per-conversation mean)
keeps its full value in the JSON (a p of 1e-12 is not 0).
What a title names that no row does (compare's runs A and B: :attr:`Report.context`) the CSV
states likewise, as columns before the settings, and the JSON as a ``context`` object.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from careful_engine.core import bfcl
from careful_engine.core.figures import SNAP, figure_text, percent, shown
from careful_engine.core.safe_text import csv_cell, markdown_literal, markdown_text, visible
from careful_engine.core.safe_write import writer
from careful_engine.scoring.rules import SafeRule

Cell = str | int | float | None

# the CSV columns that state a table's settings (Report.settings), after the table's own
SETTINGS_COLUMNS = ["boundary", "detector", "safe rule"]


def settings_cells(settings: dict[str, Any]) -> list[str | None]:
    """The boundary, detector and safe rule of a ``scored_with`` dict, as table cells."""
    rule = settings.get("safe_rule")
    return [settings.get("boundary"), settings.get("detector"),
            SafeRule(**rule).label if isinstance(rule, dict) else None]


def settings_columns(settings: dict[str, Any]) -> tuple[list[str], list[str | None]]:
    """The CSV's settings columns and cells: :data:`SETTINGS_COLUMNS`, and ``replay budget``
    where it is not the default (:func:`budget_limits_text`)."""
    cells = settings_cells(settings)
    text = budget_limits_text(settings.get("budget"))
    if not text:
        return SETTINGS_COLUMNS, cells
    return [*SETTINGS_COLUMNS, "replay budget"], [*cells, text]


def budget_limits_text(limits: Any) -> str:
    """A ``scored_with``'s ``budget`` (the limits that differ from the default) as a cell:
    ``seconds 0.002`` ("" for the default budget)."""
    if not isinstance(limits, dict):
        return ""
    return ", ".join(f"{k} {v}" for k, v in limits.items())


def budget_words(limits: Any) -> str:
    """:func:`budget_limits_text` as a settings line ends with it:
    ``; replay budget not the default: seconds 0.002`` ("" for the default budget)."""
    text = budget_limits_text(limits)
    return f"; replay budget not the default: {text}" if text else ""


def settings_line(settings: dict[str, Any]) -> str:
    """The settings in words: ``scored with boundary B, detector D, safe rule: ...``, and a
    replay budget other than the default (:func:`budget_words`)."""
    boundary, detector, rule = (Report.format_cell(c) for c in settings_cells(settings))
    return (f"scored with boundary {boundary}, detector {detector}, safe rule: {rule}"
            + budget_words(settings.get("budget")))


@dataclass
class Report:
    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    caption: str = ""
    name: str = "report"  # file stem
    # what the figures were made with (table_settings), stated in every file; None: figures
    # that no boundary, detector or safe rule changes (BFCL's verdict alone)
    settings: dict[str, Any] | None = None
    # what the title names that no row does (compare's {"run A": ..., "run B": ...}): a CSV
    # has no title, so every row ends with these, before the settings; JSON: ``context``
    context: dict[str, Cell] = field(default_factory=dict)

    def add(self, *cells: Cell) -> None:
        self.rows.append(list(cells))

    @staticmethod
    def format_cell(cell: Cell) -> str:
        if cell is None:
            return "–"
        if isinstance(cell, Fixed):
            return f"{cell:.1f}"  # (with its own precision: see Fixed.__format__)
        if isinstance(cell, float):
            return f"{shown(cell):.1f}"  # (one rounding rule: core.figures)
        return str(cell)

    def rich(self) -> Table:
        table = Table(title=Text(visible(self.title)),
                      caption=Text(visible(self.caption)) if self.caption else None,
                      box=box.SIMPLE_HEAD,
                      padding=(0, 1), collapse_padding=True, title_justify="left",
                      caption_justify="left")
        for i, col in enumerate(self.columns):
            numeric = any(isinstance(r[i], (int, float)) for r in self.rows if i < len(r))
            if numeric:
                width = max(len(self.format_cell(r[i])) for r in self.rows if i < len(r))
                table.add_column(col, justify="right", no_wrap=False, min_width=width)
            else:
                longest = max((len(self.format_cell(r[i])) for r in self.rows if i < len(r)), default=4)
                table.add_column(col, overflow="fold", min_width=min(longest, 22))
        for row in self.rows:  # cells are data: shown literally, never as markup
            table.add_row(*(Text(visible(self.format_cell(c))) for c in row))
        return table

    def markdown(self) -> str:
        """GitHub-flavoured Markdown; text cells (names from files among them) shown as
        themselves (:func:`~careful_engine.core.safe_text.markdown_literal`), the title and
        caption with their markup escaped."""
        lines = [f"**{markdown_text(self.title.strip())}**", "",
                 "| " + " | ".join(markdown_text(c) for c in self.columns) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(markdown_literal(self.format_cell(c)) for c in row) + " |"
                  for row in self.rows]
        if self.caption:
            lines += ["", markdown_text(self.caption)]
        if self.settings is not None:
            lines += ["", markdown_text(settings_line(self.settings))]
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """The table as CSV; text cells with control characters escaped, as every table
        shows them, and never read as a formula by a spreadsheet (a folder named ``=cmd|..``
        is written ``'=cmd|..``): :func:`~careful_engine.core.safe_text.csv_cell`. The JSON
        keeps the exact text. Every row ends with the :attr:`context` and, with
        :attr:`settings`, with them (:data:`SETTINGS_COLUMNS`)."""
        names, settings = ([], []) if self.settings is None else settings_columns(self.settings)
        extra = [*self.context.values(), *settings]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([csv_cell(c) for c in [*self.columns, *self.context, *names]])
        writer.writerows([["" if c is None else csv_cell(c) if isinstance(c, str) else
                           self.format_cell(c) if type(c) is float else c
                           for c in [*row, *extra]] for row in self.rows])
        return buf.getvalue()

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"title": self.title, "caption": self.caption}
        if self.context:
            out["context"] = self.context
        if self.settings is not None:
            out["scored_with"] = self.settings
        out["rows"] = [dict(zip(self.columns, [round(c, SNAP) if type(c) is float else c
                                               for c in row], strict=False))
                       for row in self.rows]
        return out

    def files(self) -> list[str]:
        """The names :meth:`write` writes: ``<name>.md``, ``.csv`` and ``.json``."""
        return [f"{self.name}.{ext}" for ext in ("md", "csv", "json")]

    def write(self, out_dir: Path) -> list[Path]:
        """``<name>.md``, ``.csv`` and ``.json`` in ``out_dir``, each replaced whole and never
        through a link (:mod:`careful_engine.core.safe_write`)."""
        paths = []
        texts = (self.markdown(), self.csv(), json.dumps(self.json(), indent=2) + "\n")
        for name, text in zip(self.files(), texts, strict=True):
            with writer(out_dir, name, errors="backslashreplace") as f:
                f.write(text)
            paths.append(out_dir / name)
        return paths


def pct(x: float | None) -> float | None:
    """A share (0-1) as a table cell: :func:`percent`'s value, which the JSON stores and the
    terminal, Markdown and CSV show rounded (:meth:`Report.format_cell`)."""
    return percent(x)


def pct_change(x: float | None, base: float | None) -> float | None:
    """The change from ``base`` to ``x`` in percentage points, as the shown figures differ:
    ``pct(x) - pct(base)`` (26.25 and 27.875 show as 26.3 and 27.9: +1.6, not +1.7)."""
    if x is None or base is None:
        return None
    return shown(shown(pct(x)) - shown(pct(base)))


short = bfcl.short_name  # a category's short name in a table


class Fixed(float):
    """A float that a :class:`Report` shows with its own precision (p values, rho) while
    JSON keeps the full value and CSV a precise one."""

    def __new__(cls, value: float, digits: int = 3) -> Fixed:
        obj = super().__new__(cls, value)
        obj.digits = digits
        return obj

    def __format__(self, spec: str) -> str:
        if self.digits == 3 and 0 < self < 0.001:
            return "<0.001"
        return figure_text(self, self.digits)  # (one rounding rule: core.figures)

    def __str__(self) -> str:
        """The CSV's: four significant digits of a statistic (p, rho), a figure as shown."""
        return f"{float(self):.4g}" if self.digits >= 2 else format(self, "")


def fixed(value: float | None, digits: int = 3) -> Fixed | None:
    return None if value is None else Fixed(value, digits)
