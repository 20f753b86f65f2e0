"""Background scoring in the workbench (issue 13): a thread worker of the app calls the engine,
which replays in worker processes (a forkserver's), and posts typed messages. Scoring a run
from the app writes what `careful score` writes, byte for byte; a file that cannot be scored
is a problem line and the rest is scored; quitting while scoring stops the worker processes
at once and leaves none behind."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_engine import browse
from workbench.app import WorkbenchApp
from workbench.context import Settings
from workbench.messages import ScoringDone, ScoringFailed, ScoringFinished, ScoringProgress


class Recording(WorkbenchApp):
    """Records the scoring messages (Textual calls every class's handler: these only add)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.seen: list = []

    def on_scoring_progress(self, message: ScoringProgress) -> None:
        self.seen.append(message)

    def on_scoring_done(self, message: ScoringDone) -> None:
        self.seen.append(message)

    def on_scoring_failed(self, message: ScoringFailed) -> None:
        self.seen.append(message)

    def on_scoring_finished(self, message: ScoringFinished) -> None:
        self.seen.append(message)


def app_for(run: Path, root: Path) -> Recording:
    return Recording(Settings(runs=[run], db=root / "careful.db", cache_dir=root / "cache",
                              boundary_dir=root / "boundary", user="tester", config=None,
                              jobs=1))


async def until(pilot, predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


def score_in_app(app: Recording) -> Path:
    """Score the app's only run from the app (as `s` on Replay does); its score file."""

    async def go() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            app.start_scoring(app.context.refs)
            await until(pilot, lambda: any(isinstance(m, ScoringFinished) for m in app.seen),
                        300)
            await pilot.pause()

    asyncio.run(go())
    return browse.cache_scores_path(app.context.refs[0], app.context.settings.cache_dir)


def careful_score(run: Path, out: Path) -> bytes:
    from careful_cli import _load
    from careful_cli import app as cli

    _load()
    result = CliRunner().invoke(cli, ["score", str(run), "-o", str(out), "-q"])
    assert result.exit_code in (0, 1), result.output
    return (out / browse.SCORES_NAME).read_bytes()


def test_the_workbench_scores_as_careful_score_does(tmp_path, runs_template) -> None:
    """The same conversations.jsonl as `careful score`, byte for byte; progress messages
    counting up to the total, then done and finished."""
    run = tmp_path / "beta"
    shutil.copytree(runs_template / "beta", run)
    shutil.rmtree(run / browse.SCORE_DIR)
    app = app_for(run, tmp_path)
    out = score_in_app(app)
    assert out.read_bytes() == careful_score(run, tmp_path / "cli")
    progress = [m for m in app.seen if isinstance(m, ScoringProgress)]
    assert progress[-1].done == progress[-1].total == 200
    assert [m.done for m in progress] == sorted(m.done for m in progress)
    (done,) = [m for m in app.seen if isinstance(m, ScoringDone)]
    assert done.total == 200
    assert isinstance(app.seen[-1], ScoringFinished)
    assert not any(isinstance(m, ScoringFailed) for m in app.seen)


def test_a_real_run_scored_in_the_workbench_is_careful_scores(tmp_path, shared_runs) -> None:
    """Every line of a real run (600 conversations, three categories), byte for byte."""
    run = tmp_path / "xlam"
    shutil.copytree(shared_runs / "xlam-2-8b-fc-r" / "result", run / "result")
    app = app_for(run, tmp_path)
    out = score_in_app(app)
    assert len(out.read_text().splitlines()) == 600
    assert out.read_bytes() == careful_score(run, tmp_path / "cli")


def test_a_file_that_cannot_be_scored_is_a_problem_and_the_rest_is_scored(
        tmp_path, runs_template) -> None:
    """A FIFO in place of one result file and a broken line in another: one problem line
    each (``file:line [id]: reason``), told with the done message; the rest is scored."""
    run = tmp_path / "alpha"
    shutil.copytree(runs_template / "alpha", run)
    shutil.rmtree(run / browse.SCORE_DIR)
    folder = run / "reference" / "multi_turn"
    os.mkfifo(folder / "BFCL_v4_multi_turn_miss_func_result.json")
    base = folder / "BFCL_v4_multi_turn_base_result.json"
    lines = base.read_text().splitlines(keepends=True)
    lines[1] = '{"id": "multi_turn_base_1", "result": [[ broken\n'
    base.write_text("".join(lines))
    app = app_for(run, tmp_path)
    out = score_in_app(app)
    (done,) = [m for m in app.seen if isinstance(m, ScoringDone)]
    assert any(p.endswith("BFCL_v4_multi_turn_miss_func_result.json: a FIFO, not a regular "
                          "file; skipped") for p in done.problems)
    assert any(":2 [multi_turn_base_1]: line is not JSON" in p for p in done.problems)
    assert app.scoring_problems[app.context.refs[0].label] == done.problems
    scored = out.read_text().splitlines()
    assert len(scored) == done.total == 200  # the base file; the FIFO's category is not
    assert out.read_bytes() == careful_score(run, tmp_path / "cli")


def _children() -> dict[int, int]:
    """Every process's parent (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":  # a zombie has exited
                parents[int(entry)] = int(fields[1])
    return parents


def _workers() -> set[int]:
    """This process's descendants that do work: all but multiprocessing's forkserver and
    resource tracker (children of this process that live as long as it and hold no task;
    the workers are the forkserver's children, forked with its command line)."""
    parents = _children()
    mine, grew = {os.getpid()}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in mine} - mine
        grew = bool(more)
        mine |= more
    servers = set()
    for pid in (p for p in mine if parents.get(p) == os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"forkserver" in cmd or b"resource_tracker" in cmd:
            servers.add(pid)
    return mine - servers - {os.getpid()}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_quitting_while_scoring_stops_the_workers_at_once(tmp_path, shared_runs) -> None:
    """Quitting the app while it scores four copies of a real run (under a second each with
    a warm reference cache): the app and its threads are gone within seconds (without
    cancelling, quitting waited for all four), no worker process is left a second later, and
    no score file is written (the stop is asked for when quitting starts: asked for only
    once the screens were unmounted, the run in progress finished and wrote its file)."""
    runs = []
    for i in range(4):
        runs.append(tmp_path / f"xlam{i}")
        shutil.copytree(shared_runs / "xlam-2-8b-fc-r" / "result", runs[-1] / "result")
    app = Recording(Settings(runs=runs, db=tmp_path / "careful.db", cache_dir=tmp_path / "c",
                             boundary_dir=tmp_path / "b", user="tester", config=None, jobs=1))
    before = _workers()
    seen_workers: set[int] = set()
    took: list[float] = []

    async def go() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            app.start_scoring(app.context.refs)
            await until(pilot, lambda: any(isinstance(m, ScoringProgress) and m.done
                                           for m in app.seen), 300)
            seen_workers.update(_workers() - before)
            took.append(time.monotonic())
            await pilot.press("q")

    asyncio.run(go())  # returns once the app's threads are over
    took[0] = time.monotonic() - took[0]
    assert seen_workers, "no worker process was seen while scoring"
    assert took[0] < 3, f"quitting took {took[0]:.1f} s"
    assert app.scoring_over  # the app waited for its scoring thread to end
    time.sleep(1)
    assert _workers() - before == set()
    assert not any(isinstance(m, ScoringDone) for m in app.seen)
    assert not any(browse.cache_scores_path(ref, tmp_path / "c").exists()
                   for ref in app.context.refs)


def _exit_unless_quiet() -> None:
    import sys

    quiet = all(os.path.realpath(f"/proc/self/fd/{fd}") == os.devnull for fd in (1, 2))
    print("LEAK")  # goes nowhere
    sys.exit(0 if quiet and sys.stdout.name == os.devnull else 3)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc")
def test_scoring_workers_write_nothing_to_the_terminal() -> None:
    """The app draws on this process's terminal: a worker's standard output and error (bfcl
    prints now and then) go to the null device instead."""
    from workbench import workers

    ctx = workers.context()
    assert ctx.get_start_method() == "forkserver"
    worker = ctx.Process(target=_exit_unless_quiet)
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0


def test_a_run_cancelled_after_its_last_conversation_keeps_its_old_scores(workdir) -> None:
    """A cancel that arrives once every conversation is scored, before the file is written
    (quitting while the last conversations finish), still leaves the old scores: nothing is
    written (before, the file was replaced after the app had asked the run to stop)."""
    from careful_engine.core.parallel import Cancelled
    from careful_engine.scoring.score import score_to_file

    out = workdir / "scores" / "conversations.jsonl"
    stop = [False]

    def progress(done: int, total: int) -> None:
        if total and done == total:
            stop[0] = True  # the last conversation is scored: the cancel comes now

    with pytest.raises(Cancelled):
        score_to_file(workdir / "runs" / "alpha", "reference", out, decoder=None, jobs=1,
                      cancel=lambda: stop[0], on_progress=progress)
    assert stop[0] and not out.exists()
    score_to_file(workdir / "runs" / "alpha", "reference", out, decoder=None, jobs=1,
                  on_progress=progress)
    assert out.exists()  # not cancelled: written
