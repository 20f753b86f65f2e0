"""The CAREFUL workbench: a Textual app over careful_engine (no logic of its own).

Five screens, one per job, as Textual modes (1-5): Home, Label (blind), Agreement, Replay
(with the stepper pushed on top) and Leaderboard; ``?`` shows help for the current screen and
Ctrl+P the command palette.
"""

from __future__ import annotations

import gc
import threading
import time
from multiprocessing import resource_tracker
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.binding import Binding
from textual.reactive import var

from careful_engine.browse.runs import cache_scores_path
from careful_engine.core.safe_text import visible

from . import workers
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

PROGRESS_INTERVAL = 0.1  # seconds between two progress messages
SHUTDOWN_WAIT = 10.0  # seconds quitting waits for the scoring workers to be killed


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
        # what scoring could not score, by run (file:line [id]: reason)
        self.scoring_problems: dict[str, list[str]] = {}
        # runs whose last scoring failed or was cancelled, with why their scores were not
        # used then: not rescored again unasked until that changes (s always rescores)
        self.scoring_failed: dict[str, str | None] = {}
        self._stop_scoring = threading.Event()
        self._scoring_over = threading.Event()
        self._scoring_over.set()
        self._frozen_data: int | None = None  # objects frozen as data (see settle_memory)
        # multiprocessing's resource tracker, which scoring's worker processes need, is
        # started with this process's stderr: once the app runs, that is Textual's capture,
        # which has no file descriptor, and starting it then fails
        resource_tracker.ensure_running()

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

    # a full collection reclaims what died frozen once the frozen objects have grown by a quarter
    # beyond those settled as data (see settle_memory)
    RECLAIM_GROWTH = 1.25

    def settle_memory(self, collect: bool = True) -> None:
        """Move what is loaded so far out of the cyclic collector's way (``gc.freeze``): a
        full collection over bfcl's data, a run's result files and replayed states would
        pause a keypress for a tenth of a second or more. Refcounting still frees what is
        dropped. ``collect=False``: without the full collection first (it walks everything
        once: for a run's files just read, which hold no garbage to speak of); what it
        freezes counts as data.

        Objects alive when frozen that later die in a cycle (a closed screen's widgets) are
        never collected while frozen: each opened conversation left one screen's widgets
        behind for good. So a ``collect`` that finds the frozen objects grown by
        :attr:`RECLAIM_GROWTH` beyond the data unfreezes first: one full collection per
        that much growth, which keeps what can leak a fraction of what is held."""
        before = gc.get_freeze_count()
        base = self._frozen_data
        reclaim = collect and base is not None and before > base * self.RECLAIM_GROWTH
        if reclaim:
            gc.unfreeze()
        if collect:
            gc.collect()
        gc.freeze()
        after = gc.get_freeze_count()
        if base is None or reclaim:
            self._frozen_data = after
        elif not collect:  # the files just read: data, not growth towards a reclaim
            self._frozen_data = base + max(0, after - before)

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
        stop = self._stop_scoring = threading.Event()
        self._scoring_over.clear()
        self.run_worker(lambda: self._score(refs, stop), thread=True, exclusive=True,
                        group="score")

    def _score(self, refs: list[RunRef], stop: threading.Event) -> None:
        """The worker (a thread): the engine scores each run as ``careful score`` does, with
        the replays in worker processes started by a forkserver (:mod:`.workers`; never in
        this process: the stepper replays here, over bfcl's shared module objects, and the
        interpreter lock would stall the screen). ``stop`` cancels: the engine kills its
        workers."""
        try:
            for ref in refs:
                if stop.is_set():
                    break
                self._score_one(ref, stop)
        finally:
            self._scoring_over.set()
            self.post_message(ScoringFinished())

    def _score_one(self, ref: RunRef, stop: threading.Event) -> None:
        from careful_engine.core.parallel import Cancelled
        from careful_engine.scoring.score import score_to_file

        settings = self.context.settings
        sent = [0.0]

        def progress(done: int, total: int) -> None:  # every conversation: a few per second
            now = time.monotonic()
            if done in (0, total) or now - sent[0] >= PROGRESS_INTERVAL:
                sent[0] = now
                self.post_message(ScoringProgress(ref.label, done, total))

        self.post_message(ScoringProgress(ref.label, 0, 0))
        try:
            scored = score_to_file(
                ref.run, ref.model, cache_scores_path(ref, settings.cache_dir),
                decoder=ref.decoder, boundary=settings.boundary,
                declarations=settings.declarations, detector=settings.detector,
                jobs=settings.scoring_jobs(), mp_context=workers.context(), in_process=False,
                cancel=stop, on_progress=progress)
        except Cancelled:
            self.post_message(ScoringFailed(ref.label, "cancelled"))
        except (ValueError, OSError) as e:  # nothing usable, or the file cannot be written
            self.post_message(ScoringFailed(ref.label, str(e)))
        except Exception as e:  # noqa: BLE001  (one run's failure, said in one line)
            self.post_message(ScoringFailed(ref.label, f"internal error: {type(e).__name__}: "
                                            f"{e}"))
        else:
            total = sum(len(cs.results) for _, cs in scored.files)
            self.post_message(ScoringDone(ref.label, total,
                                          [str(p) for p in scored.problems]))

    @property
    def scoring_over(self) -> bool:
        """No scoring thread is running (none started, or it has ended)."""
        return self._scoring_over.is_set()

    def cancel_scoring(self, wait: float = 0.0) -> bool:
        """Stop background scoring (the run being scored keeps its old scores): the engine
        kills its worker processes. ``wait``: seconds to wait for that; whether it is over."""
        self._stop_scoring.set()
        for worker in self.workers:
            if worker.group == "score":
                worker.cancel()
        return self._scoring_over.wait(wait) if wait else self.scoring_over

    def on_scoring_progress(self, message: ScoringProgress) -> None:
        self.scoring = message.label
        self.score_state = ScoreState(message.label, message.done, message.total, "running")

    def on_scoring_done(self, message: ScoringDone) -> None:
        self.context.browser(self.context.ref(message.label)).reload()
        self.scoring_problems[message.label] = message.problems
        self.scoring_failed.pop(message.label, None)
        if message.problems:  # a file that could not be scored: the rest is
            self.notify(f"scored {message.label}: {message.total} conversations; "
                        f"{len(message.problems)} problem(s), first: {message.problems[0]}",
                        severity="warning", timeout=10)
        else:
            self.notify(f"scored {message.label}: {message.total} conversations")
        self.score_state = ScoreState(message.label, message.total, message.total, "done")

    def on_scoring_failed(self, message: ScoringFailed) -> None:
        self.notify(f"scoring {message.label}: {message.reason}", severity="error", timeout=8)
        self.scoring_failed[message.label] = self.context.browser(
            self.context.ref(message.label)).mismatch
        self.score_state = ScoreState(message.label, 0, 0, "error")

    def on_scoring_finished(self, message: ScoringFinished) -> None:
        self.scoring = None
        self.score_state = ScoreState()

    def exit(self, result: None = None, return_code: int = 0,
             message: Any = None) -> None:
        """Quit (every way: q, Ctrl+Q, an error): background scoring is stopped now, not once
        the screens are unmounted, so the run being scored keeps its old scores."""
        self.cancel_scoring()
        super().exit(result, return_code, message)

    def on_unmount(self) -> None:
        self.cancel_scoring(wait=SHUTDOWN_WAIT)  # no worker process outlives the app
        self.context.close()
        gc.unfreeze()  # what settle_memory froze may be collected again once the app is gone


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
