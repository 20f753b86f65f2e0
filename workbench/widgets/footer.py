"""The key bar at the bottom of every screen, rebuilt once per change and only on view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Footer

if TYPE_CHECKING:
    from textual.screen import Screen


class KeyFooter(Footer):
    """Textual's :class:`Footer` rebuilds its keys (a widget per key, each styled) after every
    change of its screen's bindings: each change of focus, each push or pop of a screen,
    queueing one rebuild per change even when several come at once, and on a screen out of
    view too. Here one rebuild is queued at a time (it shows the bindings of when it runs)
    and a screen out of view is skipped: coming back into view refreshes its bindings."""

    _queued = False

    def bindings_changed(self, screen: Screen) -> None:
        if not screen.is_current or self._queued:
            return
        super().bindings_changed(screen)  # queues a rebuild when these hold:
        self._queued = bool(screen.app.app_focus and self.is_attached and screen is self.screen)

    async def recompose(self) -> None:
        self._queued = False
        if self.is_attached and self.screen.is_current:  # may have left the view since
            await super().recompose()
