"""The top line: the five screens with their keys (1-5), the current one highlighted."""

from __future__ import annotations

from textual.widgets import Static

MODES = (("home", "Home"), ("label", "Label"), ("agreement", "Agreement"),
         ("replay", "Replay"), ("leaderboard", "Leaderboard"))


# Runs whose manifest says ``synthetic: true`` (careful demo's flawed run) carry this badge.
SYNTHETIC = "[reverse b $warning] SYNTHETIC [/] [dim]not a model's results[/]"


class NavBar(Static):
    """Which screen this is, and the keys (or clicks) that reach the others."""

    DEFAULT_CSS = """
    NavBar { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    """

    def __init__(self, current: str, detail: str = "") -> None:
        super().__init__(self._markup(current, detail))
        self._current = current

    def show_detail(self, detail: str) -> None:
        """Replace what follows the screens (markup: a badge such as :data:`SYNTHETIC`)."""
        self.update(self._markup(self._current, detail))

    @staticmethod
    def _markup(current: str, detail: str) -> str:
        parts = ["[b $accent]CAREFUL[/] "]
        for i, (mode, title) in enumerate(MODES, 1):
            label = f" {i} {title} "
            if mode == current:
                parts.append(f"[reverse b]{label}[/]")
            else:
                parts.append(f"[@click=app.switch_mode('{mode}')]{label}[/]")
        if detail:
            parts.append(f" {detail}")
        return "".join(parts)
