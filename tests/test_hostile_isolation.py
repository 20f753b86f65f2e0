"""Per-entry isolation (issue 12, item 1): every command that reads result files, manifests or
score files turns each bad item into one ``file:line [id]: reason`` line and does the rest;
non-regular files are skipped, unreadable ones reported unscored; exit codes 0/1/2/3 as
careful_cli/common.py defines them; never a raw traceback."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_cli.common import EXIT_INTERNAL, EXIT_OK, EXIT_PROBLEMS, EXIT_UNUSABLE
from tests import hostile_corpus as hc

_load()
runner = CliRunner()


def careful(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def conversations(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "conversations.jsonl").read_text().splitlines()]


def assert_no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text, text


def breaks_on(victim: str, real: Callable) -> Callable:
    """``real`` (called with a conversation first), failing with a RecursionError, as a hostile
    trajectory can cause, on conversation ``victim`` only."""
    def broken(conv, *a, **k):
        if conv.id == victim:
            raise RecursionError("maximum recursion depth exceeded")
        return real(conv, *a, **k)
    return broken


@pytest.fixture
def good_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    hc.write_model(run, "good")
    return run


# ---------------------------------------------------------------- bad lines


@pytest.mark.parametrize("line, reason", [
    (lambda i: hc.big_int_line(i), "Exceeds the limit (4300 digits)"),
    (lambda i: hc.deep_line(i, 1000), "nests too deeply to read"),
    (lambda i: hc.deep_line(i, 150), "nests deeper than 100 levels"),
    (lambda i: f'{{"id": "{i}", "result": [[1e999999]]}}', None),  # inf: still scored
    (lambda i: f'{{"id": "{i}", "result": NaN, "x": -Infinity}}', "result is a float, not a list of turns"),
    (lambda i: f'{{"id": ["{i}"], "result": []}}', "no string 'id'"),
    (lambda i: '"just a string"', "entry is a string, not an object"),
    (lambda i: f'{{"id": "{i}", "result": [[{{"bad": 1}}]]}}', None),
    (lambda i: "\x00\xff garbage \u202e", "truncated last line"),
])
def test_one_bad_line_is_one_problem_and_the_rest_is_scored(tmp_path, line, reason) -> None:
    run = tmp_path / "run"
    bad_id = hc.ids()[hc.N_GOOD]
    path = hc.write_model(run, "m", [line(bad_id)])
    out = tmp_path / "out"
    res = careful("score", run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert_no_traceback(res.output)
    if reason is not None:
        lineno = hc.N_GOOD + 1
        shown = [s for s in res.output.splitlines() if f"{path.name}:{lineno}" in s]
        assert shown and reason in shown[0], res.output
    by_id = {c["id"]: c for c in conversations(out)}
    assert len(by_id) == 200
    assert all(by_id[i]["official_valid"] for i in hc.ids()[: hc.N_GOOD])


def test_a_line_that_is_not_utf8_is_one_problem(tmp_path) -> None:
    """bfcl's reader fails on a whole file holding bytes that are not UTF-8; careful skips the
    line, says which byte, and scores the rest (the line was read with the bytes escaped and
    scored as if it were text, without a word)."""
    run = tmp_path / "run"
    bad_id = hc.ids()[hc.N_GOOD]
    path = hc.write_model(run, "m")
    line = b'{"id": "' + bad_id.encode() + b'", "result": [["cd(folder=\'\xff\')"]]}'
    with path.open("ab") as f:
        f.write(line + b"\n")
    out = tmp_path / "out"
    res = careful("score", run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert_no_traceback(res.output)
    shown = [s for s in res.output.splitlines() if f"{path.name}:{hc.N_GOOD + 1}" in s]
    at = line.index(b"\xff") + 1
    assert shown and f"[{bad_id}]: line is not UTF-8 (byte 0xff at byte {at})" in shown[0], \
        res.output
    by_id = {c["id"]: c for c in conversations(out)}
    assert len(by_id) == 200 and by_id[bad_id]["official_valid"] is False
    assert all(by_id[i]["official_valid"] for i in hc.ids()[: hc.N_GOOD])


@pytest.mark.parametrize("counts, shown", [
    ('"output_token_count": [[NaN]]', "output_token_count holds nan"),
    ('"input_token_count": [[Infinity]]', "input_token_count holds inf"),
    ('"input_token_count": [[1e308]]', "input_token_count holds 1e+308"),
    ('"output_token_count": [[-5]]', "output_token_count holds -5"),
    ('"output_token_count": [[true]]', None),  # not a number: unknown, as text is
])
def test_token_counts_that_are_not_counts_are_unknown(tmp_path, counts, shown) -> None:
    """A logged token count that is NaN, infinite, negative or absurdly large is one problem
    line; that conversation's token figures are unknown (not NaN in the written JSON) and the
    rest of the run is scored and tabled."""
    run, out = tmp_path / "run", tmp_path / "out"
    bad_id = hc.ids()[hc.N_GOOD]
    line = f'{{"id": "{bad_id}", "result": [["Done."]], {counts}}}'
    path = hc.write_model(run, "m", [line])
    res = careful("score", run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert_no_traceback(res.output)
    mine = [s for s in res.output.splitlines() if f"{path.name}:{hc.N_GOOD + 1} [{bad_id}]" in s]
    if shown is None:
        assert not mine, res.output
    else:
        assert mine and shown in mine[0] and "not a token count" in mine[0], res.output

    def strict(x: str):
        raise ValueError(f"{x} in the written JSON")

    rows = [json.loads(x, parse_constant=strict)
            for x in (out / "conversations.jsonl").read_text().splitlines()]
    bad = next(r for r in rows if r["id"] == bad_id)
    assert bad["output_tokens"] is None and bad["input_tokens"] is None
    assert len(rows) == 200 and (out / "rules.md").exists()


@pytest.mark.parametrize("answers, shown, confirm", [
    ({"0": [1, None]}, "careful_user_answers['0'] holds 1", True),
    ({"0": [{"step": "x", "answer": "yes"}]}, "holds {'step': 'x'", True),
    ({"x": []}, "a key 'x' that is not a turn number", True),
    ([], "careful_user_answers is a list, not an object of turns", False),
])
def test_malformed_user_answers_are_one_line_and_left_out(tmp_path, answers, shown,
                                                          confirm) -> None:
    """Wrongly typed scripted-user answers are named and left out; the entry is scored (not
    failed as unscorable), and only an object of turns marks a confirmation run."""
    run, out = tmp_path / "run", tmp_path / "out"
    bad_id = hc.ids()[0]
    entry = json.loads(hc.reference_lines(1)[0])
    entry["careful_user_answers"] = answers
    path = hc.write_model(run, "m", [json.dumps(entry)], good=0)
    res = careful("score", run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert_no_traceback(res.output)
    mine = [s for s in res.output.splitlines() if f"{path.name}:1 [{bad_id}]" in s]
    assert len(mine) == 1 and shown in mine[0], res.output
    row = next(c for c in conversations(out) if c["id"] == bad_id)
    assert row["official_valid"] and row["confirm_protocol"] is confirm


def test_a_file_over_the_size_limit_is_reported_not_read(tmp_path, good_run) -> None:
    """A sparse file of 300 MiB (or a link to one) is refused by its size, unscored; the other
    model is scored."""
    big = hc.model_dir(good_run, "huge") / "multi_turn"
    big.mkdir(parents=True)
    with open(big / hc.RESULT, "wb") as f:
        f.truncate(300 * 2**20)
    res = careful("score", good_run, "--out", tmp_path / "out")
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert_no_traceback(res.output)
    line = next(s for s in res.output.splitlines() if "huge" in s and hc.RESULT in s)
    assert "bytes, more than the 268,435,456 bytes read" in line and "not scored" in line
    assert {c["model"] for c in conversations(tmp_path / "out")} == {"good"}


def test_blank_stretches_and_bad_lines(tmp_path) -> None:
    """Millions of blank lines cost neither a list of lines nor line-by-line time, and the
    line numbers after them are right; a bad line in the middle is "not JSON", a bad last
    line "truncated"."""
    from careful_engine.core import runs

    ids = hc.ids()
    good = hc.reference_lines()
    text = ("\n" * 3_000_000 + good[0] + "\n \r\n" + good[1] + "\n" + '{"id": "' + ids[5]
            + '", "res\n' + good[2] + "\n\n" + '{"id": "' + ids[6] + '"')
    path = hc.model_dir(tmp_path / "run", "m") / "multi_turn" / hc.RESULT
    path.parent.mkdir(parents=True)
    path.write_text(text)
    loaded = runs.load_result_file(runs.ResultFile(path, "m", hc.CATEGORY, 4))
    assert loaded.lines == {ids[0]: 3_000_001, ids[1]: 3_000_003, ids[2]: 3_000_005}
    shown = [(p.line, p.id, p.message.split(" (")[0]) for p in loaded.problems
             if p.line is not None]
    assert shown == [(3_000_004, ids[5], "line is not JSON"),
                     (3_000_007, ids[6], "truncated last line")]


def test_folder_search_finds_what_rglob_finds_and_survives_depth(tmp_path, good_run) -> None:
    """The search for result files finds what ``rglob`` finds on real layouts (the shared runs
    too); a folder nested 1,100 deep (rglob's recursion overflowed) is one problem line and a
    link back up is searched once; the run is scored."""
    from careful_engine.core import runs

    shared = Path(__file__).resolve().parents[2] / "shared" / "runs"
    for root in [good_run, *(sorted(shared.iterdir()) if shared.is_dir() else [])]:
        problems: list = []
        assert (sorted(runs.search_files(root, "_result.json", problems))
                == sorted(root.rglob("*_result.json")))
        assert problems == []
    (good_run / "deep").mkdir()
    fd = os.open(good_run / "deep", os.O_RDONLY)
    for _ in range(1100):  # (os.makedirs itself recurses)
        os.mkdir("a", dir_fd=fd)
        fd, old = os.open("a", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    os.symlink(good_run, good_run / "good" / "loop")
    res = careful("score", good_run, "--out", tmp_path / "out")
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert_no_traceback(res.output)
    assert "levels below the run folder are not searched" in res.output
    assert {c["model"] for c in conversations(tmp_path / "out")} == {"good"}
    fds = [os.open(good_run / "deep", os.O_RDONLY)]  # removed as made (rmtree recurses too)
    for _ in range(1100):
        fds.append(os.open("a", os.O_RDONLY, dir_fd=fds[-1]))
    os.close(fds.pop())
    while fds:
        fd = fds.pop()
        os.rmdir("a", dir_fd=fd)
        os.close(fd)


def test_an_entry_that_breaks_the_engine_is_one_problem(tmp_path, monkeypatch) -> None:
    """A failure inside decode or replay of one entry (here a RecursionError, as a hostile
    trajectory can cause) marks that conversation unscorable and scores the others."""
    from careful_engine.scoring import score as scoring

    victim = hc.ids()[1]
    monkeypatch.setattr(scoring, "replay", breaks_on(victim, scoring.replay))
    run, out = tmp_path / "run", tmp_path / "out"
    path = hc.write_model(run, "m")
    res = careful("score", run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert f"{path.name}:2 [{victim}]: could not be scored (RecursionError" in res.output
    by_id = {c["id"]: c for c in conversations(out)}
    assert by_id[victim]["official_error_type"] == scoring.UNSCORABLE
    assert by_id[hc.ids()[0]]["official_valid"] and by_id[hc.ids()[2]]["official_valid"]


@pytest.mark.parametrize("command", ["sensitivity", "leaderboard", "compare"])
def test_an_entry_that_breaks_the_engine_is_one_problem_for_every_scoring_command(
        tmp_path, monkeypatch, command) -> None:
    """The unscorable conversation (no trace kept) fails every score; sensitivity stopped
    with an internal error (no trace kept) on it."""
    from careful_engine.scoring import score as scoring

    victim = hc.ids()[1]
    monkeypatch.setattr(scoring, "replay", breaks_on(victim, scoring.replay))
    run, out = tmp_path / "run", tmp_path / "out"
    hc.write_model(run, "m")
    runs = [run, run] if command == "compare" else [run]
    res = careful(command, *runs, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert "could not be scored (RecursionError" in res.output
    assert_no_traceback(res.output)
    assert any(out.iterdir())


# ---------------------------------------------------------------- manifests


@pytest.mark.parametrize("decoder, kind", [(5, "an int"), (["x"], "a list"), ({"k": 1}, "an object"),
                                           (True, "a bool"), (1.5, "a float")])
def test_manifest_decoder_of_the_wrong_type_is_reported(tmp_path, good_run, decoder,
                                                        kind) -> None:
    hc.write_model(good_run, "bad", decoder=decoder)
    out = tmp_path / "out"
    res = careful("score", good_run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert f"careful_run.json: 'decoder' must be a registry key string, not {kind}" in res.output
    assert {c["model"] for c in conversations(out)} == {"good"}
    alone = tmp_path / "alone"
    hc.write_model(alone, "bad", decoder=decoder)
    res = careful("score", alone, "--out", tmp_path / "out2")
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert_no_traceback(res.output)


@pytest.mark.parametrize("manifest", ["not json", "[1, 2]", '{"decoder": null}', "7" * 5000,
                                      "[" * 5000])
def test_unparsable_manifest_names_no_decoder(tmp_path, manifest) -> None:
    run = tmp_path / "run"
    hc.write_model(run, "claude-sonnet-4-5-20250929-FC", decoder=None)
    (run / "claude-sonnet-4-5-20250929-FC" / "careful_run.json").write_text(manifest)
    res = careful("score", run, "--out", tmp_path / "out")
    assert res.exit_code == EXIT_PROBLEMS, res.output  # ids missing: the file holds 3
    assert_no_traceback(res.output)


def test_manifest_that_is_a_fifo_does_not_hang(tmp_path, good_run) -> None:
    hc.write_model(good_run, "fifo-manifest", decoder=None)
    os.mkfifo(good_run / "fifo-manifest" / "careful_run.json")
    res = hc.run_cli("score", str(good_run), "--out", str(tmp_path / "out"), timeout=240)
    assert res.returncode == EXIT_PROBLEMS, res.stderr
    assert "careful_run.json: a FIFO, not a regular file" in res.stderr
    assert_no_traceback(res.stderr)


# ---------------------------------------------------------------- files that are not files


def test_fifo_socket_device_and_folder_named_like_result_files_are_skipped(tmp_path,
                                                                            good_run) -> None:
    """Run in a fresh interpreter with a timeout: a FIFO opened for reading would hang."""
    for name in ("fifo", "sock", "dev", "dir"):
        (good_run / name / "multi_turn").mkdir(parents=True)
    os.mkfifo(good_run / "fifo" / "multi_turn" / hc.RESULT)
    sock = socket.socket(socket.AF_UNIX)
    sock_path = good_run / "sock" / "multi_turn" / hc.RESULT
    if len(os.fsencode(sock_path)) < 100:
        sock.bind(str(sock_path))
    (good_run / "dev" / "multi_turn" / hc.RESULT).symlink_to("/dev/zero")
    (good_run / "dir" / "multi_turn" / hc.RESULT).mkdir()
    res = hc.run_cli("score", str(good_run), "--out", str(tmp_path / "out"), timeout=240)
    sock.close()
    assert res.returncode == EXIT_PROBLEMS, res.stderr
    err = res.stderr
    assert f"fifo/multi_turn/{hc.RESULT}: a FIFO, not a regular file; skipped" in err
    assert f"dev/multi_turn/{hc.RESULT}: a character device, not a regular file" in err
    assert f"dir/multi_turn/{hc.RESULT}: a folder, not a regular file" in err
    if sock_path.exists():
        assert f"sock/multi_turn/{hc.RESULT}: a socket, not a regular file" in err
    assert {c["model"] for c in conversations(tmp_path / "out")} == {"good"}
    assert_no_traceback(err)


def test_unreadable_file_is_reported_unscored_not_scored_zero(tmp_path, good_run,
                                                              monkeypatch) -> None:
    path = hc.write_model(good_run, "locked")
    real_open = os.open

    def deny(p, *a, **k):
        if os.fspath(p) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(p))
        return real_open(p, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    out = tmp_path / "out"
    res = careful("score", good_run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert "cannot read (Permission denied); not scored" in res.output
    assert {c["model"] for c in conversations(out)} == {"good"}  # no 0 % row for it
    assert "locked" not in (out / "accuracy.csv").read_text()
    alone = tmp_path / "alone"
    path = hc.write_model(alone, "locked")
    res = careful("score", alone, "--out", tmp_path / "out2")
    assert res.exit_code == EXIT_UNUSABLE, res.output
    assert "not scored" in res.output and "no usable multi-turn result files" in res.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_by_mode(tmp_path, good_run) -> None:
    path = hc.write_model(good_run, "locked")
    path.chmod(0)
    res = careful("score", good_run, "--out", tmp_path / "out")
    assert res.exit_code == EXIT_PROBLEMS and "Permission denied" in res.output


def test_dangling_and_looping_links_are_reported(tmp_path, good_run) -> None:
    for name, target in (("dangling", "nowhere.json"), ("loop", hc.RESULT)):
        (good_run / name / "multi_turn").mkdir(parents=True)
        (good_run / name / "multi_turn" / hc.RESULT).symlink_to(target)
    res = careful("score", good_run, "--out", tmp_path / "out")
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert "dangling/multi_turn" in res.output and "loop/multi_turn" in res.output
    assert res.output.count("not scored") >= 2


def test_model_folder_not_valid_utf8_is_scored_and_written(tmp_path) -> None:
    run, out = tmp_path / "run", tmp_path / "out"
    hc.write_model(run, b"caf\xe9-\xff\xfe")
    res = careful("score", run, "--out", out)
    assert res.exit_code == EXIT_PROBLEMS, res.output  # ids missing: the file holds 3
    assert_no_traceback(res.output)
    assert "caf\\udce9-\\udcff\\udcfe" in res.output
    lines = conversations(out)
    assert len(lines) == 200 and lines[0]["model"] == os.fsdecode(b"caf\xe9-\xff\xfe")
    assert "caf\\udce9" in (out / "accuracy.md").read_text()
    assert list((out / "score").iterdir())[0].name == os.fsdecode(b"caf\xe9-\xff\xfe")


# ---------------------------------------------------------------- every reading command


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    """Two usable model folders with bad lines, and every other kind of damage."""
    run = tmp_path_factory.mktemp("hostile") / "run"
    bad = hc.ids()[hc.N_GOOD:]
    hc.write_model(run, "alpha", [hc.big_int_line(bad[0]), hc.deep_line(bad[1], 1000),
                                  hc.deep_line(bad[2], 200), "{broken"])
    hc.write_model(run, b"beta-\xff", [hc.big_int_line(bad[0])])
    hc.write_model(run, "numdec", decoder=3)
    hc.write_model(run, "objdec", decoder={"a": 1})
    (run / "fifo" / "multi_turn").mkdir(parents=True)
    os.mkfifo(run / "fifo" / "multi_turn" / hc.RESULT)
    return run


READERS = {
    "leaderboard": lambda run, out: ["leaderboard", run, "--out", out],
    "sensitivity": lambda run, out: ["sensitivity", run, "--out", out, "--detector", "strict",
                                     "--detector", "qmark"],
    "provenance": lambda run, out: ["provenance", run, "--out", out / "p.json"],
    "audit decode": lambda run, out: ["audit", "decode", run, "--out", out],
    "compare": lambda run, out: ["compare", run, run, "--model-a", "alpha", "--model-b",
                                 "alpha", "--out", out],
}


@pytest.mark.parametrize("command", list(READERS))
def test_every_reading_command_reports_and_goes_on(tmp_path, hostile_run, command) -> None:
    res = hc.run_cli(*map(str, READERS[command](hostile_run, tmp_path / "out")), timeout=400)
    assert res.returncode == EXIT_PROBLEMS, (command, res.stdout, res.stderr)
    assert_no_traceback(res.stderr + res.stdout)
    text = res.stderr + res.stdout
    if command != "compare":
        assert "numdec" in text and "objdec" in text and "must be a registry key string" in text
    if command == "audit decode":  # the lines it could not read, as score lists them
        assert "input problem(s)" in text and "nests too deeply" in text
    assert any((tmp_path / "out").iterdir())


def test_declare_with_hostile_runs_skips_what_it_cannot_use(tmp_path, hostile_run) -> None:
    out = tmp_path / "effects.json"
    res = hc.run_cli("declare", "--runs", str(hostile_run), "--out", str(out), timeout=400)
    assert res.returncode == EXIT_PROBLEMS, res.stderr
    assert_no_traceback(res.stderr)
    assert "a FIFO, not a regular file" in res.stderr
    assert "'decoder' must be a registry key string, not an int" in res.stderr
    assert json.loads(out.read_text())["schema"]


def test_workbench_loading_survives_the_hostile_run(hostile_run) -> None:
    from careful_engine import browse

    refs = browse.find_runs([hostile_run])
    assert {r.model for r in refs} >= {"alpha", "numdec"}
    for ref in refs:
        rows = browse.RunBrowser(ref, None).rows()
        assert len(rows) <= hc.N_GOOD


def test_audit_scores_reports_bad_score_files(tmp_path) -> None:
    folder = tmp_path / "score" / "m"
    folder.mkdir(parents=True)
    (folder / "BFCL_v4_irrelevance_score.json").write_text(
        '{"accuracy": "high", "total_count": 3}\n')
    (folder / "BFCL_v4_simple_python_score.json").write_text(
        '{"accuracy": 0.5, "correct_count": 1, "total_count": 2}\n' + hc.big_int_line("x")
        + "\n" + "[" * 5000 + "\n")
    os.mkfifo(folder / "BFCL_v4_live_simple_score.json")
    (folder / "BFCL_v4_multiple_score.json").write_text('{"accuracy": NaN, "total_count": 1}\n')
    (folder / "BFCL_v4_simple_java_score.json").write_text(  # not a share: an average overflows
        '{"accuracy": 1e308, "total_count": 1}\n')
    res = hc.run_cli("audit", "scores", str(tmp_path), "--out", str(tmp_path / "o"),
                     timeout=120)
    assert res.returncode == EXIT_PROBLEMS, res.stderr
    assert_no_traceback(res.stderr + res.stdout)
    assert "score line is not JSON" in res.stderr and "a FIFO" in res.stderr
    for name in ("multiple", "simple_java", "irrelevance"):
        assert f"BFCL_v4_{name}_score.json:1: first line is not a score header" in res.stderr
    for written in (tmp_path / "o").rglob("*.json"):  # no NaN or Infinity written
        json.loads(written.read_text(), parse_constant=lambda x, w=written: pytest.fail(f"{x} in {w}"))


# ---------------------------------------------------------------- exit codes


def test_exit_codes(tmp_path, good_run) -> None:
    out = tmp_path / "out"
    assert careful("score", good_run, "--out", out).exit_code == EXIT_PROBLEMS  # ids missing
    full = tmp_path / "full"
    (full / "m" / "multi_turn").mkdir(parents=True)
    (full / "m" / "multi_turn" / hc.RESULT).write_text(
        "\n".join(hc.reference_lines(200)) + "\n")
    (full / "m" / "careful_run.json").write_text(json.dumps({"decoder": hc.demo.DECODER}))
    assert careful("score", full, "--out", tmp_path / "o2").exit_code == EXIT_OK
    empty = tmp_path / "empty"
    empty.mkdir()
    assert careful("score", empty).exit_code == EXIT_UNUSABLE
    assert careful("score", tmp_path / "nope").exit_code == EXIT_UNUSABLE


def test_usage_errors_keep_exit_2_through_main(tmp_path) -> None:
    for args in (["score"], ["score", str(tmp_path), "--detector", "bogus"], ["nope"],
                 ["score", str(tmp_path), "--no-such-option"]):
        res = hc.run_cli(*args, timeout=120)
        assert res.returncode == EXIT_UNUSABLE, (args, res.stderr)
        assert_no_traceback(res.stderr)


def test_internal_error_is_a_message_and_a_log(tmp_path, good_run) -> None:
    prelude = ("import careful_engine.scoring.score as s\n"
               "def boom(*a, **k):\n    raise ZeroDivisionError('engine bug')\n"
               "s.score_run = boom\nimport careful_cli.score as cs\ncs.score_run = boom\n")
    res = hc.run_cli("score", str(good_run), "--out", str(tmp_path / "out"), prelude=prelude,
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache"), "CAREFUL_CACHE_DIR": ""},
                     timeout=120)
    assert res.returncode == EXIT_INTERNAL, res.stderr
    assert_no_traceback(res.stderr)
    assert "internal error (ZeroDivisionError: engine bug)" in res.stderr
    logs = list((tmp_path / "cache" / "careful" / "logs").iterdir())
    assert len(logs) == 1 and str(logs[0]) in res.stderr.replace("\n", "")
    text = logs[0].read_text()
    assert "Traceback" in text and "ZeroDivisionError: engine bug" in text


def test_provenance_check_that_breaks_on_one_entry_is_one_problem(tmp_path, monkeypatch) -> None:
    from careful_engine.analysis.provenance import check

    victim = hc.ids()[2]
    monkeypatch.setattr(check, "check_conversation", breaks_on(victim, check.check_conversation))
    run = tmp_path / "run"
    hc.write_model(run, "m")
    res = careful("provenance", run, "--out", tmp_path / "p.json")
    assert res.exit_code == EXIT_PROBLEMS, res.output
    assert f"[{victim}]: could not be checked (RecursionError" in res.output.replace("\n", "")
    report = json.loads((tmp_path / "p.json").read_text())
    assert len(report["runs"][0]["conversations"]) == 200


def test_deep_lines_in_score_files_and_ledgers_are_one_line_each(tmp_path) -> None:
    """A line nested too deeply for json (RecursionError, not a ValueError) in an official
    score file is one problem and the rest is read; in a spend ledger it is skipped like a cut
    line; an accuracy that is not a share (NaN, -5) is unknown, never printed as NaN."""
    from careful_engine.analysis.provenance.official import read_official
    from careful_engine.generation.files import read_records

    deep = "[" * 100_000 + "]" * 100_000
    score = tmp_path / "BFCL_v4_multi_turn_base_score.json"
    score.write_text('{"accuracy": NaN, "total_count": 200}\n' + deep + "\n"
                     + json.dumps({"id": "multi_turn_base_3", "error": {"error_type": "x"}})
                     + "\n")
    got = read_official(score, "multi_turn_base")
    assert got.accuracy is None and got.failed == {"multi_turn_base_3": "x"}
    assert [(p.line, p.message) for p in got.problems] == [
        (1, "first line is not a score header with an accuracy from 0 to 1 and a total_count; "
            "left out"),
        (2, "score line is not JSON (nested too deeply)")]
    score.write_text('{"accuracy": -5, "total_count": 200}\n')
    assert read_official(score, "multi_turn_base").accuracy is None
    ledger = tmp_path / "careful_spend.jsonl"
    ledger.write_text(json.dumps({"status": "ok"}) + "\n" + deep + "\n")
    assert read_records(ledger) == [{"status": "ok"}]
