"""Formatters every screen shares (text from files shown literally, paths, counts, yes/no):
screens import them from here, never from another screen."""

from __future__ import annotations

import os
from pathlib import Path

from rich.text import Text

from careful_engine.core.safe_text import visible


def plain(text: object, style: str = "") -> Text:
    """Text from a file, a model or a person as the screens show it: never markup, control
    characters as visible escapes."""
    return Text(visible(text), style=style)


def textual_literal(text: object) -> str:
    """Text from a file as Textual markup that shows it literally: control characters as
    escapes, every ``[`` escaped (Textual reads ``[B]``, ``[$var]``, ``[ b]`` as tags, which
    ``textual.markup.escape`` leaves alone: a run folder named ``[B="]x`` stopped the app)."""
    return visible(text).replace("[", "\\[")


def shown_path(path: Path | str) -> str:
    """A path as the screens show it: relative to the working folder, else to the
    repository, else absolute."""
    p = Path(os.path.abspath(path))
    for base in (Path(os.path.abspath(Path.cwd())), Path(__file__).resolve().parents[2]):
        if p.is_relative_to(base):
            return str(p.relative_to(base))
    return str(p)


NAME_CHARS = 48  # of a name (a run folder's) in a table cell; cut in the middle past it


def middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut in the middle (``abc…xyz``), so that
    names sharing a long prefix stay apart."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    tail = (width - 1) // 2
    return text[:width - 1 - tail] + "…" + (text[-tail:] if tail else "")


def round_progress(status) -> str:
    """Counts only (never a label): labelled / total per annotator, ✓ once submitted."""
    parts = [f"{p.annotator} {'✓' if p.submitted else f'{p.labelled}/{p.total}'}"
             for p in status.progress]
    return " · ".join(parts) or "no annotator yet"


def yes_no(value: bool | None) -> Text:
    """A label or decision: yes (red), no (green), ``–`` for none."""
    if value is None:
        return Text("–", style="dim")
    return Text("yes", style="bold red") if value else Text("no", style="bold green")
