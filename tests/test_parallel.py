"""``--jobs``: worker processes give the serial result, in the serial order, and a failure stays
with its own file (careful_engine.core.parallel, careful_engine.scoring.batch)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import parallel
from careful_engine.scoring import batch
from careful_engine.scoring.score import score_run

XLAM = "xlam-2-8b-fc-r"


def _square(task: int, shared: int, tick) -> int:
    for _ in range(task):
        tick()
    return task * task + shared


def _fails_on_three(task: int, shared: None, tick) -> int:
    if task == 3:
        raise ValueError("bad item\nsecond line never shown")
    return task


def _dies_on_two(task: int, shared: None, tick) -> int:
    if task == 2:
        os._exit(9)  # a worker killed (out of memory, signal)
    return task


def test_results_in_task_order_and_every_tick_arrives() -> None:
    ticks: list[int] = []
    done: list[int] = []
    tasks = [5, 1, 4, 0, 3, 2]
    got = parallel.run_ordered(_square, tasks, jobs=2, shared=10,
                               on_tick=lambda: ticks.append(1),
                               on_done=lambda i, r: done.append(i))
    assert got == [t * t + 10 for t in tasks]
    assert len(ticks) == sum(tasks)
    assert sorted(done) == list(range(len(tasks)))
    assert parallel.run_ordered(_square, tasks, jobs=1, shared=10) == got
    # costliest first changes what runs first, never the order of the results
    assert parallel.run_ordered(_square, tasks, jobs=2, shared=10, cost=tasks) == got


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_exception_is_one_failed_item(jobs: int) -> None:
    got = parallel.run_ordered(_fails_on_three, list(range(6)), jobs=jobs)
    assert [g for g in got if not isinstance(g, parallel.Failed)] == [0, 1, 2, 4, 5]
    assert isinstance(got[3], parallel.Failed)
    assert got[3].reason == "internal error: ValueError: bad item"


def test_a_dying_worker_fails_only_its_own_task() -> None:
    got = parallel.run_ordered(_dies_on_two, list(range(5)), jobs=2)
    assert got[:2] == [0, 1] and got[3:] == [3, 4]
    assert isinstance(got[2], parallel.Failed) and "died" in got[2].reason


def test_meanwhile_runs_once_in_the_parent_while_workers_work() -> None:
    seen: list[int] = []

    def meanwhile() -> None:
        seen.append(os.getpid())
        raise RuntimeError("ignored: the caller meets it again where it needs the work")

    tasks = [3, 1, 2]
    assert parallel.run_ordered(_square, tasks, jobs=2, shared=0, meanwhile=meanwhile) == \
        [9, 1, 4]
    assert seen == [os.getpid()]
    assert parallel.run_ordered(_square, tasks, jobs=1, shared=0, meanwhile=meanwhile) == \
        [9, 1, 4]
    assert seen == [os.getpid()]  # serial: the caller does that work where it needs it


def test_jobs_values() -> None:
    assert parallel.check_jobs(0) == parallel.default_jobs() >= 1
    assert parallel.check_jobs(3) == 3
    with pytest.raises(ValueError):
        parallel.check_jobs(-1)


def test_a_file_that_fails_in_a_worker_is_reported_and_the_rest_scored(
        shared_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = batch.score_file

    def flaky(loaded, *a, **kw):
        if loaded.file.category == "multi_turn_miss_func":
            raise RuntimeError("simulated crash")
        return real(loaded, *a, **kw)

    monkeypatch.setattr(batch, "score_file", flaky)  # inherited by the forked workers
    run = score_run(shared_runs / XLAM, jobs=2)
    (ms,) = run.scores
    assert sorted(ms.categories) == ["multi_turn_base", "multi_turn_miss_param"]
    (p,) = [p for p in run.problems if "not scored" in p.message]
    assert p.file.endswith("BFCL_v3_multi_turn_miss_func_result.json")
    assert p.message == "not scored: internal error: RuntimeError: simulated crash"


def test_score_with_two_jobs_writes_what_one_job_writes(shared_runs: Path,
                                                         tmp_path: Path) -> None:
    _load()
    runner = CliRunner()
    outs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        res = runner.invoke(app, ["score", str(shared_runs / XLAM), "-o", str(out), "-q",
                                  "--jobs", jobs])
        assert res.exit_code in (0, 1), res.output
        outs[jobs] = {p.relative_to(out).as_posix(): p.read_bytes()
                      for p in sorted(out.rglob("*")) if p.is_file()}
    assert outs["1"] == outs["2"]
    assert "conversations.jsonl" in outs["1"] and len(outs["1"]) > 5
    bad = runner.invoke(app, ["score", str(shared_runs / XLAM), "-o", str(tmp_path / "x"),
                              "--jobs", "-2"])
    assert bad.exit_code == 2


def test_leaderboard_with_two_jobs_equals_serial(shared_runs: Path, tmp_path: Path) -> None:
    from careful_engine.analysis import leaderboard as lb
    from careful_engine.scoring.decoders import parse_decoders
    from careful_engine.scoring.score import load_effects

    runs = [shared_runs / XLAM, shared_runs / "gpt-oss-120b-vllm-v0.10.2"]
    choice = parse_decoders(["openai_gpt-oss-120b=gpt-4o-2024-11-20-FC"])
    effects = load_effects()
    got = {}
    for jobs in (1, 2):
        scored = lb.score_runs(runs, decoders=choice, effects=effects, jobs=jobs)
        got[jobs] = [(e.label, [r.to_json() for cs in e.score.categories.values()
                                for r in cs.results]) for e in scored.entries]
    assert got[1] == got[2] and len(got[1]) == 2


def _results(run) -> list:
    return [(cs.category, [r.to_json() for r in cs.results], [str(p) for p in cs.problems])
            for _, cs in run.files] + [str(p) for p in run.problems]


def test_files_are_split_by_conversation_and_merged_in_order(shared_runs: Path) -> None:
    """Two workers on three files: each file's conversations that share bfcl's process state
    stay in one part, in order; the others are scored in parts of their own; the merged result
    is the serial one."""
    from careful_engine.core import bfcl, refcache

    plan = batch.plan_run(shared_runs / XLAM)
    named = [(0, m, rf) for m, files in plan.files.items() for rf in files]
    files = batch._load([plan], named)
    tasks = batch._split(files, 2)
    assert len(tasks) > 2 * len(files)
    for i, f in enumerate(files):
        convs = bfcl.conversations(f.loaded.file.category)
        parts = [only for k, only in tasks if k == i]
        assert parts[0] == {c.id for c in convs if refcache.depends_on_process(c)}
        assert sorted(x for p in parts for x in p) == sorted(c.id for c in convs)
        assert all(not refcache.depends_on_process(bfcl.conversation(x))
                   for p in parts[1:] for x in p)
    assert _results(score_run(shared_runs / XLAM, jobs=2)) == \
        _results(score_run(shared_runs / XLAM, jobs=1))


def test_an_independent_entry_that_cannot_be_scored_rescores_its_file_whole(
        shared_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The serial run restarts bfcl's process state after an entry it could not score, which
    the later conversations sharing that state see: the split file is scored again in one
    piece, so the result is the serial one."""
    from careful_engine.core import bfcl, refcache
    from careful_engine.scoring import score as score_mod

    convs = bfcl.conversations("multi_turn_base")
    shared = [k for k, c in enumerate(convs) if refcache.depends_on_process(c)]
    bad = next(c.id for c in convs[:shared[-1]] if not refcache.depends_on_process(c))
    real = score_mod._score_entry

    def fails_on_one(rf, conv, *a, **kw):
        if conv.id == bad:
            raise ValueError("cannot score this one")
        return real(rf, conv, *a, **kw)

    monkeypatch.setattr(score_mod, "_score_entry", fails_on_one)  # inherited by the workers
    whole: list[int] = []
    real_run = parallel.run_ordered

    def spy(fn, tasks, **kw):
        if kw.get("jobs") == 1 and len(tasks) == 1 and isinstance(tasks[0], tuple):
            whole.append(tasks[0][0])
        return real_run(fn, tasks, **kw)

    monkeypatch.setattr(batch.parallel, "run_ordered", spy)
    two = score_run(shared_runs / XLAM, jobs=2)
    assert len(whole) == 1  # the base file only
    one = score_run(shared_runs / XLAM, jobs=1)
    assert _results(two) == _results(one)
    assert any(p.id == bad and "could not be scored" in p.message for p in two.problems)


