"""Safe writes (issue 12, item 4): outputs never follow a planted link, ``--out`` that cannot
be used is refused before any work, ``careful demo`` does not write into a non-empty folder
without ``--force``, and a writer killed with SIGKILL never leaves half a file in place of a
good one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_cli.common import EXIT_PROBLEMS, EXIT_UNUSABLE
from careful_engine.core import safe_write
from careful_engine.core.safe_write import UnsafeWrite, check_out_dir, write_text, writer
from tests import hostile_corpus as hc

_load()
runner = CliRunner()
REFUSED = "symbolic link; refusing to write through it"


def careful(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def run(tmp_path: Path) -> Path:
    r = tmp_path / "run"
    hc.write_model(r, "m")
    return r


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_text("precious\n")
    return v


def no_work(monkeypatch) -> None:
    """Make scoring fail loudly if a command gets as far as doing any work."""
    import careful_cli.leaderboard as cl
    import careful_cli.score as cs
    from careful_engine.analysis import compare, leaderboard, sensitivity
    from careful_engine.scoring import score as scoring

    def boom(*a, **k):
        raise AssertionError("work was done before --out was checked")

    for mod in (cs, cl, scoring, leaderboard, compare, sensitivity):
        for name in ("score_run", "score_runs", "load_run"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, boom)


# ---------------------------------------------------------------- planted links


@pytest.mark.parametrize("planted", ["conversations.jsonl", "accuracy.md", "rules.csv",
                                     "score/m/multi_turn/BFCL_v4_multi_turn_base_score.json"])
def test_planted_file_link_is_refused(run, victim, planted) -> None:
    out = run / "careful-score"  # the default --out: inside the (downloaded) run folder
    link = out / planted
    link.parent.mkdir(parents=True)
    link.symlink_to(victim)
    res = careful("score", run)
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert REFUSED in res.output and planted.split("/")[-1] in res.output
    assert victim.read_text() == "precious\n" and link.is_symlink()


@pytest.mark.parametrize("planted", ["score", "score/m", "score/m/multi_turn"])
def test_planted_folder_link_is_refused(run, tmp_path, planted) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = run / "careful-score" / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    res = careful("score", run)
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert REFUSED in res.output
    assert list(elsewhere.iterdir()) == []


def test_out_folder_that_is_a_link_is_refused_before_work(run, tmp_path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "careful-score").symlink_to(elsewhere, target_is_directory=True)
    no_work(monkeypatch)
    res = careful("score", run)
    assert res.exit_code == EXIT_UNUSABLE and REFUSED in res.output, res.output
    assert list(elsewhere.iterdir()) == []


def test_planted_report_link_is_refused_by_leaderboard(run, tmp_path, victim) -> None:
    out = tmp_path / "lb"
    out.mkdir()
    (out / "leaderboard.md").symlink_to(victim)
    res = careful("leaderboard", run, "--out", out)
    assert res.exit_code == EXIT_UNUSABLE and REFUSED in res.output, res.output
    assert victim.read_text() == "precious\n"


def _stale(out: Path) -> dict[str, str]:
    """Every file under ``out`` (links as where they point) with its text."""
    return {str(p.relative_to(out)): os.readlink(p) if p.is_symlink() else p.read_text()
            for p in sorted(out.rglob("*")) if p.is_symlink() or p.is_file()}


@pytest.mark.parametrize(("command", "planted"), [
    ("score", "rules.json"), ("score", "conversations.jsonl"), ("score", "accuracy.csv"),
    ("leaderboard", "leaderboard_rho.md"), ("leaderboard", "leaderboard_rules.json"),
    ("leaderboard", "problems.txt"), ("compare", "problems.txt"),
    ("sensitivity", "problems.txt")])
def test_a_refused_output_means_nothing_was_written(run, tmp_path, victim, command,
                                                    planted) -> None:
    """A link at one output name was refused only after the outputs before it were written
    (score -o DIR with DIR/rules.json a link wrote the accuracy tables, conversations.jsonl
    and the score files, then exited 2 beside a stale accuracy.json): every target is now
    checked first, so a refusal leaves the folder as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "accuracy.json").write_text("stale\n")  # an earlier run's
    (out / "leaderboard.md").write_text("stale\n")
    (out / planted).unlink(missing_ok=True)
    (out / planted).symlink_to(victim)
    before = _stale(out)
    res = careful(command, run, *([run] if command == "compare" else []), "--out", out)
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert REFUSED in res.output and planted in res.output
    assert _stale(out) == before and victim.read_text() == "precious\n"
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


