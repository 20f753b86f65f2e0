"""The CAREFUL workbench: a Textual app over careful_engine (no logic of its own).

Five screens, one per job, as Textual modes (1-5): Home, Label (blind), Agreement, Replay
(with the stepper pushed on top) and Leaderboard; ``?`` shows help for the current screen and
Ctrl+P the command palette.
"""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.binding import Binding
from textual.reactive import var
from textual.worker import get_current_worker

from careful_engine.core.safe_text import visible

from .commands import WorkbenchCommands
from .context import Settings, Workbench
from .messages import ScoreState, ScoringDone, ScoringFailed, ScoringFinished, ScoringProgress
from .screens import (
    AgreementScreen,
    ConversationScreen,
    HelpScreen,
    HomeScreen,
    LabelScreen,
    LeaderboardScreen,
    ReplayScreen,
)

if TYPE_CHECKING:
    from careful_engine.browse import RunRef


class WorkbenchApp(App[None]):
    """Blind labelling, agreement and adjudication, the trace stepper, leaderboards."""

    TITLE = "CAREFUL workbench"
    CSS_PATH = Path(__file__).with_name("workbench.tcss")  # also for subclasses elsewhere
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

    # where background scoring stands; the screens watch it (every change, even to equal)
    score_state: var[ScoreState] = var(ScoreState(), always_update=True)

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.context = Workbench(settings)
        self.replay_run: str | None = None
        self.scoring: str | None = None  # the run being scored
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
                replay.show_run(self.replay_run)
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

    def start_scoring(self, refs: list[RunRef]) -> None:
        """Score runs one after the other in a worker, which posts its progress as messages."""
        if self.scoring is not None:
            self.notify(f"already scoring {self.scoring}", severity="warning")
            return
        if not refs:
            return
        self.scoring = refs[0].label
        self.run_worker(lambda: self._score(refs), thread=True, exclusive=True, group="score")

    def _score(self, refs: list[RunRef]) -> None:
        """The worker: each run in a separate process (bfcl's executor keeps state in
        module globals; the stepper replays in this one), which reports
        :class:`~careful_engine.browse.ScoreEvent` JSON lines; cancelling kills it."""
        from careful_engine.browse import read_events, score_env

        worker = get_current_worker()
        settings = self.context.settings
        for ref in refs:
            if worker.is_cancelled:
                break
            cmd, _ = self.context.browser(ref).score_command(
                boundary=settings.boundary, declarations=settings.declarations)
            self.post_message(ScoringProgress(ref.label, 0, 0))
            self._proc = proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=score_env())
            done = total = 0
            failed = ""
            assert proc.stdout is not None and proc.stderr is not None
            for event in read_events(proc.stdout):
                if worker.is_cancelled:
                    proc.kill()
                    break
                if event.kind == "start":
                    total = event.total
                elif event.kind == "entry":
                    done += 1
                    if done % 20 == 0 or done == total:
                        self.post_message(ScoringProgress(ref.label, done, total))
                elif event.kind == "error":
                    failed = event.message
            rc = proc.wait()
            errors = proc.stderr.read()
            if worker.is_cancelled:
                self.post_message(ScoringFailed(ref.label, "cancelled"))
            elif rc != 0 or failed:
                lines = (errors or "").strip().splitlines()
                self.post_message(ScoringFailed(
                    ref.label, failed or (lines[-1] if lines else f"exit code {rc}")))
            else:
                self.post_message(ScoringDone(ref.label, total))
        self._proc = None
        self.post_message(ScoringFinished())

    def cancel_scoring(self) -> None:
        """Stop background scoring (the run being scored keeps its old scores)."""
        for worker in self.workers:
            if worker.group == "score":
                worker.cancel()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    def on_scoring_progress(self, message: ScoringProgress) -> None:
        self.scoring = message.label
        self.score_state = ScoreState(message.label, message.done, message.total, "running")

    def on_scoring_done(self, message: ScoringDone) -> None:
        self.context.browser(self.context.ref(message.label)).reload()
        self.notify(f"scored {message.label}: {message.total} conversations")
        self.score_state = ScoreState(message.label, message.total, message.total, "done")

    def on_scoring_failed(self, message: ScoringFailed) -> None:
        self.notify(f"scoring {message.label}: {message.reason}", severity="error", timeout=8)
        self.score_state = ScoreState(message.label, 0, 0, "error")

    def on_scoring_finished(self, message: ScoringFinished) -> None:
        self.scoring = None
        self.score_state = ScoreState()

    def on_unmount(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self.context.close()


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
                    cache_dir=root / "cache", user="tester", config=root / "workbench.json")