def test_compare_scores_both_runs_in_one_pool(shared_runs: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`careful compare --jobs 2` puts both runs' files into one pool of workers and writes
    what `--jobs 1` writes."""
    _load()
    pools: list[int] = []
    real = parallel.run_ordered

    def spy(fn, tasks, **kw):
        pools.append(len(tasks))
        return real(fn, tasks, **kw)

    monkeypatch.setattr(batch.parallel, "run_ordered", spy)
    runs = [shared_runs / "gpt-oss-120b-vllm-v0.10.2", shared_runs / "gpt-oss-120b-vllm-v0.11.0"]
    outs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        res = CliRunner().invoke(app, ["compare", *map(str, runs), "-o", str(out), "-q",
                                       "--decoder", "openai_gpt-oss-120b=gpt-4o-2024-11-20-FC",
                                       "--jobs", jobs])
        assert res.exit_code in (0, 1), res.output
        outs[jobs] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert outs["1"] == outs["2"] and outs["1"]
    # --jobs 2: one pool for all six files of both runs (as whole files or in parts)
    assert len(pools) == 2 and pools[1] >= pools[0] == 6


def _child_memory() -> tuple[int, int]:
    from careful_engine.core import budget

    ballast = bytearray(64 * 2**20)  # touched: resident in this child only
    ballast[::4096] = b"x" * len(ballast[::4096])
    with open("/proc/self/statm") as f:
        own = int(f.read().split()[1]) * budget._PAGE
    return budget._rss_bytes() or 0, own


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="Linux /proc only")
def test_a_worker_measures_its_own_memory() -> None:
    """The memory budget's reader, opened in the parent, is not inherited by a forked worker
    (it would read the parent's /proc/<pid>/statm: a worker's replay could grow unseen)."""
    import multiprocessing as mp

    from careful_engine.core import budget

    assert budget._rss_bytes()  # the parent's reader is open
    with mp.get_context("fork").Pool(1) as pool:
        seen, own = pool.apply(_child_memory)
    assert abs(seen - own) < 8 * 2**20, (seen, own)


# ---------------------------------------------------------------- start methods, cancel, progress
def _sleeps(task: float, shared: None, tick) -> float:
    import time

    time.sleep(task)
    tick()
    return task


def test_cancel_kills_the_workers_promptly() -> None:
    """A cancel Event set while the workers are busy: Cancelled is raised within a fraction
    of the tasks' time, and no worker process is left."""
    import multiprocessing as mp
    import threading
    import time

    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    t = time.monotonic()
    with pytest.raises(parallel.Cancelled):
        parallel.run_ordered(_sleeps, [30.0] * 4, jobs=2, cancel=stop)
    assert time.monotonic() - t < 10
    deadline = time.monotonic() + 5
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not mp.active_children()


def _large(task: int, shared: None, tick) -> bytes:
    import time

    time.sleep(0.01)
    return b"x" * 200_000  # more than a pipe's buffer: sent in several writes


def test_a_cancel_leaves_no_pool_thread_waiting_for_ever() -> None:
    """Workers killed halfway through sending a result larger than the pipe's buffer left
    half a message, on which the pool's manager thread waited for ever, and the process
    with it at exit (15 of 20 such cancels hung). Every cancel now ends the pool's threads."""
    import threading
    import time
    from concurrent.futures.process import _ExecutorManagerThread

    for k in range(10):
        stop = threading.Event()
        threading.Timer(0.05 + 0.02 * k, stop.set).start()
        with pytest.raises(parallel.Cancelled):
            parallel.run_ordered(_large, list(range(60)), jobs=2, cancel=stop)
        deadline = time.monotonic() + 10
        for t in [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread)]:
            t.join(max(0.0, deadline - time.monotonic()))
            assert not t.is_alive(), f"cancel {k}: the pool's manager thread still waits"


