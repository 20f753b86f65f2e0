"""The top line: the five screens with their keys (1-5), the current one highlighted."""

from __future__ import annotations

from textual.widgets import Static

MODES = (("home", "Home"), ("label", "Label"), ("agreement", "Agreement"),
         ("replay", "Replay"), ("leaderboard", "Leaderboard"))


class NavBar(Static):
    """Which screen this is, and the keys (or clicks) that reach the others."""

    DEFAULT_CSS = """
    NavBar { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    """

    def __init__(self, current: str, detail: str = "") -> None:
        super().__init__(self._markup(current, detail))

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
            parts.append(f" [dim]{detail}[/]")
        return "".join(parts)
