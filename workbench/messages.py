"""The messages background work posts up to the app (Textual: attributes down, messages up).

Scoring runs in a worker; it posts :class:`ScoringProgress` while it goes, then
:class:`ScoringDone` or :class:`ScoringFailed` per run and :class:`ScoringFinished` at the end.
The app turns them into its ``score_state`` attribute, which the screens watch.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


class ScoringProgress(Message):
    """``done`` of ``total`` conversations of run ``label`` scored (total 0: not known yet)."""

    def __init__(self, label: str, done: int, total: int) -> None:
        super().__init__()
        self.label, self.done, self.total = label, done, total


class ScoringDone(Message):
    """Run ``label`` is scored: its score lines are written (``total`` conversations).
    ``problems``: what could not be scored (``file:line [id]: reason``; a file that failed
    whole is one line), the rest being scored."""

    def __init__(self, label: str, total: int, problems: list[str] | None = None) -> None:
        super().__init__()
        self.label, self.total, self.problems = label, total, list(problems or [])


class ScoringFailed(Message):
    """Run ``label`` could not be scored (``reason`` says why) or was cancelled."""

    def __init__(self, label: str, reason: str) -> None:
        super().__init__()
        self.label, self.reason = label, reason


class ScoringFinished(Message):
    """Every run asked for has been tried."""


@dataclass(frozen=True)
class ScoreState:
    """Where background scoring stands, as the screens watch it: ``state`` is running,
    done, error or finished."""

    label: str = ""
    done: int = 0
    total: int = 0
    state: str = "finished"