def test_cancel_in_a_serial_run_stops_between_conversations() -> None:
    seen: list[int] = []
    with pytest.raises(parallel.Cancelled):
        parallel.run_ordered(_square, [3, 3, 3], jobs=1, shared=0,
                             on_tick=lambda: seen.append(1), cancel=lambda: len(seen) >= 4)
    assert len(seen) == 4  # stopped inside the second task, not at its end


def test_the_start_method_is_safe_off_the_main_thread() -> None:
    import threading

    assert parallel.context("spawn").get_start_method() == "spawn"
    if "fork" in parallel.mp.get_all_start_methods():
        assert parallel.context().get_start_method() == "fork"
    got: list[str] = []
    th = threading.Thread(target=lambda: got.append(parallel.context().get_start_method()))
    th.start()
    th.join()
    assert got and got[0] in ("forkserver", "spawn")


def test_score_in_fresh_workers_equals_serial(shared_runs: Path) -> None:
    """Workers that are not forked (forkserver: the workbench scores from a thread) load
    the files and build the decoders themselves: the serial result, with progress."""
    progress: list[tuple[int, int]] = []
    two = score_run(shared_runs / XLAM, jobs=2, mp_context="forkserver",
                    on_progress=lambda d, t: progress.append((d, t)))
    assert _results(two) == _results(score_run(shared_runs / XLAM, jobs=1))
    assert progress[0] == (0, 600) and progress[-1] == (600, 600)
    assert [d for d, _ in progress] == list(range(601))