# the output files written beside the output folder: (command, its option, more arguments)
SIDE_FILES = [("leaderboard", "--plot", "plot.svg", []),
              ("compare", "--output", "ci.json", ["--format", "json"]),
              ("score", "--output", "ci.xml", ["--format", "junit"])]


def _side_file_args(command: str, run: Path, out: Path) -> list[object]:
    return [command, run, *([run] if command == "compare" else []), "--out", out, "-j1"]


@pytest.mark.parametrize(("command", "option", "name", "extra"), SIDE_FILES)
def test_a_planted_side_file_link_is_refused_before_any_work(run, tmp_path, victim, monkeypatch,
                                                             command, option, name,
                                                             extra) -> None:
    """A link at --plot (leaderboard) or at --output (the --format json/junit document of
    compare and score) was refused only once the tables were written; it is refused as --out
    is, before any work: one line, exit 2, nothing written."""
    (tmp_path / name).symlink_to(victim)
    out = tmp_path / "out"
    no_work(monkeypatch)
    res = careful(*_side_file_args(command, run, out), option, tmp_path / name, *extra)
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert res.output.strip().splitlines() == [
        f"error: {option} {tmp_path / name} is a symbolic link; refusing to write through it"]
    assert not out.exists() and victim.read_text() == "precious\n"


@pytest.mark.parametrize(("command", "option", "name", "extra"), SIDE_FILES)
def test_a_side_file_link_planted_while_scoring_is_refused_before_any_write(
        run, tmp_path, victim, monkeypatch, command, option, name, extra) -> None:
    """A link planted at --plot or --output while the runs were scored is refused with the
    output folder's files, before any of them is written."""
    import careful_cli.leaderboard as cl
    import careful_cli.score as cs
    from careful_engine.analysis import compare

    module, function = {"leaderboard": (cl, "score_runs"), "compare": (compare, "score_pair"),
                        "score": (cs, "score_run")}[command]
    original = getattr(module, function)

    def plant_then_score(*a, **k):
        (tmp_path / name).symlink_to(victim)
        return original(*a, **k)

    monkeypatch.setattr(module, function, plant_then_score)
    out = tmp_path / "out"
    res = careful(*_side_file_args(command, run, out), option, tmp_path / name, *extra)
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert (tmp_path / name).is_symlink(), "scoring did not run"
    assert [line for line in res.output.splitlines() if line.startswith("error")] == [
        f"error: {option} {tmp_path / name} is a symbolic link; refusing to write through it"]
    assert not [p for p in out.rglob("*") if p.is_file()] and victim.read_text() == "precious\n"


def test_check_targets_refuses_what_the_writer_would(tmp_path, victim) -> None:
    """Links and non-folders below the root and at a target are refused; names not there
    yet (in folders not there yet) are fine."""
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f").symlink_to(victim)
    (root / "dir").mkdir()
    (root / "b").symlink_to(tmp_path, target_is_directory=True)
    (root / "plain").write_text("x")
    safe_write.check_targets(root, ["new.md", "a/new/deeper.json", "plain", "a/g"])
    for bad, reason in [("a/f", REFUSED), ("b/x.json", REFUSED), ("dir", "not a regular file"),
                        ("plain/x", "not a folder")]:
        with pytest.raises(UnsafeWrite, match=reason):
            safe_write.check_targets(root, ["new.md", bad])
    with pytest.raises(UnsafeWrite, match=REFUSED):
        safe_write.check_targets(root / "b", ["x"])


def test_declare_and_provenance_outputs_never_follow_links(run, tmp_path, victim,
                                                           monkeypatch) -> None:
    link = tmp_path / "effects.json"
    link.symlink_to(victim)
    no_work(monkeypatch)
    from careful_engine.effects import declarations

    monkeypatch.setattr(declarations, "generate", lambda *a, **k: pytest.fail("work done"))
    for args in (["declare", "--no-runs", "--out", link],
                 ["provenance", run, "--out", link],
                 ["export", "mcp", "--out", link],
                 ["review-sheet", "--out", tmp_path / "effects"]):
        if args[0] == "review-sheet":
            (tmp_path / "effects.md").symlink_to(victim)
        res = careful(*args)
        assert res.exit_code == EXIT_UNUSABLE, (args, res.output)
        assert REFUSED in res.output, (args, res.output)
    assert victim.read_text() == "precious\n"


