"""One function's review-sheet entry: doc, inferred facts, example diffs, simulator source."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from careful_engine.browse import FunctionReview, ReviewExample
from careful_engine.core.safe_text import visible

from .diff import diff_text

BOLD = ("kind", "idempotence", "signals", "proposal")


def _example(ex: ReviewExample) -> list[RenderableType]:
    return [Text(visible(ex.heading), style="bold"), diff_text(list(ex.changes))]


class ReviewCard(VerticalScroll):
    """What an annotator reads about one function (the blind review sheet's entry)."""

    DEFAULT_CSS = """
    ReviewCard { height: 1fr; padding: 0 1; }
    ReviewCard > Static { margin-bottom: 1; }
    ReviewCard > #review-source { margin-bottom: 0; }
    """

    def compose(self):  # noqa: D102
        yield Static(id="review-head")
        yield Static(id="review-facts")
        yield Static(id="review-examples")
        yield Static(id="review-source")

    def show(self, review: FunctionReview, *, source: bool) -> None:
        head = Text(visible(f"{review.cls}.{review.name}"), style="bold")
        head.append("\n" + visible(review.description, keep_newlines=True))
        self.query_one("#review-head", Static).update(head)
        facts = Table.grid(padding=(0, 1))
        facts.add_column(style="bold cyan", no_wrap=True)
        facts.add_column(overflow="fold")
        for key, value in review.facts:
            facts.add_row(Text(visible(key)), Text(visible(value),
                                                   style="bold" if key in BOLD else ""))
        self.query_one("#review-facts", Static).update(facts)
        write = dict(review.facts).get("kind", "").startswith("write")
        parts: list[RenderableType] = [
            Text("example diffs" if write else "example calls", style="bold cyan")]
        shown = list(review.examples) + ([review.repeat] if review.repeat else [])
        for ex in shown:
            if ex is review.repeat:
                parts.append(Text("repeating the call (after the first → after the second):",
                                  style="italic"))
            parts += _example(ex)
        if not shown:
            parts.append(Text("(none observed)", style="dim italic"))
        if review.parameters:
            params = Text("\nparameters", style="bold cyan")
            for p in review.parameters:
                params.append(f"\n  {visible(p)}", style="dim")
            parts.append(params)
        self.query_one("#review-examples", Static).update(Group(*parts))
        src = self.query_one("#review-source", Static)
        src.display = source
        if source:
            src.update(Syntax(review.source, "python", line_numbers=False, word_wrap=True,
                              theme="ansi_dark"))
        self.scroll_home(animate=False)