def _two_runs(shared_runs: Path, tmp_path: Path) -> list[Path]:
    """Two copies of the xLAM run (six files), one file of the second with a bad line, a
    duplicate id and a truncated last line; the first also has a model folder no decoder is
    registered for (unusable as a whole)."""
    src = shared_runs / XLAM / "result" / "Salesforce_Llama-xLAM-2-8b-fc-r"
    runs = []
    for name in ("a", "b"):
        folder = tmp_path / name / "result" / src.name
        folder.mkdir(parents=True)
        for f in sorted(src.iterdir()):
            (folder / f.name).write_bytes(f.read_bytes())
        runs.append(tmp_path / name)
    nobody = tmp_path / "a" / "result" / "nobody_unregistered-model"
    nobody.mkdir()
    (nobody / "BFCL_v3_multi_turn_base_result.json").write_bytes(
        (src / "BFCL_v3_multi_turn_base_result.json").read_bytes())
    bad = runs[1] / "result" / src.name / "BFCL_v3_multi_turn_base_result.json"
    lines = bad.read_text().splitlines()
    bad.write_text("\n".join([lines[0], "not json", *lines[1:50], lines[3],
                              *lines[50:-1], lines[-1][:40]]) + "\n")
    return runs


def test_leaderboard_workers_load_their_own_files(shared_runs: Path, tmp_path: Path) -> None:
    """Many files per worker and no entries wanted: each worker loads and scores whole files,
    and the entries, results, problems (in order) and unusable folders are the serial ones."""
    from careful_engine.analysis import leaderboard as lb
    from careful_engine.scoring.score import load_effects

    runs = _two_runs(shared_runs, tmp_path)
    effects = load_effects()
    own: list[int] = []
    real = batch._score_own

    def spy(*a, **kw):
        own.append(1)
        return real(*a, **kw)

    def flat(scored) -> list:
        return ([(e.label, e.decoder, [(cs.category, [r.to_json() for r in cs.results],
                                        [str(p) for p in cs.problems])
                                       for cs in e.score.categories.values()])
                 for e in scored.entries], [str(p) for p in scored.problems], scored.unusable)

    serial = lb.score_runs(runs, effects=effects, jobs=1)
    batch._score_own = spy
    try:
        progress: list[tuple[int, int]] = []
        two = lb.score_runs(runs, effects=effects, jobs=2, keep_entries=False,
                            on_progress=lambda d, t: progress.append((d, t)))
        spawned = lb.score_runs(runs, effects=effects, jobs=2, keep_entries=False,
                                mp_context="spawn")
    finally:
        batch._score_own = real
    assert own == [1, 1]
    assert flat(two) == flat(serial) == flat(spawned)
    assert any("not JSON" in p for p in flat(serial)[1])
    assert any("nobody_unregistered-model" in u for u in flat(serial)[2])
    assert progress[-1] == (1400, 1400) and len(progress) == 1401
    # the entries stay with the workers; what loading found comes back
    for _, run in two.runs:
        for lf, _ in run.files:
            assert not lf.entries and lf.lines