# ---------------------------------------------------------------- --out refused before work


@pytest.mark.parametrize("command", [
    ["score", "{run}"], ["leaderboard", "{run}"], ["compare", "{run}", "{run}"],
    ["sensitivity", "{run}"], ["audit", "decode", "{run}"], ["audit", "scores", "{run}"],
    ["demo", "--no-score"],
])
@pytest.mark.parametrize("bad", ["file", "under-file", "proc"])
def test_unusable_out_is_refused_before_any_work(run, tmp_path, monkeypatch, command,
                                                 bad) -> None:
    target = {"file": tmp_path / "a-file", "under-file": tmp_path / "a-file" / "sub",
              "proc": Path("/proc/careful-cannot-write-here")}[bad]
    (tmp_path / "a-file").write_text("keep me\n")
    no_work(monkeypatch)
    from careful_engine.demo import reference as demo

    monkeypatch.setattr(demo, "write_reference_run", lambda *a, **k: pytest.fail("work done"))
    res = careful(*[c.format(run=run) for c in command], "--out", target)
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert "--out" in res.output and str(target) in res.output.replace("\n", "")
    assert (tmp_path / "a-file").read_text() == "keep me\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the mode")
def test_out_in_a_read_only_folder_is_refused(run, tmp_path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    res = careful("score", run, "--out", ro / "out")
    assert res.exit_code == EXIT_UNUSABLE and "not writable" in res.output


# ---------------------------------------------------------------- demo


def test_demo_refuses_a_non_empty_folder_unless_forced(tmp_path) -> None:
    out = tmp_path / "demo"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    flawed = tmp_path / "flawed"
    res = careful("demo", "--out", out, "--flawed-out", flawed, "--no-score")
    assert res.exit_code == EXIT_UNUSABLE and "is not empty" in res.output, res.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and not flawed.exists()
    res = careful("demo", "--out", out, "--flawed-out", flawed, "--no-score", "--force")
    assert res.exit_code == 0, res.output
    assert (out / "notes.txt").read_text() == "mine\n"
    assert len(list(out.rglob("*_result.json"))) == 4
    empty = tmp_path / "empty"
    empty.mkdir()
    (flawed / "notes.txt").write_text("mine\n")
    res = careful("demo", "--out", empty, "--flawed-out", flawed, "--no-score")
    assert res.exit_code == EXIT_UNUSABLE and "is not empty" in res.output  # the flawed one
    res = careful("demo", "--out", empty, "--flawed-out", tmp_path / "f2", "--no-score")
    assert res.exit_code == 0, res.output


def test_the_demo_runs_again_over_its_own_runs_only(tmp_path) -> None:
    """README's first line run twice: the second `careful demo` writes over the runs and
    scores the first wrote (it stopped with "is not empty", exit 2); a folder holding anything
    else (a file of the user's, another run's manifest, a link for the model folder) is still
    refused without --force."""
    import json

    out, flawed = tmp_path / "runs" / "reference", tmp_path / "runs" / "demo-flawed"
    res = careful("demo", "--out", out)
    assert res.exit_code == 0, res.output
    first = (flawed / "careful-score" / "conversations.jsonl").read_bytes()
    res = careful("demo", "--out", out)
    assert res.exit_code == 0, res.output
    assert (flawed / "careful-score" / "conversations.jsonl").read_bytes() == first
    manifest = flawed / "SYNTHETIC-demo-flawed" / "careful_run.json"
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**doc, "condition": "reference"}))
    res = careful("demo", "--out", out, "--no-score")
    assert res.exit_code == EXIT_UNUSABLE and "is not empty" in res.output, res.output
    manifest.write_text(json.dumps(doc))
    (out / "notes.txt").write_text("mine\n")
    res = careful("demo", "--out", out, "--no-score")
    assert res.exit_code == EXIT_UNUSABLE and "is not empty" in res.output, res.output
    (out / "notes.txt").unlink()
    elsewhere = tmp_path / "elsewhere"
    (out / "reference").rename(elsewhere)
    (out / "reference").symlink_to(elsewhere)
    res = careful("demo", "--out", out, "--no-score")
    assert res.exit_code == EXIT_UNUSABLE and "is not empty" in res.output, res.output


