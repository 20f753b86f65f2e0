"""Durability: a killed labelling process keeps every committed label; concurrent
labelling processes on one database lose nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from careful_engine.annotation.signals import fallback_inputs
from careful_engine.annotation.store import Store
from tests.annotation_db import raw

REPO = Path(__file__).resolve().parent.parent
CLI = "from careful_cli import main; main()"

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CAREFUL_DB", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "careful.db"
    with Store(path) as store:
        for a in ("A1", "A2", "A3"):
            store.add_annotator(a)
        store.new_round("r", fallback_inputs(), ["A1", "A2", "A3"])
    return path


@contextmanager
def sigkilled(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Drive ``proc`` in the block, then kill it without warning (SIGKILL) and reap it; it is
    killed too when the block fails."""
    try:
        yield proc
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()


def _count(db: Path, annotator: str) -> int:
    with Store(db) as store:
        return len(store.annotator_session("r", annotator).labels())


def _read_until(proc: subprocess.Popen, marker: str) -> str:
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"process ended before {marker!r}: rc={proc.poll()}")
        if marker in line:
            return line


def test_sigkill_of_the_label_command_keeps_exactly_n_labels(db):
    n = 7
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "label", "--db", str(db), "-r", "r", "-a", "A1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, cwd=REPO, env=_env(),
    )
    with sigkilled(proc):
        _read_until(proc, "to go")
        for i in range(1, n + 1):
            answer = f"y reason {i}" if i % 2 else "n"
            proc.stdin.write(answer + "\n")
            proc.stdin.flush()
            assert f"({i}/128)" in _read_until(proc, "saved ")
        # the process now waits for answer n+1; kill it without warning
    assert proc.returncode == -signal.SIGKILL
    assert _count(db, "A1") == n
    with Store(db) as store:
        assert store.integrity_check() == "ok"
        labels = store.adjudication_session("r", "t", override="test").labels()["A1"]
    assert sum(lb.destructive for lb in labels.values()) == 4
    assert labels["cat"].reason == "reason 1"


LOOP = textwrap.dedent("""
    import os, sys, time
    from careful_engine.annotation.store import Store
    db, annotator, go = sys.argv[1], sys.argv[2], sys.argv[3:]
    with Store(db) as store:
        session = store.annotator_session("r", annotator)
        print("ready", flush=True)
        while go and not os.path.exists(go[0]):
            time.sleep(0.005)
        for i, f in enumerate(session.functions(), 1):
            session.label(f.name, i % 3 == 0, f"{annotator} {i}" if i % 3 == 0 else "")
            print(i, flush=True)
        session.submit()
        print("submitted", flush=True)
""")


def test_sigkill_mid_stream_loses_nothing_committed(db):
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(db), "A2"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=_env(),
    )
    acked = 0
    with sigkilled(proc):  # then killed while it labels as fast as it can
        assert proc.stdout.readline().strip() == "ready"
        while acked < 40:
            line = proc.stdout.readline()
            assert line, "labelling loop ended early"
            acked = int(line)
    # every acknowledged label is there; at most the one in flight (and any whose
    # acknowledgement was still in the pipe) beyond it, all complete rows
    count = _count(db, "A2")
    assert count >= acked
    with Store(db) as store:
        assert store.integrity_check() == "ok"
        rows = list(raw(store.path).query("select * from labels where annotator = 'A2'"))
    assert len(rows) == count
    assert all(r["reason"] or not r["destructive"] for r in rows)


def test_two_processes_labelling_concurrently_lose_nothing(db, tmp_path):
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", LOOP, str(db), a, str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                         env=_env())
        for a in ("A1", "A2")
    ]
    for p in procs:  # both connected: start them at once
        assert p.stdout.readline().strip() == "ready"
    go.touch()
    for p in procs:
        out, errors = p.communicate(timeout=120)
        assert p.returncode == 0, errors
        assert out.strip().endswith("submitted")
    with Store(db) as store:
        status = {p.annotator: p for p in store.status("r").progress}
        assert status["A1"].labelled == status["A2"].labelled == 128
        assert status["A1"].submitted and status["A2"].submitted
        assert raw(store.path)["labels"].count == 256
        assert raw(store.path)["label_revisions"].count == 0
        spans = {
            a: list(raw(store.path).query(
                "select min(created) as first, max(created) as last from labels "
                "where annotator = ?", [a]))[0]
            for a in ("A1", "A2")
        }
    # the two label streams overlapped in time
    assert max(s["first"] for s in spans.values()) < min(s["last"] for s in spans.values())


