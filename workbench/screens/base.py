"""The base of the workbench's screens: ``self.app`` typed as the :class:`WorkbenchApp`."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, cast

from textual.screen import Screen

if TYPE_CHECKING:
    from ..app import WorkbenchApp

ResultType = TypeVar("ResultType")


class WorkbenchScreen(Screen[ResultType]):
    """A screen of the workbench: ``self.app.context`` is the shared :class:`Workbench`."""

    @property
    def app(self) -> WorkbenchApp:  # type: ignore[override]
        return cast("WorkbenchApp", super().app)