def test_demo_does_not_follow_a_planted_result_link(tmp_path, victim) -> None:
    out = tmp_path / "demo"
    (out / "reference" / "multi_turn").mkdir(parents=True)
    (out / "reference" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json").symlink_to(
        victim)
    res = careful("demo", "--out", out, "--no-score", "--force")
    assert res.exit_code == EXIT_UNUSABLE and REFUSED in res.output, res.output
    assert victim.read_text() == "precious\n"


def test_demo_does_not_follow_a_planted_model_folder_link(tmp_path) -> None:
    out, elsewhere = tmp_path / "demo", tmp_path / "elsewhere"
    (elsewhere / "multi_turn").mkdir(parents=True)
    out.mkdir()
    (out / "reference").symlink_to(elsewhere, target_is_directory=True)
    res = careful("demo", "--out", out, "--flawed-out", tmp_path / "fl", "--no-score",
                  "--force")
    assert res.exit_code == EXIT_UNUSABLE and REFUSED in res.output, res.output
    assert list((elsewhere / "multi_turn").iterdir()) == []


# ---------------------------------------------------------------- the module itself


def test_writer_replaces_only_when_complete(tmp_path) -> None:
    target = tmp_path / "out" / "f.txt"
    write_text(target, "old\n", root=tmp_path / "out")
    with pytest.raises(RuntimeError), writer(tmp_path / "out", "f.txt") as f:
        f.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.txt"]  # no temp left


def test_writer_refuses_links_and_odd_targets(tmp_path, victim) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "link").symlink_to(victim)
    (tmp_path / "d" / "sub").mkdir()
    os.mkfifo(tmp_path / "d" / "fifo")
    for name in ("link", "sub", "fifo"):
        with pytest.raises(UnsafeWrite), writer(tmp_path / "d", name) as f:
            f.write("x")
    with pytest.raises(UnsafeWrite), writer(tmp_path / "d", "../escape") as f:
        f.write("x")
    assert victim.read_text() == "precious\n"
    with pytest.raises(UnsafeWrite):
        check_out_dir(tmp_path / "d" / "link")


def test_a_temp_name_planted_as_a_link_is_not_followed(tmp_path, victim, monkeypatch) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / f".f.txt.{os.getpid()}.aaaa.tmp").symlink_to(victim)
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(safe_write.secrets, "token_hex", lambda n: next(names))
    write_text(d / "f.txt", "new\n")
    assert (d / "f.txt").read_text() == "new\n" and victim.read_text() == "precious\n"
    assert (d / f".f.txt.{os.getpid()}.aaaa.tmp").is_symlink()


def test_write_bytes_keeps_a_cache_private_and_replaces_only_its_own_link(tmp_path,
                                                                          victim) -> None:
    d = tmp_path / "d"
    d.mkdir()
    path = d / "entry.bin"
    safe_write.write_bytes(path, b"\x00one", mode=0o600, fsync=False)
    assert path.read_bytes() == b"\x00one" and path.stat().st_mode & 0o777 == 0o600
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(UnsafeWrite, match="symbolic link"):  # by default: refused
        safe_write.write_bytes(path, b"two")
    assert path.is_symlink()
    safe_write.write_bytes(path, b"two", replace_link=True)  # a cache's own name: replaced
    assert not path.is_symlink() and path.read_bytes() == b"two"
    assert victim.read_text() == "precious\n"
    (d / "sub").mkdir()
    with pytest.raises(UnsafeWrite, match="not a regular file"):  # never a folder
        safe_write.write_bytes(d / "sub", b"x", replace_link=True)
    (tmp_path / "linked").symlink_to(d, target_is_directory=True)
    with pytest.raises(UnsafeWrite, match="symbolic link"):  # nor through a linked folder
        safe_write.write_bytes(tmp_path / "linked" / "x.bin", b"x", replace_link=True,
                               root=tmp_path)
    assert sorted(p.name for p in d.iterdir()) == ["entry.bin", "sub"]  # no temp left


def test_no_other_temp_and_rename_writer() -> None:
    """Every replace-by-rename in the engine, the CLI and the workbench is safe_write's."""
    import careful_engine

    repo = Path(careful_engine.__file__).parent.parent
    offenders = []
    for package in ("careful_engine", "careful_cli", "workbench"):
        for path in (repo / package).rglob("*.py"):
            if path.name == "safe_write.py":
                continue
            text = path.read_text()
            for needle in ("os.replace(", "os.rename(", ".replace(tmp", ".rename("):
                if needle in text:
                    offenders.append(f"{path.relative_to(repo)}: {needle}")
    assert offenders == [], offenders