def _label_set_files(tmp_path: Path, n: int) -> list[Path]:
    """``n`` label sets over every function, by annotators I1..In (one exported, cloned)."""
    import json

    from careful_engine.annotation.release import write_label_sets

    src = tmp_path / "source.db"
    with Store(src) as store:
        store.add_annotator("I1")
        store.new_round("imp", fallback_inputs(), ["I1"], created_by="lead")
        session = store.annotator_session("imp", "I1")
        for i, f in enumerate(session.functions()):
            session.label(f.name, i % 4 == 0, f"reason {i}" if i % 4 == 0 else "")
        session.submit()
        (path,) = write_label_sets(store.adjudication_session("imp", "lead"), tmp_path / "sets")
    doc = json.loads(path.read_text(encoding="utf-8"))
    paths = []
    for k in range(1, n + 1):
        doc["annotator"]["name"] = f"I{k}"
        p = tmp_path / "sets" / f"I{k}.json"
        p.write_text(json.dumps(doc), encoding="utf-8")
        paths.append(p)
    return paths


def test_sigkill_of_the_import_command_keeps_whole_label_sets(tmp_path):
    files = _label_set_files(tmp_path, 60)
    db = tmp_path / "imported.db"
    env = {**_env(), "PYTHONUNBUFFERED": "1", "COLUMNS": "250"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "labels", "import", *map(str, files), "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=env,
    )
    acked = 0
    with sigkilled(proc):  # then killed while it imports the next files
        while acked < 8:
            line = proc.stdout.readline()
            assert line, f"import ended early: rc={proc.poll()}"
            acked += "-> round imp: 128 labels" in line
    assert proc.returncode == -signal.SIGKILL
    with Store(db) as store:
        assert store.integrity_check() == "ok"
        progress = store.status("imp").progress
        assert len(store.round_functions("imp")) == 128
    # every acknowledged set is there whole; no set is there in part
    assert len(progress) >= acked
    assert all(p.labelled == 128 and p.submitted for p in progress)
    counts = raw(db).execute(
        "select annotator, count(*) from labels group by annotator").fetchall()
    assert len(counts) == len(progress) and {n for _, n in counts} == {128}
    # rerunning the whole command completes the rest and changes none already there
    done = subprocess.run(
        [sys.executable, "-c", CLI, "labels", "import", *map(str, files), "--db", str(db)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("already present") == len(progress)
    with Store(db) as store:
        assert len(store.status("imp").progress) == 60


ADJUDICATE = textwrap.dedent("""
    import sys
    from careful_engine.annotation.store import Store
    db, out = sys.argv[1], sys.argv[2]
    with Store(db) as store:
        session = store.adjudication_session("r", "lead")
        names = [f.name for f in session.functions()]
        print("ready", flush=True)
        for i in range(100000):
            fn = names[i % len(names)]
            session.decide(fn, i % 2 == 0, f"decision {i}")
            print("decided", i, flush=True)
            if i % 5 == 4:
                result = session.adjudicate("any")
                session.write_boundary(result, "crash", path=out, force=True)
                print("wrote", i, flush=True)
""")


def test_sigkill_while_adjudicating_loses_no_decision_and_no_boundary(db, tmp_path):
    with Store(db) as store:
        for a in ("A1", "A2", "A3"):
            session = store.annotator_session("r", a)
            for i, f in enumerate(session.functions()):
                session.label(f.name, i % 3 == 0, "why" if i % 3 == 0 else "")
            session.submit()
    out = tmp_path / "boundary" / "crash.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", ADJUDICATE, str(db), str(out)], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=_env(),
    )
    decided = wrote = -1
    with sigkilled(proc):  # then killed mid-stream: deciding or writing the boundary
        assert proc.stdout.readline().strip() == "ready"
        while wrote < 30:
            line = proc.stdout.readline()
            assert line, "adjudication loop ended early"
            word, i = line.split()
            if word == "decided":
                decided = int(i)
            else:
                wrote = int(i)
    assert proc.returncode == -signal.SIGKILL
    with Store(db) as store:
        assert store.integrity_check() == "ok"
        decisions = store.adjudication_session("r", "check").decisions()
    assert len(decisions) >= decided + 1
    assert [d.reason for d in decisions] == [f"decision {i}" for i in range(len(decisions))]
    # the boundary file is one whole version, never half of one
    from careful_engine.effects import boundary

    written = boundary.load(out)
    assert written.name == "crash" and written.version >= wrote // 5 + 1
    assert [p.name for p in out.parent.iterdir() if not p.name.startswith(".")] == [
        "crash.json"]
