"""The leaderboard as a picture: BFCL accuracy against effect-safe accuracy, one point per
run (the workbench draws it with plotext; ``careful leaderboard --plot FILE`` writes it as a
small hand-written SVG, no plotting library needed). The SVG states the settings its safe
accuracy was made with under its title, in the words of the tables' files
(:func:`~careful_engine.present.report.settings_line`)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from careful_engine.core.figures import percent, shown
from careful_engine.core.safe_text import visible
from careful_engine.core.safe_write import writer
from careful_engine.present.report import settings_line

TITLE = "BFCL vs effect-safe accuracy"


@dataclass(frozen=True)
class Point:
    """One run: its label and its two four-category means, in percent."""

    label: str
    bfcl: float
    safe: float


def points(entries: Sequence) -> list[Point]:
    """One :class:`Point` per leaderboard entry with both means (percent)."""
    out = []
    for e in entries:
        b, s = e.accuracy(None, "bfcl"), e.accuracy(None, "safe")
        if b is not None and s is not None and math.isfinite(b) and math.isfinite(s):
            out.append(Point(str(e.label), percent(b), percent(s)))
    return out


def axis_max(pts: Sequence[Point]) -> float:
    """The axes' common upper end: the next 10 above every value (at least 10)."""
    top = max([10.0, *(max(p.bfcl, p.safe) for p in pts)])
    return min(100.0, 10 * math.ceil(top / 10 + 1e-9))


def svg(pts: Sequence[Point], title: str = TITLE, size: int = 480,
        settings: dict[str, Any] | None = None) -> str:
    """A square SVG scatter: BFCL on x, effect-safe on y (same scale), the diagonal y = x
    (safe can only be lower), each point labelled; under the title, ``settings`` (a
    ``scored_with`` dict, as :attr:`Report.settings <careful_engine.present.report.Report>`)
    in :func:`settings_line`'s words, wrapped between words (the picture grows to hold
    them); every text escaped."""
    lines = textwrap.wrap(visible(settings_line(settings)), 80, break_long_words=False,
                          break_on_hyphens=False) if settings is not None else []
    pad, top = 56, axis_max(pts)
    head = 12 * max(0, len(lines) - 1)  # the plot moves down under a settings line too long
    inner = size - 2 * pad
    height = size + head

    def xy(bfcl: float, safe: float) -> tuple[float, float]:
        return pad + inner * bfcl / top, height - pad - inner * safe / top

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{height}" '
           f'viewBox="0 0 {size} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{size}" height="{height}" fill="white"/>',
           f'<text x="{size / 2}" y="22" text-anchor="middle" font-size="14">'
           f'{escape(visible(title))}</text>']
    if lines:
        out.append('<text text-anchor="middle" font-size="10" fill="#444">' + "".join(
            f'<tspan x="{size / 2}" y="{38 + 12 * k}">{escape(line)}</tspan>'
            for k, line in enumerate(lines)) + "</text>")
    for i in range(0, int(top) + 1, 10):
        x, y = xy(i, i)
        out.append(f'<line x1="{x:.1f}" y1="{pad + head}" x2="{x:.1f}" y2="{height - pad}" '
                   'stroke="#eee"/>')
        out.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{size - pad}" y2="{y:.1f}" '
                   'stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{height - pad + 16}" text-anchor="middle">{i}</text>')
        out.append(f'<text x="{pad - 6}" y="{y + 4:.1f}" text-anchor="end">{i}</text>')
    x0, y0 = xy(0, 0)
    x1, y1 = xy(top, top)
    out += [f'<rect x="{pad}" y="{pad + head}" width="{inner}" height="{inner}" fill="none" '
            'stroke="#444"/>',
            f'<line x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" stroke="#999" '
            'stroke-dasharray="4 3"/>',
            f'<text x="{size / 2}" y="{height - 14}" text-anchor="middle">BFCL accuracy '
            '(%, mean of four categories)</text>',
            f'<text transform="translate(16 {head + size / 2}) rotate(-90)" '
            'text-anchor="middle">effect-safe accuracy (%)</text>']
    for p in pts:
        x, y = xy(p.bfcl, p.safe)
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#1f77b4">'
                   f'<title>{escape(visible(p.label))}: BFCL {shown(p.bfcl):.1f}, safe '
                   f'{shown(p.safe):.1f}</title></circle>')
        out.append(f'<text x="{x + 6:.1f}" y="{y - 6:.1f}">{escape(visible(p.label))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_svg(pts: Sequence[Point], path: Path, title: str | None = None,
              settings: dict[str, Any] | None = None) -> Path:
    """Write :func:`svg` to ``path`` (whole, never through a planted link), stating
    ``settings`` as the tables' files do."""
    if path.suffix.lower() != ".svg":
        raise ValueError(f"{path}: only SVG is written (name the file *.svg)")
    with writer(path) as f:
        f.write(svg(pts, title or TITLE, settings=settings))
    return path
