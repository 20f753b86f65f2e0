"""The command palette (Ctrl+P): go to a screen, open a conversation by id, score, help."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.fuzzy import Matcher

from careful_engine.core.safe_text import visible

from .widgets.shared import textual_literal

SCREENS = (
    ("home", "Home", "runs, declarations, labelling rounds"),
    ("label", "Label", "blind labelling of the destructive boundary"),
    ("agreement", "Agreement", "kappas, splits, adjudication, the boundary"),
    ("replay", "Replay", "conversations of a run, call by call"),
    ("leaderboard", "Leaderboard", "both rankings, rule totals, paired comparison"),
)


class WorkbenchCommands(Provider):
    """Commands built from the app's state when the palette opens."""

    def _commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        app = self.app
        out: list[tuple[str, str, Callable[[], object]]] = [
            (f"go: {title}", help_, partial(app.switch_mode, mode))
            for mode, title, help_ in SCREENS
        ]
        out.append(("help: keys of this screen", "what the screen shows and its bindings",
                    app.action_help))
        for ref in app.context.refs:
            out.append((f"replay: {ref.label}", f"open run {ref.label} in Replay",
                        partial(app.open_run, ref.label)))
            out.append((f"score: {ref.label}", "score the run in the background",
                        partial(app.start_scoring, [ref])))
        return out

    def _conversations(self) -> list[tuple[str, str, Callable[[], object]]]:
        app = self.app
        if not app.replay_run:
            return []
        browser = app.context.browser(app.context.ref(app.replay_run))
        return [(f"open: {row.id}", f"replay {row.id} of {app.replay_run}",
                 partial(app.open_conversation, row.id)) for row in browser.rows()]

    async def discover(self) -> Hits:
        for title, help_, callback in self._commands():
            title = visible(title)
            yield DiscoveryHit(Content(title), callback, text=title, help=_help(help_))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_, callback in self._commands() + self._conversations():
            title = visible(title)
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, _highlight(matcher, title), callback, text=title,
                          help=_help(help_))


def _help(text: str) -> str:
    """A hit's help as the palette reads it (markup): a run's label in it shown literally."""
    return textual_literal(text)


def _highlight(matcher: Matcher, title: str) -> Content:
    """``matcher.highlight(title)`` without reading the title as markup (a run folder named
    ``[a="]x`` stopped the app; ``[reverse]x`` took effect)."""
    content = Content(title)
    score, offsets = matcher.fuzzy_search.match(matcher.query, title)
    if score:
        for offset in offsets:
            if not title[offset].isspace():
                content = content.stylize(matcher.match_style, offset, offset + 1)
    return content