# ---------------------------------------------------------------- kill -9


KILL_PRELUDE = """
import os, time
from careful_engine.core import safe_write
_real, _n = os.replace, [0]
def _replace(*a, **k):
    _n[0] += 1
    if _n[0] == {at}:
        open({flag!r}, "w").close()
        time.sleep(600)
    return _real(*a, **k)
safe_write.os.replace = _replace
_open = safe_write.os.fdopen
def _fdopen(*a, **k):
    f = _open(*a, **k)
    if {midwrite}:
        w = f.write
        def slow(s):
            w(s)
            f.flush()
            if os.path.exists({flag!r} + ".go"):
                return len(s)
            open({flag!r} + ".go", "w").close()
            open({flag!r}, "w").close()
            time.sleep(600)
            return len(s)
        f.write = slow
    return f
safe_write.os.fdopen = _fdopen
"""


def _complete(out: Path) -> dict[str, str]:
    """Every output file, checked whole: JSON parses, JSON Lines end with a newline."""
    files = {}
    for p in sorted(out.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            text = p.read_text()
            if p.suffix in (".json", ".jsonl"):
                assert text.endswith("\n"), p
                if p.suffix == ".jsonl" or p.name.endswith("_score.json"):
                    [json.loads(x) for x in text.splitlines()]
                else:
                    json.loads(text)
            files[str(p.relative_to(out))] = text
    return files


@pytest.mark.parametrize("at, midwrite", [(1, False), (3, False), (None, True)])
def test_kill_9_while_writing_loses_nothing(run, tmp_path, at, midwrite) -> None:
    out = tmp_path / "out"
    first = careful("score", run, "--out", out)
    assert first.exit_code == EXIT_PROBLEMS, first.output
    before = _complete(out)
    # a different run to the same --out: every file's content would change
    hc.write_model(run, "m", good=hc.N_GOOD - 1)
    flag = str(tmp_path / "paused")
    prelude = KILL_PRELUDE.format(at=at or -1, flag=flag, midwrite=midwrite)
    code = (f"import sys\n{prelude}\nfrom careful_cli import main\n"
            "sys.argv = ['careful', *sys.argv[1:]]\nmain()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "score", str(run), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not os.path.exists(flag):
            assert proc.poll() is None, "the writer finished without pausing"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    after = _complete(out)  # every file whole: old or new, never half
    assert set(after) == set(before)
    assert any(after[k] == before[k] for k in before)
    res = careful("score", run, "--out", out)  # the next run completes over the leftovers
    assert res.exit_code == EXIT_PROBLEMS, res.output
    final = _complete(out)
    assert len(json.loads(final["accuracy.json"])["rows"]) == 1
    assert sum(json.loads(x)["official_valid"]
               for x in final["conversations.jsonl"].splitlines()) == hc.N_GOOD - 1


def test_safe_write_is_what_every_writer_uses() -> None:
    """No writer in the engine opens an output for writing by itself."""
    import careful_engine

    root = Path(careful_engine.__file__).parent
    allowed = {"safe_write.py", "cli/common.py"}
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel in allowed or rel.startswith(("generation/", "annotation/", "browse/")):
            continue  # other writers: the generator's own files, the annotation store
        text = path.read_text().replace("safe_write.write_", "safe_write.")  # its own are fine
        for needle in ('open(path, "w"', ".write_text(", ".write_bytes(", 'open(out'):
            if needle in text:
                offenders.append(f"{rel}: {needle}")
    assert offenders == [], offenders
    assert safe_write.__all__


def test_links_above_the_output_folder_are_the_persons_choice(tmp_path) -> None:
    """Only the output folder and what lies below it must not be links: --out under a
    linked folder (like /tmp on some systems) is fine, and no descriptor is left open."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    before = len(os.listdir("/proc/self/fd"))
    for i in range(20):
        write_text(tmp_path / "linked" / "new" / f"d{i}" / "f.txt", "x\n",
                   root=tmp_path / "linked" / "new" / f"d{i}")
    assert len(os.listdir("/proc/self/fd")) == before
    assert (real / "new" / "d3" / "f.txt").read_text() == "x\n"
    check_out_dir(tmp_path / "linked" / "other")
