"""Hostile conversations scored through the real ``careful score``: bounded time and memory.

Each case puts hostile calls in the first turn of a real conversation (the rest of its turns,
and every other conversation of the file, are the reference). Cases bfcl can evaluate in
reasonable time keep bfcl's own verdict, checked against bfcl-eval at test time; the others
stop with ``careful:budget_exceeded`` and the reason, and the rest of the file is scored.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl, decode
from careful_engine.core.budget import BUDGET_EXCEEDED, DEFAULT_BUDGET, Budget, guard
from careful_engine.demo import reference as demo

from .bfcl_oracle import error_type, evaluate_entries, official_handler
from .hostile_corpus import run_cli

_load()
runner = CliRunner()
CATEGORY = "multi_turn_base"
FS = "multi_turn_base_1"  # GorillaFileSystem only
MATH = "multi_turn_base_15"  # GorillaFileSystem and MathAPI


def _step(calls: list[tuple[str, dict]]) -> list[dict[str, str]]:
    return [{name: json.dumps(args)} for name, args in calls]


def _entry(conv_id: str, hostile: list[tuple[str, dict]], turn: int = 0) -> dict:
    entry = demo.reference_entry(bfcl.conversation(conv_id))
    entry["result"][turn] = [_step(hostile)] + entry["result"][turn]
    return entry


def _doubling(n: int) -> list[tuple[str, dict]]:
    """Each cp shares the children of ``a``; moving the copy into ``a`` doubles its tree."""
    calls = [("mkdir", {"dir_name": "a"}), ("cd", {"folder": "a"}),
             ("touch", {"file_name": "f"}), ("cd", {"folder": ".."})]
    for i in range(n):
        calls += [("cp", {"source": "a", "destination": f"t{i}"}),
                  ("mv", {"source": f"t{i}", "destination": "a"})]
    return calls


def _deep(n: int) -> list[tuple[str, dict]]:
    return [c for _ in range(n) for c in (("mkdir", {"dir_name": "a"}), ("cd", {"folder": "a"}))]


def _echo(n: int, size: int) -> list[tuple[str, dict]]:
    return [("touch", {"file_name": "big"})] + [
        ("echo", {"content": f"{i}" + "x" * size, "file_name": "big"}) for i in range(n)]


# id -> (conversation, hostile calls, expected: "bfcl" or a reason fragment)
CASES = {
    "mkdir_20000": (FS, [("mkdir", {"dir_name": f"d{i}"}) for i in range(20_000)], "bfcl"),
    "mkdir_cd_500": (FS, _deep(500), "bfcl"),
    "echo_big": (FS, _echo(12, 500_000), "bfcl"),
    "float_precision": (MATH, [("square_root", {"number": 2, "precision": 5e7})], "bfcl"),
    "cp_doubling_92": (FS, _doubling(92), "more than 100,000 entries"),
    "cp_into_itself": (FS, [("mkdir", {"dir_name": "a"}), ("cp", {"source": "a",
                                                                  "destination": "a"})],
                       "deeper than"),
    "mkdir_cd_1001": (FS, _deep(1_001), "deeper than 1,000"),
    "power": (MATH, [("power", {"base": 9, "exponent": 999_999_999})], "power"),
    "square_root": (MATH, [("square_root", {"number": 2, "precision": 50_000_000})],
                    "precision"),
    "logarithm": (MATH, [("logarithm", {"value": 10, "base": 2, "precision": 10**8})],
                  "precision"),
    # mpmath's dps setter calls int(): a string of digits is as costly as its number
    "round_number": (MATH, [("round_number", {"number": 5, "decimal_places": -10**9})],
                     "round_number"),
    "logarithm_string": (MATH, [("logarithm", {"value": 3, "base": 7,
                                               "precision": "50000000"})], "precision"),
}


def _write_run(root: Path, entries: list[dict]) -> Path:
    """A V4 run folder holding every reference conversation except the hostile ones."""
    folder = root / "run" / "hostile-model" / "multi_turn"
    folder.mkdir(parents=True)
    by_id = {e["id"]: e for e in entries}
    lines = [json.dumps(by_id.get(c.id) or demo.reference_entry(c))
             for c in bfcl.conversations(CATEGORY)]
    (folder / f"BFCL_v4_{CATEGORY}_result.json").write_text("\n".join(lines) + "\n")
    return root / "run"


def _score(run: Path, *extra: str) -> tuple[int, str, dict[str, dict]]:
    out = run / "out"
    res = runner.invoke(app, ["score", str(run), "--decoder", demo.DECODER, "--out", str(out),
                              "-q", *extra], catch_exceptions=False)
    lines = {}
    if (out / "conversations.jsonl").exists():
        for line in (out / "conversations.jsonl").read_text().splitlines():
            r = json.loads(line)
            lines[r["id"]] = r
    return res.exit_code, res.output, lines


def _oracle(entry: dict) -> tuple[bool, str | None]:
    res = evaluate_entries([entry], CATEGORY, official_handler(demo.DECODER), "careful-hostile")
    v = res[entry["id"]]
    return v["valid"], error_type(v)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_conversation_is_bounded(case: str, tmp_path: Path) -> None:
    conv_id, calls, expected = CASES[case]
    entry = _entry(conv_id, calls)
    run = _write_run(tmp_path, [entry])
    start = time.perf_counter()
    code, output, lines = _score(run)
    took = time.perf_counter() - start
    assert "Traceback" not in output
    assert code == (0 if expected == "bfcl" else 1), output  # a stopped replay: a problem
    assert took < 60, f"{case}: {took:.1f} s"
    got = lines[conv_id]
    if expected == "bfcl":
        assert (got["official_valid"], got["official_error_type"]) == _oracle(entry)
    else:
        assert got["official_error_type"] == BUDGET_EXCEEDED
        assert expected in got["official_error_message"]
    others = [r for i, r in lines.items() if i != conv_id]
    assert len(others) == 199 and all(r["official_valid"] for r in others)


def test_verdict_reached_before_the_budget_stands(tmp_path: Path) -> None:
    """bfcl stops at the first failing turn: a hostile call after it changes nothing official."""
    conv = bfcl.conversation(MATH)
    entry = demo.reference_entry(conv)
    entry["result"][0] = [["Nothing to do."]]  # turn 0 fails: no decoded step
    last = len(conv.ground_truth) - 1
    entry["result"][last] = [_step([("power", {"base": 9, "exponent": 999_999_999})])] + \
        entry["result"][last]
    code, output, lines = _score(_write_run(tmp_path, [entry]))
    assert code == 1 and "Traceback" not in output  # the stop is an input problem
    got = lines[MATH]
    assert (got["official_valid"], got["official_error_type"]) == _oracle(entry)


def test_time_and_memory_budgets_between_calls(tmp_path: Path) -> None:
    slow = _entry(MATH, [("logarithm", {"value": 10, "base": 3, "precision": 9_000})] * 50)
    code, output, lines = _score(_write_run(tmp_path / "time", [slow]),
                                 "--max-seconds-per-conversation", "0.3")
    assert code == 1 and "Traceback" not in output
    assert lines[MATH]["official_error_type"] == BUDGET_EXCEEDED
    assert "time budget" in lines[MATH]["official_error_message"]
    # resident memory grows only past the heap the process already holds free, and a long
    # test session holds much: the memory case runs in a fresh interpreter
    # (an entry's line holds at most runs.MAX_ENTRY_CHARS: 48 echoes of 320,000 characters)
    grow = _entry(FS, _echo(48, 320_000))
    run = _write_run(tmp_path / "memory", [grow])
    done = run_cli("score", str(run), "--decoder", demo.DECODER, "--out", str(run / "out"),
                   "-q", "--jobs", "1", "--max-seconds-per-conversation", "60",
                   "--max-mb-per-conversation", "4")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    lines = {r["id"]: r for r in map(json.loads, (run / "out" / "conversations.jsonl")
                                     .read_text().splitlines())}
    assert lines[FS]["official_error_type"] == BUDGET_EXCEEDED
    assert "memory budget" in lines[FS]["official_error_message"]


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_budget_options_are_validated(value: str, tmp_path: Path) -> None:
    run = _write_run(tmp_path, [])
    res = runner.invoke(app, ["score", str(run), "--max-seconds-per-conversation", value])
    assert res.exit_code == 2, res.output
    res = runner.invoke(app, ["score", str(run), "--max-mb-per-conversation", value])
    assert res.exit_code == 2, res.output


def test_guards_follow_the_cost_not_the_examples() -> None:
    b = DEFAULT_BUDGET
    assert guard("power", (2, 10**6), {}, b) is None  # a million bits: fast
    assert guard("power", (3, 10**6), {}, b) is not None  # two million bits
    assert guard("power", (), {"base": 9.0, "exponent": 10**9}, b) is None  # float: overflows
    assert guard("power", (), {"base": 1, "exponent": 10**100}, b) is None
    assert guard("power", (), {"base": -7, "exponent": -10**9}, b) is None  # a float result
    assert guard("square_root", (2, 10_000), {}, b) is None
    assert guard("square_root", (2, 10_001), {}, b) is not None
    assert guard("square_root", (2, 1e9), {}, b) is None  # decimal refuses a float at once
    assert guard("logarithm", (), {"value": 2, "base": 3, "precision": 1e9}, b) is not None
    assert guard("logarithm", (2, 3, " 1_000_000 "), {}, b) is not None  # int() reads it
    assert guard("logarithm", (2, 3, "10000"), {}, b) is None
    assert guard("logarithm", (2, 3, "1e9"), {}, b) is None  # int() refuses it at once
    assert guard("square_root", (2, "50000000"), {}, b) is None  # decimal refuses a string
    assert guard("mean", ([1] * 10,), {}, b) is None
    assert guard("round_number", (5, -300_000), {}, b) is None  # 10**300000: about 0.05 s
    assert guard("round_number", (5,), {"decimal_places": -301_030}, b) is not None
    assert guard("round_number", (5.0, -10**9), {}, b) is None  # a float rounds at once
    assert guard("power", (9, 10**6), {}, Budget(max_result_bits=10**7)) is None


PROMPTING = "gpt-4o-2024-11-20"  # a prompting decoder: a step is model text
HUGE = "[" + "cd(folder='a'), " * 62_500 + "]"  # 1,000,002 characters: never decoded


def _prompting_run(root: Path, entries: list[dict]) -> Path:
    folder = root / "run" / "prompting-model" / "multi_turn"
    folder.mkdir(parents=True)
    (folder / f"BFCL_v4_{CATEGORY}_result.json").write_text(
        "\n".join(json.dumps(e) for e in entries) + "\n")
    return root / "run"


def test_a_step_too_long_to_decode_stops_the_conversation(tmp_path: Path) -> None:
    """A step longer than the decoding budget is not handed to bfcl's decoder (whose time and
    memory grow with the text): the conversation gets the budget verdict, naming the step; a
    force-terminated conversation keeps bfcl's verdict with the same step in its only turn
    (and, its replay stopped there, no blame, as no rule counts); the other entries of the
    file are scored."""
    assert len(HUGE) > decode.MAX_STEP_CHARS
    conv = bfcl.conversation(MATH)
    n = len(conv.ground_truth)
    stopped = {"id": MATH, "result": [[HUGE, "[]"]] + [["done"]] * (n - 1)}
    cut = {"id": FS, "result": [[HUGE]]}  # fewer turns than the reference: force-terminated
    other = bfcl.conversation("multi_turn_base_2")
    fine = {"id": other.id, "result": [["nothing to do"]] * len(other.ground_truth)}
    run = _prompting_run(tmp_path, [stopped, cut, fine])
    res = runner.invoke(app, ["score", str(run), "--decoder", f"prompting-model={PROMPTING}",
                              "--out", str(run / "out"), "-q", "--jobs", "1"])
    assert "Traceback" not in res.output and "could not be scored" not in res.output
    lines = {r["id"]: r for r in map(json.loads, (run / "out" / "conversations.jsonl")
                                     .read_text().splitlines())}
    got = lines[MATH]
    assert got["official_error_type"] == BUDGET_EXCEEDED
    assert "turn 0 step 0 is 1,000,002 characters long" in got["official_error_message"]
    assert got["model_calls"] == 0 and got["steps"]["decode_error"] == n + 1
    assert lines[FS]["official_error_type"] == "multi_turn:force_terminated"
    assert lines[FS]["blame"] is None and lines[FS]["rules"] is None
    assert lines[other.id]["official_error_type"] == "multi_turn:empty_turn_model_response"


def test_a_string_format_too_large_is_a_decode_error(tmp_path: Path) -> None:
    """A call whose '%' formatting would make 100,000,000 characters (a width after a mapping
    key; six of them in one step) is refused as a decode error naming why: the run finishes
    and what it writes stays small."""
    call = "cd(folder='%(a)99999999s' % {'a': 1})"
    conv = bfcl.conversation(FS)
    entry = {"id": FS, "result": [[f"[{call}]", f"[{', '.join([call] * 6)}]"]]
             + [["done"]] * (len(conv.ground_truth) - 1)}
    run = _prompting_run(tmp_path, [entry])
    res = runner.invoke(app, ["score", str(run), "--decoder", f"prompting-model={PROMPTING}",
                              "--out", str(run / "out"), "-q", "--jobs", "1"])
    assert "Traceback" not in res.output and "could not be scored" not in res.output, res.output
    out = run / "out" / "conversations.jsonl"
    assert out.stat().st_size < 1_000_000
    line = next(r for r in map(json.loads, out.read_text().splitlines()) if r["id"] == FS)
    assert line["model_calls"] == 0  # the two refused steps; the "done" answers: no call
    assert line["steps"]["decode_error"] == 2
    assert line["steps"]["no_call"] == line["model_steps"] - 2
    st = decode.decode_step(bfcl.handler(PROMPTING), entry["result"][0][1])
    assert st.outcome.value == "decode_error" and "result too large" in (st.error or "")


def test_decoding_stops_at_the_conversation_budget(monkeypatch) -> None:
    """Steps are decoded until the conversation's text passes the budget; that step and all
    after it are not, and the replay stops there, after the turns before it ran (a verdict
    bfcl had already reached stands)."""
    from careful_engine.core.replay import replay

    monkeypatch.setattr(decode, "MAX_DECODED_CHARS", 60)
    conv = bfcl.conversation(FS)
    handler = bfcl.handler(PROMPTING)
    ls = "[ls(a=False)]"  # 13 characters
    rest = [[ls]] * (len(conv.ground_truth) - 2)
    entry = {"id": FS, "result": [["nothing"], [ls] * 5] + rest}  # 7 + 4 * 13 = 59, then 72
    traj = decode.decode_entry(entry, handler)
    assert traj.over_budget is not None and traj.over_budget[:2] == (1, 4)
    assert "more than 60 characters" in traj.over_budget[2]
    outcomes = [[s.outcome.value for s in turn] for turn in traj.turns]
    assert outcomes[:2] == [["no_call"], ["calls"] * 4 + ["decode_error"]]  # prose: no call
    assert all(o == ["decode_error"] for o in outcomes[2:])
    trace = replay(conv, traj)
    assert [len(t) for t in trace.model.turns] == [0, 4]  # the turns up to the stop ran
    assert trace.budget_exceeded == traj.over_budget[2]
    # bfcl had failed turn 0 already (no decoded step): that verdict stands
    assert trace.verdict.error_type == "multi_turn:empty_turn_model_response"


class _Counting:
    """Stands for a handler: FC steps (lists of {name: arguments}) decoded as bfcl's FC
    decoders do, text steps as one call each per ``;``; every step it is handed is counted."""

    def __init__(self) -> None:
        self.seen: list = []

    def decode_execute(self, item, has_tool_call_tag=False):  # noqa: ANN001, ANN201
        self.seen.append(item)
        if isinstance(item, str):
            return [c for c in item.split(";") if c]
        return [f"{name}()" for call in item for name in call]


def test_a_step_of_more_calls_than_the_budget_is_not_decoded(monkeypatch) -> None:
    """An FC step of more call objects than MAX_DECODED_CALLS is never handed to the decoder
    (bfcl's would build every call, then the replay, the rules and the blame would run them
    all); text that decodes to more calls stops the conversation at that step."""
    monkeypatch.setattr(decode, "MAX_DECODED_CALLS", 5)
    h = _Counting()
    many = [{"pwd": "{}"}] * 6
    traj = decode.decode_entry({"id": FS, "result": [[[{"ls": "{}"}]], [many, "x"]]}, h)
    assert h.seen == [[{"ls": "{}"}]]  # the step of six calls never reached it
    assert traj.over_budget[:2] == (1, 0) and "more than 5 calls" in traj.over_budget[2]
    assert [s.outcome.value for s in traj.turns[1]] == ["decode_error", "decode_error"]
    h = _Counting()
    traj = decode.decode_entry({"id": FS, "result": [["a;b;c"], ["d;e;f", "g"]]}, h)
    assert h.seen == ["a;b;c", "d;e;f"]  # decoded, then over the budget: that step stops it
    assert traj.over_budget[:2] == (1, 0)
    assert [s.calls for s in traj.turns[0]] == [["a", "b", "c"]]
    assert [s.calls for s in traj.turns[1]] == [[], []]


def test_an_fc_run_with_thousands_of_calls_in_a_step_gets_the_budget_verdict(tmp_path) -> None:
    """The red team's file: one conversation whose first step holds 50,001 call objects. It gets
    careful:budget_exceeded, the other entries of the file are scored, and an entry line too
    long to read is one problem line."""
    from careful_engine.core import runs

    conv = bfcl.conversation(FS)
    many = [{"pwd": "{}"}] * (decode.MAX_DECODED_CALLS + 1)
    flood = {"id": FS, "result": [[many]] + [[_step([("ls", {})])]] * (len(conv.ground_truth) - 1)}
    other = bfcl.conversation("multi_turn_base_2")
    fine = {"id": other.id, "result": [["nothing to do"]] * len(other.ground_truth)}
    long_id = "multi_turn_base_3"
    folder = tmp_path / "run" / "fc-model" / "multi_turn"
    folder.mkdir(parents=True)
    long_line = json.dumps({"id": long_id, "result": [["x" * (runs.MAX_ENTRY_CHARS + 1)]]})
    (folder / f"BFCL_v4_{CATEGORY}_result.json").write_text(
        "\n".join([json.dumps(flood), json.dumps(fine), long_line]) + "\n")
    res = runner.invoke(app, ["score", str(tmp_path / "run"), "--decoder",
                              "fc-model=gpt-4o-2024-11-20-FC", "--out", str(tmp_path / "out"),
                              "--jobs", "1"])
    assert "Traceback" not in res.output and "could not be scored" not in res.output
    assert f":3 [{long_id}]: line is 16,777," in res.output.replace("\n", " "), res.output
    lines = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "conversations.jsonl")
                                     .read_text().splitlines())}
    assert lines[FS]["official_error_type"] == BUDGET_EXCEEDED
    assert "more than 50,000 calls" in lines[FS]["official_error_message"]
    assert lines[FS]["model_calls"] == 0
    assert lines[other.id]["official_error_type"] == "multi_turn:empty_turn_model_response"
    assert lines[long_id]["official_error_type"] == "careful:missing_entry"


def _stopped_entries() -> tuple[str, dict, dict]:
    """Two entries whose replay the budget stops (an unbounded power): ``other``'s after a
    failed call, MATH's after bfcl's verdict (an empty turn 0) was reached; (other, its entry,
    MATH's entry)."""
    power = [("power", {"base": 9, "exponent": 999_999_999})]
    other = "multi_turn_base_28"  # GorillaFileSystem and MathAPI, as MATH
    stopped = _entry(other, [("cat", {"file_name": "nope"})] + power)  # a failed call first
    after = demo.reference_entry(bfcl.conversation(MATH))  # turn 0 fails before the stop
    after["result"][0] = [["Nothing to do."]]
    after["result"][-1] = [_step(power)] + after["result"][-1]
    return other, stopped, after


def test_a_replay_the_budget_stopped_has_no_rule_counts(tmp_path: Path) -> None:
    """A conversation the budget stopped was not replayed in full: its rules are null (not the
    counts of the part that ran, nor zeros), it is not among the conversations the rule counts
    are over, it fails (as bfcl's verdict had it where that came first), and it gets one
    ``file:line [id]: replay stopped: ...`` problem line; the other entries are scored."""
    import csv

    other, stopped, after = _stopped_entries()
    run = _write_run(tmp_path, [stopped, after])
    out = run / "out"
    res = runner.invoke(app, ["score", str(run), "--decoder", demo.DECODER, "--out", str(out),
                              "--jobs", "1"])
    assert "Traceback" not in res.output
    assert res.exit_code == 1, res.output  # done, with input problems
    text = " ".join(res.output.split())
    n = {c.id: k + 1 for k, c in enumerate(bfcl.conversations(CATEGORY))}
    assert "2 input problem(s)" in text
    assert (f"BFCL_v4_{CATEGORY}_result.json:{n[other]} [{other}]: replay stopped: "
            "power: power(9" in text and "counted as failed; no rule counts" in text), res.output
    assert (f":{n[MATH]} [{MATH}]: replay stopped: " in text
            and "bfcl's verdict reached before it (empty turn) stands; no rule counts" in text)
    lines = {r["id"]: r for r in map(json.loads, (out / "conversations.jsonl")
                                     .read_text().splitlines())}
    assert lines[other]["official_error_type"] == BUDGET_EXCEEDED
    assert lines[MATH]["official_error_type"] == "multi_turn:empty_turn_model_response"
    for got in (lines[other], lines[MATH]):
        assert got["rules"] is None and got["safe_valid"] is False and not got["official_valid"]
        assert got["replay_stopped"].startswith("power: power(9")  # (recorded for both)
    assert all(r["rules"] is not None and r["replay_stopped"] is None
               for i, r in lines.items() if i not in (MATH, other))
    row = next(csv.DictReader((out / "rules.csv").open()))
    assert (row["conversations"], row["replayed"], row["failed"]) == ("200", "198", "0")


def test_the_workbench_counts_both_stopped_replays_as_careful_score_does(tmp_path: Path) -> None:
    """The workbench's Home lists the replays the budget stopped from the score lines, also
    the one whose bfcl verdict came first (its error type is bfcl's; before, only the other
    was counted), in careful score's words."""
    from careful_engine import browse
    from careful_engine.scoring.score import load_effects

    other, stopped, after = _stopped_entries()
    run = _write_run(tmp_path, [stopped, after])
    res = runner.invoke(app, ["score", str(run), "--decoder", demo.DECODER, "--out",
                              str(run / browse.SCORE_DIR), "--jobs", "1"])
    assert res.exit_code == 1, res.output
    said = {p.split("]: ", 1)[1] for p in " ".join(res.output.split()).split(" - ")
            if "replay stopped" in p}
    from careful_engine.scoring.decoders import DecoderChoice

    (ref,) = browse.find_runs([run], DecoderChoice(default=demo.DECODER))
    browser = browse.RunBrowser(ref, load_effects(), cache_dir=tmp_path / "c")
    assert browser.scored, browser.mismatch
    found = {p.id: p.message for p in browser.budget_stopped()}
    assert set(found) == {other, MATH}
    assert "bfcl's verdict reached before it (empty turn) stands" in found[MATH]
    assert said and all(any(r.startswith(w[:60]) for w in said) for r in found.values()), said


def test_a_stopped_replay_has_no_blame_and_a_line_like_every_other(tmp_path: Path) -> None:
    """A conversation the budget stopped carried a blame computed on the part that ran, and
    its conversations.jsonl line lacked keys a replayed line has (hits, surplus, tokens). It
    has no blame now (null, as its rules), in the line and in the workbench's stepper, and
    every line under the rules has the same keys, null where nothing was measured (an
    inference error, which keeps its blame of the calls not made, and a missing entry too);
    the workbench reads every line back, and its totals are score's."""
    import csv
    from dataclasses import replace

    from careful_engine import browse
    from careful_engine.scoring.result import ConversationResult
    from careful_engine.scoring.rules import coverage
    from careful_engine.scoring.score import CategoryScore, load_effects

    other, stopped, after = _stopped_entries()
    errored, missing = "multi_turn_base_2", "multi_turn_base_3"
    run = _write_run(tmp_path, [stopped, after, {"id": errored, "result": "Error: boom"}])
    path = run / "hostile-model" / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json"
    path.write_text("".join(x + "\n" for x in path.read_text().splitlines()
                            if json.loads(x)["id"] != missing))
    out = run / browse.SCORE_DIR
    res = runner.invoke(app, ["score", str(run), "--decoder", demo.DECODER, "--out", str(out),
                              "--jobs", "1"])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "no rule counts or blame" in " ".join(res.output.split())
    lines = {r["id"]: r for r in map(json.loads, (out / "conversations.jsonl")
                                     .read_text().splitlines())}
    assert lines[other]["official_error_type"] == BUDGET_EXCEEDED
    assert lines[MATH]["official_error_type"] == "multi_turn:empty_turn_model_response"
    assert len({tuple(line) for line in lines.values()}) == 1  # one key set, in one order
    for i in (other, MATH, errored, missing):
        got = lines[i]
        assert got["rules"] is None and got["safe_valid"] is False, i
        assert all(got[k] is None for k in ("hits", "model_steps", "surplus_steps",
                                            "surplus_calls", "output_tokens", "input_tokens",
                                            "no_call_turns", "user_answers", "safe_rule")), i
        assert type(got["reference_destructive_calls"]) is int, i
    assert lines[other]["blame"] is None and lines[MATH]["blame"] is None
    assert lines[missing]["blame"] is None and lines[errored]["blame"] is not None
    assert all(r["blame"] is None for r in lines.values() if r["official_valid"])
    assert all(r["hits"] is not None for i, r in lines.items()
               if i not in (other, MATH, errored, missing))

    # the workbench: every line read back, the score rebuilt with score's totals, and the
    # stepper blames as score does (nothing for a stopped replay)
    problems: list = []
    rows = browse.read_scores(out / "conversations.jsonl", "hostile-model", problems)
    assert not problems and set(rows) == set(lines)
    results = [ConversationResult.from_json(rows[c.id]) for c in bfcl.conversations(CATEGORY)]
    totals = CategoryScore("hostile-model", CATEGORY, results).rule_totals()
    row = next(csv.DictReader((out / "rules.csv").open()))
    assert coverage(totals) == (int(row["replayed"]), int(row["conversations"])) == (196, 200)
    assert str(totals["failed"]) == row["failed"]
    (ref,) = browse.find_runs([run])
    stepper = browse.RunBrowser(replace(ref, decoder=demo.DECODER), load_effects())
    assert stepper.open(other).blame is None and stepper.open(MATH).blame is None
    assert stepper.open(errored).blame is not None