def test_a_file_a_worker_cannot_score_is_one_problem(shared_runs: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers loading their own files: one file whose scoring raises is reported as the
    serial run reports it, and every other file is scored."""
    from careful_engine.analysis import leaderboard as lb

    runs = _two_runs(shared_runs, tmp_path)
    real = batch.score_file

    def flaky(loaded, *a, **kw):
        if loaded.file.category == "multi_turn_miss_func" and "/b/" in str(loaded.file.path):
            raise RuntimeError("simulated crash")
        return real(loaded, *a, **kw)

    monkeypatch.setattr(batch, "score_file", flaky)  # inherited by the forked workers
    got = {jobs: lb.score_runs(runs, jobs=jobs, keep_entries=False) for jobs in (1, 2)}
    assert [str(p) for p in got[1].problems] == [str(p) for p in got[2].problems]
    assert sum("not scored: internal error: RuntimeError: simulated crash" in str(p)
               for p in got[2].problems) == 1
    assert [sorted(e.score.categories) for e in got[2].entries] == \
        [["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"],
         ["multi_turn_base", "multi_turn_miss_param"]]


def _collector_on(task: int, shared: None, tick) -> bool:
    import gc

    return gc.isenabled()


def test_the_collector_is_paused_only_in_the_parent_while_the_pool_runs() -> None:
    """The parent pauses its collector while results arrive; workers collect as usual, and
    the parent's collector is back (and nothing left frozen) once the pool is done."""
    import gc

    seen: list[bool] = []
    assert gc.isenabled()
    got = parallel.run_ordered(_collector_on, [0, 1, 2], jobs=2,
                               meanwhile=lambda: seen.append(gc.isenabled()))
    assert got == [True, True, True] and seen == [False]
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_results_without_detail_rank_as_the_detailed_ones(shared_runs: Path,
                                                          tmp_path: Path) -> None:
    """``detail=False`` (the leaderboard): serial or in workers loading their own files, every
    result is the detailed one without_detail(), and the leaderboard's tables are the same."""
    from careful_engine.analysis import leaderboard as lb
    from careful_engine.present.leaderboard import leaderboard_reports, leaderboard_terminal
    from careful_engine.scoring.score import load_effects

    runs = _two_runs(shared_runs, tmp_path)
    effects = load_effects()

    def flat(scored, brief=lambda r: r) -> list:
        return [(e.label, [(cs.category, [brief(r).to_json() for r in cs.results])
                           for cs in e.score.categories.values()]) for e in scored.entries]

    def tables(scored) -> list:
        return ([(r.name, r.rows, r.caption) for r in leaderboard_reports(scored.entries)],
                [(t.title, [c._cells for c in t.columns])
                 for t in leaderboard_terminal(scored.entries)])

    full = lb.score_runs(runs, effects=effects, jobs=1)
    brief = [lb.score_runs(runs, effects=effects, jobs=j, keep_entries=False, detail=False)
             for j in (1, 2)]
    assert any(r.rules and r.rules.hits for e in full.entries for cs in e.score.categories.values()
               for r in cs.results)
    for got in brief:
        assert flat(got) == flat(full, lambda r: r.without_detail())
        assert tables(got) == tables(full)
        assert not any((r.rules and r.rules.hits) or r.blame or r.verdict.error_message
                       for e in got.entries for cs in e.score.categories.values()
                       for r in cs.results)
