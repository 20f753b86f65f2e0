"""The CAREFUL workbench: a Textual app over careful_engine (no logic of its own).

Five screens, one per job, as Textual modes (1-5): Home, Label (blind), Agreement, Replay
(with the stepper pushed on top) and Leaderboard; ``?`` shows help for the current screen and
Ctrl+P the command palette.
"""

from __future__ import annotations

import gc
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.worker import get_current_worker

from careful_engine.core.safe_text import visible

from .commands import WorkbenchCommands
from .context import Settings, Workbench
from .screens import (
    AgreementScreen,
    ConversationScreen,
    HelpScreen,
    HomeScreen,
    LabelScreen,
    LeaderboardScreen,
    ReplayScreen,
)

ScoreListener = Callable[[str, int, int, str], None]


class WorkbenchApp(App[None]):
    """Blind labelling, agreement and adjudication, the trace stepper, leaderboards."""

    TITLE = "CAREFUL workbench"
    CSS_PATH = "workbench.tcss"
    MODES = {
        "home": HomeScreen,
        "label": LabelScreen,
        "agreement": AgreementScreen,
        "replay": ReplayScreen,
        "leaderboard": LeaderboardScreen,
    }
    DEFAULT_MODE = "home"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    BINDINGS = [
        Binding("1", "switch_mode('home')", "Home", show=False),
        Binding("2", "switch_mode('label')", "Label", show=False),
        Binding("3", "switch_mode('agreement')", "Agreement", show=False),
        Binding("4", "switch_mode('replay')", "Replay", show=False),
        Binding("5", "switch_mode('leaderboard')", "Leaderboard", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit", show=False),
    ]

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.wb = Workbench(settings)
        self.replay_run: str | None = None
        self.score_listeners: list[ScoreListener] = []
        self.scoring: str | None = None
        self._proc: subprocess.Popen | None = None

    def notify(self, message: str, *, markup: bool = False, **kwargs: Any) -> None:
        """Messages quote names and errors from files and people: shown literally."""
        super().notify(visible(message), markup=False, **kwargs)

    # ---------------------------------------------------------------- navigation

    def action_help(self) -> None:
        """Help for the current screen: what it shows and every active key."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def open_run(self, label: str) -> None:
        """Show a run in Replay."""
        self.replay_run = label
        self.switch_mode("replay")  # the Replay screen picks the run up when it shows

    def open_conversation(self, entry_id: str) -> None:
        """Replay one conversation of the run shown in Replay."""
        self.switch_mode("replay")

        def go() -> None:
            replay = self._replay_screen()
            if isinstance(self.screen, ConversationScreen):
                self.pop_screen()
            if replay is None:
                return
            if self.replay_run and (replay.ref is None or replay.ref.label != self.replay_run):
                replay._use(self.replay_run)
            replay.open(entry_id)

        self.call_after_refresh(go)

    @staticmethod
    def settle_memory() -> None:
        """Move what is loaded so far out of the cyclic collector's way (``gc.freeze``): a
        full collection over bfcl's data and replayed states would pause a keypress for a
        tenth of a second or more. Refcounting still frees what is dropped."""
        gc.collect()
        gc.freeze()

    def _replay_screen(self) -> ReplayScreen | None:
        for screen in self.screen_stack:
            if isinstance(screen, ReplayScreen):
                return screen
        return None

    # ---------------------------------------------------------------- background scoring

    def start_scoring(self, refs: list) -> None:
        """Score runs one after the other, each in a separate process, with progress."""
        if self.scoring is not None:
            self.notify(f"already scoring {self.scoring}", severity="warning")
            return
        self.scoring = refs[0].label if refs else None
        self.run_worker(lambda: self._score(refs), thread=True, exclusive=True, group="score")

    def _tell(self, label: str, done: int, total: int, state: str) -> None:
        for listener in list(self.score_listeners):
            listener(label, done, total, state)

    def _score(self, refs: list) -> None:
        from careful_engine.browse import score_env

        worker = get_current_worker()
        settings = self.wb.settings
        for ref in refs:
            self.scoring = ref.label
            browser = self.wb.browser(ref)
            cmd, _ = browser.score_command(boundary=settings.boundary,
                                           declarations=settings.declarations)
            self._proc = proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=score_env())
            done = total = 0
            self.call_from_thread(self._tell, ref.label, 0, 0, "running")
            for line in proc.stdout:
                if worker.is_cancelled:
                    proc.kill()
                    break
                if line.startswith("total "):
                    total = int(line.split()[1])
                elif line.startswith("+"):
                    done += 1
                    if done % 20 == 0 or done == total:
                        self.call_from_thread(self._tell, ref.label, done, total, "running")
            rc = proc.wait()
            if rc != 0:
                message = (proc.stderr.read() or f"exit code {rc}").strip().splitlines()[-1]
                self.call_from_thread(self.notify, f"scoring {ref.label}: {message}",
                                      severity="error", timeout=8)
                self.call_from_thread(self._tell, ref.label, done, total, "error")
                continue
            browser.reload()
            self.call_from_thread(self._tell, ref.label, done, total, "done")
            self.call_from_thread(self.notify, f"scored {ref.label}: {total} conversations")
        self._proc = None
        self.scoring = None
        self.call_from_thread(self._tell, "", 0, 0, "all-done")

    def on_unmount(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self.wb.close()


def run(settings: Settings) -> bool:
    """Run the workbench in the terminal; False when the app stopped on an error (Textual has
    printed its traceback)."""
    app = WorkbenchApp(settings)
    app.run()
    return not app.return_code


def demo_settings(root: Path) -> Settings:
    """Settings over ``root/runs`` and ``root/careful.db`` (tests, benchmarks)."""
    return Settings(runs=sorted(p for p in (root / "runs").iterdir() if p.is_dir()),
                    db=root / "careful.db", boundary_dir=root / "boundary",
                    cache_dir=root / "cache", user="tester")
