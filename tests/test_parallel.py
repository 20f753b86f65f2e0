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
    assert len(pools) == 2 and pools[1] > 8  # --jobs 2: one pool for the files of both runs


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
