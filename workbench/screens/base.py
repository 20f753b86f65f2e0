"""The base of the workbench's screens: ``self.app`` typed as the :class:`WorkbenchApp`, and
the main list focused whenever the screen comes (back) into view."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeVar, cast

from textual.screen import ModalScreen, Screen
from textual.widget import Widget

if TYPE_CHECKING:
    from ..app import WorkbenchApp

ResultType = TypeVar("ResultType")


class WorkbenchScreen(Screen[ResultType]):
    """A screen of the workbench: ``self.app.context`` is the shared :class:`Workbench`.

    ``MAIN`` names the screen's main widgets (CSS selectors, the first shown one wins): it has
    the focus after every switch to the screen (1-5, Escape from a screen above it), so that
    keys reach it at once; coming back from a dialog keeps the focus where it was.
    """

    MAIN: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._under_dialog = False

    @property
    def app(self) -> WorkbenchApp:  # type: ignore[override]
        return cast("WorkbenchApp", super().app)

    def main_widget(self) -> Widget | None:
        """The first of ``MAIN`` that is on screen (displayed, and its parents too)."""
        for selector in self.MAIN:
            for widget in self.query(selector):
                if widget.focusable and all(n.display for n in widget.ancestors_with_self
                                            if isinstance(n, Widget)):
                    return widget
        return None

    def focus_main(self) -> None:
        """Give the main widget the focus (when the screen has one on view)."""
        if not self.is_current:
            return  # left the view meanwhile: coming back focuses it
        widget = self.main_widget()
        if widget is not None and widget is not self.focused:
            self.set_focus(widget)

    def on_screen_suspend(self) -> None:
        self._under_dialog = isinstance(self.app.screen, ModalScreen)

    def on_screen_resume(self) -> None:
        if not self._under_dialog or self.focused is None:
            self.call_after_refresh(self.focus_main)
        self._under_dialog = False
