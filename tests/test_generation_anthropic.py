"""The Anthropic path against a local server speaking the Messages API wire format.

Request shape (no temperature, an explicit output limit, bfcl's caching markers), token
logging (full prompt, cache reads and writes), bounded retries of 429 / 529 / 500 with
retry-after, the spend guard (before every attempt, retries and threads included), and a run
killed with SIGKILL that resumes losing and duplicating nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.generation import RunOptions, anthropic_backend, generate
from careful_engine.generation.results import LEDGER
from careful_engine.generation.retry import MAX_ANSWER_CHARS
from careful_engine.generation.spend import (
    SpendGuard,
    conservative_cost,
    ledger_totals,
    load_prices,
    read_ledger,
    usage_volume,
)
from tests.fakes import scenarios
from tests.fakes.anthropic_server import FakeMessagesServer, Reply, error_reply, message, usage
from tests.fakes.scripted_model import anthropic_responder

_load()
cli = CliRunner()
KEY = "claude-haiku-4-5-20251001-FC"
REPO = Path(__file__).resolve().parent.parent
HAIKU = load_prices().get("claude-haiku-4-5")


def _fast(max_attempts: int = 4) -> anthropic_backend.RetryPolicy:
    return anthropic_backend.RetryPolicy(max_attempts=max_attempts, max_wait=0.05,
                                         base_wait=0.001)


def _handler(url: str, guard: SpendGuard | None = None, policy=None, max_tokens: int = 4096):
    return anthropic_backend.build(KEY, base_url=url, api_key="test", guard=guard,
                                   policy=policy or _fast(), max_output_tokens=max_tokens)


def _options(run_dir: Path, ids: list[str], condition: str = "standard", threads: int = 1):
    return RunOptions(model=KEY, run_dir=run_dir, backend="anthropic", condition=condition,
                      ids=ids, threads=threads)


def _results(run_dir: Path) -> list[dict]:
    folder = run_dir / KEY / "multi_turn"
    return [json.loads(line) for p in sorted(folder.glob("*_result.json"))
            for line in p.read_text().splitlines()]


def _realistic_usage(body: dict) -> dict:
    """A prompt of a quarter token per byte, mostly read from the cache (a bound the guard's
    one-token-per-byte estimate always covers)."""
    prompt = len(json.dumps(body)) // 4
    return usage(input_tokens=prompt // 10, cache_read_input_tokens=prompt - prompt // 5,
                 cache_creation_input_tokens=prompt - prompt // 10 - (prompt - prompt // 5),
                 output_tokens=300)


def test_request_shape_and_full_prompt_tokens(tmp_path):
    script = scenarios.script()
    cache = usage(input_tokens=20, output_tokens=7, cache_read_input_tokens=300,
                  cache_creation_input_tokens=50)
    with FakeMessagesServer(responder=anthropic_responder(script, lambda b: cache)) as s:
        report = generate(_options(tmp_path / "r", ["multi_turn_base_0"]),
                          _handler(s.url, max_tokens=1234))
        bodies = [r.body for r in s.messages_requests()]
    assert report.status == "complete"
    for body in bodies:
        assert "temperature" not in body
        assert body["max_tokens"] == 1234
        assert body["model"] == "claude-haiku-4-5-20251001"
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert all("cache_control" not in t for t in body["tools"][:-1])
        users = [m for m in body["messages"] if m["role"] == "user"]
        marked = [m for m in users if "cache_control" in m["content"][0]]
        assert marked == users[-2:]
        assert "system" not in body
    (entry,) = _results(tmp_path / "r")
    steps = [n for turn in entry["input_token_count"] for n in turn]
    assert steps and set(steps) == {370}  # input + cache reads + cache writes
    assert {n for t in entry["cache_read_input_token_count"] for n in t} == {300}
    assert {n for t in entry["cache_creation_input_token_count"] for n in t} == {50}
    assert [len(t) for t in entry["cache_read_input_token_count"]] == \
        [len(t) for t in entry["input_token_count"]]


def test_retries_honour_retry_after_and_cost_nothing(tmp_path):
    waits: list[float] = []
    policy = anthropic_backend.RetryPolicy(max_attempts=5, max_wait=0.05, base_wait=0.001,
                                           sleep=waits.append)
    guard = SpendGuard(1.0, HAIKU, tmp_path / "ledger.jsonl")
    with FakeMessagesServer(responder=anthropic_responder(scenarios.script())) as s:
        s.enqueue(error_reply(429, retry_after=0.01), error_reply(529, retry_after=3),
                  error_reply(500))
        report = generate(_options(tmp_path / "r", ["multi_turn_base_0"]),
                          _handler(s.url, guard, policy), guard=guard)
        sent = len(s.messages_requests())
    assert report.status == "complete"
    assert waits == [0.01, 0.05, 0.004]  # retry-after, capped, then exponential
    ledger = read_ledger(tmp_path / "ledger.jsonl")
    assert [r["status"] for r in ledger[:8]] == ["sent", "http 429", "sent", "http 529",
                                                 "sent", "http 500", "sent", "ok"]
    assert all(r["conservative_usd"] == 0 for r in ledger if r["status"].startswith("http"))
    assert sum(r["status"] == "sent" for r in ledger) == sent  # the SDK retried nothing itself


def _failing_on(entry_id: str, script, reply):
    inner = anthropic_responder(script)

    def respond(req):
        first = req.body["messages"][0]["content"]
        if script.identify(first[0]["text"] if isinstance(first, list) else first) == entry_id:
            return reply()
        return inner(req)

    return respond


def test_api_unavailable_stops_resumably(tmp_path):
    run_dir = tmp_path / "r"
    script = scenarios.script()
    responder = _failing_on("multi_turn_base_4", script,
                            lambda: error_reply(529, retry_after=0))
    with FakeMessagesServer(responder=responder) as s:
        report = generate(_options(run_dir, scenarios.IDS), _handler(s.url, policy=_fast(3)))
    assert report.status == "stopped" and "ApiUnavailable" in report.stop_reason
    assert [e["id"] for e in _results(run_dir)] == ["multi_turn_base_0"]
    manifest = json.loads((run_dir / KEY / "careful_run.json").read_text())
    assert manifest["status"] == "stopped"
    with FakeMessagesServer(responder=anthropic_responder(script)) as s:
        report = generate(_options(run_dir, scenarios.IDS), _handler(s.url))
        firsts = {r.body["messages"][0]["content"][0]["text"] for r in s.messages_requests()}
    assert report.status == "complete" and report.already == 1 and report.generated == 2
    assert "multi_turn_base_0" not in {script.identify(f) for f in firsts}
    ids = [e["id"] for e in _results(run_dir)]
    assert sorted(ids) == sorted(scenarios.IDS) and len(ids) == len(set(ids))


def test_fatal_errors_stop_at_once(tmp_path):
    with FakeMessagesServer() as s:
        s.enqueue(error_reply(401, "invalid x-api-key"))
        report = generate(_options(tmp_path / "r", ["multi_turn_base_0"]), _handler(s.url))
        assert len(s.messages_requests()) == 1
    # the endpoint refused the only attempt and nothing was written: the run failed
    assert report.status == "failed" and "FatalApiError" in report.stop_reason
    assert _results(tmp_path / "r") == []


def test_a_bad_request_is_an_inference_error_as_in_bfcl(tmp_path):
    with FakeMessagesServer() as s:
        s.enqueue(error_reply(400, "prompt is too long"))
        report = generate(_options(tmp_path / "r", ["multi_turn_base_0"]), _handler(s.url))
    assert report.status == "complete"
    (entry,) = _results(tmp_path / "r")
    assert entry["result"].startswith("Error during inference:") and "traceback" in entry


def _lister(req) -> Reply:
    """Any conversation: list the directory, then say done (two requests per turn)."""
    body = req.body
    last = body["messages"][-1]
    u = _realistic_usage(body)
    if any(b.get("type") == "tool_result" for b in last["content"]):
        return Reply(200, message([{"type": "text", "text": "Done."}], usage_=u))
    return Reply(200, message([{"type": "tool_use", "id": f"toolu_{len(body['messages'])}",
                                "name": "ls", "input": {"a": True}}],
                              stop_reason="tool_use", usage_=u))


@pytest.mark.parametrize(("threads", "budget"), [(1, 0.2), (3, 0.4)])
def test_spend_guard_stops_before_the_budget_under_retries(tmp_path, threads, budget):
    run_dir = tmp_path / "r"
    ids = [f"multi_turn_base_{i}" for i in range(8)]
    calls = {"n": 0}
    lock = threading.Lock()

    def flaky(req):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n % 4 == 0:
            return error_reply(429 if n % 8 else 529, retry_after=0)
        if n % 7 == 0:
            return error_reply(500)
        return _lister(req)

    ledger = run_dir / KEY / LEDGER
    guard = SpendGuard.resume(budget, HAIKU, ledger)
    with FakeMessagesServer(responder=flaky) as s:
        # the failures follow a counter shared by the threads, so one conversation may meet
        # several in a row: enough attempts that only the budget can stop the run
        report = generate(_options(run_dir, ids, threads=threads),
                          _handler(s.url, guard, policy=_fast(16)), guard=guard)
    assert report.status == "stopped" and "BudgetExhausted" in report.stop_reason
    records = read_ledger(ledger)
    sent = [r for r in records if r["status"] == "sent"]
    statuses = {r["status"] for r in records}
    assert {"http 429", "http 529", "http 500"} <= statuses  # retries happened
    assert len(sent) > 10
    for r in sent:  # checked before every attempt, retries included
        assert r["spent_before_usd"] + r["worst_usd"] <= budget + 1e-12
    refused = [r for r in records if r["status"] == "refused"]
    assert refused and refused[0]["spent_before_usd"] + refused[0]["worst_usd"] > budget
    spent, _ = ledger_totals(ledger)
    assert 0 < spent <= budget
    manifest = json.loads((run_dir / KEY / "careful_run.json").read_text())
    assert manifest["status"] == "stopped"
    assert manifest["spend"]["conservative_usd"] == pytest.approx(spent, abs=1e-6)
    requests = manifest["spend"]["requests"]  # every request the ledger records, by outcome
    assert sum(n for k, n in requests.items() if k != "refused") == len(sent)
    assert requests["refused"] == len(refused)
    assert requests["failed"] == sum(r["status"].startswith("http") for r in records)
    assert requests["answered"] == sum(r["status"] == "ok" for r in records)
    written = [e["id"] for e in _results(run_dir)]
    assert 0 < len(written) < len(ids)
    # resume with a larger budget: the spend so far counts, the rest completes
    guard = SpendGuard.resume(2.0, HAIKU, ledger)
    assert guard.spent == pytest.approx(spent)
    with FakeMessagesServer(responder=_lister) as s:
        report = generate(_options(run_dir, ids, threads=threads),
                          _handler(s.url, guard), guard=guard)
    assert report.status == "complete" and report.already == len(written)
    got = [e["id"] for e in _results(run_dir)]
    assert sorted(got) == sorted(ids) and len(got) == len(set(got))


def test_cli_needs_a_budget_and_a_key(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    args = ["generate", "--model", KEY, "--run", "x", "--runs-dir", str(tmp_path),
            "--limit", "1", "--categories", "base"]
    res = cli.invoke(app, args)
    assert res.exit_code == 2 and "--budget" in res.output
    res = cli.invoke(app, [*args, "--budget", "1"])
    assert res.exit_code == 2 and "ANTHROPIC_API_KEY" in res.output


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path, monkeypatch):
    """SIGKILL the generating process while a request is in flight, then resume."""
    script = scenarios.script()
    inner = anthropic_responder(script, _realistic_usage)
    reached, release = threading.Event(), threading.Event()
    count = {"n": 0}

    def holding(req):
        count["n"] += 1
        if count["n"] == 18:  # inside the second conversation
            reached.set()
            release.wait(30)
        return inner(req)

    run_dir = tmp_path / "runs" / "killed"
    args = ["generate", "--model", KEY, "--condition", "confirm", "--ids",
            ",".join(scenarios.IDS), "--run", "killed", "--runs-dir", str(tmp_path / "runs"),
            "--budget", "5"]
    with FakeMessagesServer(responder=holding) as s:
        env = {**os.environ, "ANTHROPIC_API_KEY": "test-key"}
        proc = subprocess.Popen(
            [sys.executable, "-c", "from careful_cli import main; main()", *args,
             "--base-url", s.url], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            assert reached.wait(60), "the child never reached the 18th request"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == -signal.SIGKILL
    before = _results(run_dir)
    assert [e["id"] for e in before] == ["multi_turn_base_0"]
    spent_before, _ = ledger_totals(run_dir / KEY / LEDGER)  # the lost request at worst case
    records = read_ledger(run_dir / KEY / LEDGER)
    sent = {r["request"] for r in records if r["status"] == "sent"}
    answered = {r["request"] for r in records if r["status"] != "sent"}
    assert len(sent) == 18 and len(sent - answered) == 1  # the one in flight when killed

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with FakeMessagesServer(responder=inner) as s:
        res = cli.invoke(app, [*args, "--base-url", s.url], catch_exceptions=False)
        resent = {script.identify(r.body["messages"][0]["content"][0]["text"])
                  for r in s.messages_requests()}
    assert res.exit_code == 0, res.output
    assert "resuming: 1 conversation(s) already written" in res.output
    assert resent == {"multi_turn_base_4", "multi_turn_miss_param_1"}
    after = _results(run_dir)
    ids = [e["id"] for e in after]
    assert sorted(ids) == sorted(scenarios.IDS) and len(ids) == len(set(ids))
    assert after[[e["id"] for e in after].index("multi_turn_base_0")] == before[0]
    for e in after:
        got = {t: [(a["step"], a["answer"]) for a in v]
               for t, v in e["careful_user_answers"].items()}
        assert got == scenarios.EXPECTED_ANSWERS[e["id"]]
    manifest = json.loads((run_dir / KEY / "careful_run.json").read_text())
    assert manifest["status"] == "complete" and len(manifest["sessions"]) == 2
    assert manifest["spend"]["conservative_usd"] > spent_before > 0
    # the request lost to the kill is charged its worst case, and counted as such
    records = read_ledger(run_dir / KEY / LEDGER)
    n_sent = sum(r["status"] == "sent" for r in records)
    assert manifest["spend"]["requests"]["worst case"] == 1
    assert f"over {n_sent} requests sent ({n_sent - 1} answered, 1 worst case)" in \
        " ".join(res.output.split())
    assert "model responses" in res.output


def test_prompting_mode_through_the_claude_handler(tmp_path):
    """bfcl's Claude handler without FC: system prompt cached, answers appended as user text."""
    texts = ["Which directory do you mean?", "[ls(a=True)]"]

    def respond(req):
        k = sum(1 for m in req.body["messages"] if m["role"] == "assistant")
        return texts[k] if k < len(texts) else "Done."

    key = "claude-haiku-4-5-20251001"
    with FakeMessagesServer(responder=respond) as s:
        handler = anthropic_backend.build(key, base_url=s.url, api_key="test", policy=_fast())
        options = RunOptions(model=key, run_dir=tmp_path / "r", backend="anthropic",
                             condition="confirm", ids=["multi_turn_base_1"])
        assert generate(options, handler).status == "complete"
        bodies = [r.body for r in s.messages_requests()]
    for body in bodies:
        assert "temperature" not in body and "tools" not in body
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert "ls" in body["system"][0]["text"]
    second = bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    entry = json.loads(next((tmp_path / "r").rglob("*_result.json")).read_text())
    (answer,) = entry["careful_user_answers"]["0"]
    assert answer["answer"] == "restate" and answer["exit"] == "decode_error"
    assert second[2]["content"][0]["text"] == answer["message"]
    assert entry["result"][0] == ["Which directory do you mean?", "[ls(a=True)]", "Done."]


@pytest.mark.parametrize("output_tokens", [10, 5_000_000])
def test_an_oversized_answer_is_an_inference_error_and_its_tokens_count(tmp_path,
                                                                       output_tokens):
    """One conversation answered with more text than an answer may have: its line is an
    inference error that says why, the others are generated; every oversized attempt is
    charged the more of its worst case and the usage it reports (the guard counts reported
    usage for every other answer), and the manifest's spend is the ledger's."""
    run_dir = tmp_path / "r"
    script = scenarios.script()
    reported = usage(input_tokens=100, output_tokens=output_tokens)
    big = Reply(200, message([{"type": "text", "text": "x" * (MAX_ANSWER_CHARS + 1)}],
                             usage_=reported))
    ledger = run_dir / KEY / LEDGER
    guard = SpendGuard.resume(200.0, HAIKU, ledger)
    with FakeMessagesServer(responder=_failing_on("multi_turn_base_4", script,
                                                  lambda: big)) as s:
        report = generate(_options(run_dir, scenarios.IDS),
                          _handler(s.url, guard, policy=_fast(3)), guard=guard)
    assert report.status == "complete" and report.generated == 3, report.stop_reason
    entries = {e["id"]: e for e in _results(run_dir)}
    assert sorted(entries) == sorted(scenarios.IDS)
    error = entries.pop("multi_turn_base_4")["result"]
    assert error.startswith("Error during inference: ") and \
        f"the answer has more than {MAX_ANSWER_CHARS:,} characters" in error
    assert all(isinstance(e["result"], list) for e in entries.values())
    records = read_ledger(ledger)
    oversized = [r for r in records if r["status"] == "unknown: malformed answer"]
    assert len(oversized) == 3  # every attempt of its first request
    cost = conservative_cost(usage_volume(reported), HAIKU)
    for r in oversized:
        assert r["conservative_usd"] == pytest.approx(max(r["worst_usd"], cost))
    assert (cost > oversized[0]["worst_usd"]) == (output_tokens > 4096)
    manifest = json.loads((run_dir / KEY / "careful_run.json").read_text())
    spent, _ = ledger_totals(ledger)
    assert manifest["spend"]["conservative_usd"] == pytest.approx(spent, abs=1e-6)
    assert manifest["status"] == "complete" and manifest["inference_errors"] == 1


def _ledger_run(tmp_path: Path, ledger_text: str, monkeypatch):
    """``careful generate`` of one conversation into a run whose ledger holds
    ``ledger_text``: (result, requests the server got, the ledger's path)."""
    ledger = tmp_path / "runs" / "r" / KEY / LEDGER
    ledger.parent.mkdir(parents=True)
    ledger.write_text(ledger_text)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with FakeMessagesServer(responder=lambda r: Reply(200, message(
            [{"type": "text", "text": "Done."}]))) as s:
        res = cli.invoke(app, ["generate", "--model", KEY, "--run", "r", "--runs-dir",
                               str(tmp_path / "runs"), "--ids", "multi_turn_base_0",
                               "--budget", "5", "--base-url", s.url], catch_exceptions=False)
        return res, len(s.messages_requests()), ledger


SENT = json.dumps({"status": "sent", "request": "a", "worst_usd": 0.5})
OK = json.dumps({"status": "ok", "request": "a", "worst_usd": 0.5, "conservative_usd": 0.25,
                 "list_usd": 0.2})


def test_a_torn_last_ledger_line_is_cut_and_said_before_appending(tmp_path, monkeypatch):
    """A ledger whose last line a kill cut short: the line is cut off (said), and the next
    records start lines of their own, every one of them read back."""
    res, requests, ledger = _ledger_run(tmp_path, f"{SENT}\n{OK}\n{SENT[:20]}", monkeypatch)
    assert res.exit_code == 0, res.output
    assert requests > 0
    assert f"{LEDGER}: dropped a last line cut short (20 bytes)" in res.output
    skipped: list[int] = []
    records = read_ledger(ledger, skipped)
    assert skipped == [] and ledger.read_text().endswith("\n")
    assert len(records) == 2 + 2 * requests and records[:2] == [json.loads(SENT), json.loads(OK)]
    assert ledger_totals(ledger)[0] >= 0.25


@pytest.mark.parametrize("bad", ["{not json", '{"status": "ok", "conservative_usd": 3'])
def test_an_unreadable_ledger_line_is_named_and_the_run_not_resumed(tmp_path, monkeypatch,
                                                                   bad):
    """A line in the middle of the ledger that cannot be read may have held an amount: the
    guard never counts less than was spent, so nothing is sent; the line is named."""
    res, requests, ledger = _ledger_run(tmp_path, f"{SENT}\n{bad}\n{OK}\n", monkeypatch)
    assert res.exit_code == 2, res.output
    assert requests == 0
    text = " ".join(res.output.split())
    assert f"{LEDGER}:2: not a ledger record" in text and "not resumed" in text, text


def test_ledger_lines_past_the_parse_budget_stop_the_resume(tmp_path, monkeypatch):
    from careful_engine.core import runs

    monkeypatch.setattr(runs, "MAX_KEPT_BYTES", runs.parsed_bound(SENT) + 1)
    res, requests, _ = _ledger_run(tmp_path, f"{SENT}\n{OK}\n", monkeypatch)
    assert res.exit_code == 2 and requests == 0, res.output
    text = " ".join(res.output.split())
    assert f"{LEDGER}:2: line 2 and the lines after it" in text and "not resumed" in text


TOOL = {"name": "cd", "description": "", "input_schema": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(("block", "says"), [
    ({"type": "tool_use", "name": "\x1b[31mrm", "input": "notadict", "id": 5}, "id is not text"),
    ({"type": "tool_use", "name": "\x1b[31mrm", "input": {}, "id": "t1"}, "no tool offered"),
    ({"type": "tool_use", "name": "rm", "input": {}, "id": "t1"}, "no tool offered ('rm')"),
    ({"type": "tool_use", "name": 7, "input": {}, "id": "t1"}, "no tool offered (not text)"),
    ({"type": "tool_use", "name": "cd", "input": "notadict", "id": "t1"}, "not an object"),
    ({"type": "tool_use", "name": "cd", "input": [], "id": "t1"}, "not an object"),
    ({"type": "text", "text": 5}, "a text block holds an int, not text"),
    ({"type": "image"}, "a content block of type 'image'"),
    ({"text": "no type"}, "without a type"),
])
def test_a_malformed_content_block_is_a_malformed_answer(tmp_path, block, says):
    """Every content block is checked: a tool call must name a tool offered, with a text id
    and an object as input; anything else is a malformed answer, retried and charged."""
    guard = SpendGuard(5.0, HAIKU, tmp_path / "m" / LEDGER)
    with FakeMessagesServer(responder=lambda r: Reply(200, message([block]))) as s:
        requester = anthropic_backend.Requester(_handler(s.url).client, guard, _fast(2))
        with pytest.raises(anthropic_backend.ApiUnavailable) as e:
            requester.create({"model": "m", "max_tokens": 3, "tools": [TOOL],
                              "messages": [{"role": "user", "content": "x"}]})
        assert len(s.messages_requests()) == 2
    assert "malformed answer: " in str(e.value) and says in str(e.value)
    assert "\x1b" not in str(e.value)
    assert guard.spent > 0 and guard.reserved == pytest.approx(0)
    # the same tool call of a tool offered is an answer
    good = {"type": "tool_use", "name": "cd", "input": {"folder": "x"}, "id": "t1"}
    with FakeMessagesServer(responder=lambda r: Reply(200, message([good]))) as s:
        requester = anthropic_backend.Requester(_handler(s.url).client, None, _fast(2))
        response, _ = requester.create({"model": "m", "max_tokens": 3, "tools": [TOOL],
                                        "messages": [{"role": "user", "content": "x"}]})
    assert response.content[0].name == "cd"


def test_a_malformed_tool_call_through_the_cli_writes_no_call(tmp_path, monkeypatch):
    bad = {"type": "tool_use", "name": "\x1b[31mrm", "input": "notadict", "id": 5}
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with FakeMessagesServer(responder=lambda r: Reply(200, message([bad], stop_reason="tool_use"))
                            ) as s:
        res = cli.invoke(app, ["generate", "--model", KEY, "--run", "r", "--runs-dir",
                               str(tmp_path), "--ids", "multi_turn_base_0", "--budget", "5",
                               "--base-url", s.url, "--max-attempts", "2", "--max-wait",
                               "0.01"], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    assert "malformed answer: a tool_use block whose id is not text" in res.output
    assert "\x1b" not in res.output and _results(tmp_path / "r") == []


def test_the_prompt_estimate_of_a_malformed_block_warns_nothing():
    """A block whose fields are not of their declared types (as the SDK builds it from an
    endpoint's answer) is serialized for the estimate without pydantic's warning."""
    import warnings

    from anthropic.types import ToolUseBlock

    from careful_engine.generation.spend import estimate_prompt_tokens

    block = ToolUseBlock.model_construct(type="tool_use", id=5, name="x", input="notadict")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert estimate_prompt_tokens({"messages": [{"role": "assistant",
                                                     "content": [block]}]}) > 0


@pytest.mark.parametrize("worst", ['"abc"', "-1", "1e300", "null"])
def test_a_sent_request_without_a_readable_worst_case_stops_the_resume(tmp_path, monkeypatch,
                                                                       worst):
    """A ``sent`` line whose worst case is not an amount (and no final line for it) was
    counted as $0: the guard resumed from less than could have been spent. Its line is now
    a problem: the run is not resumed, and `careful cost` lists it."""
    from careful_engine.generation.spend import ledger_summary

    sent = json.loads(SENT)
    sent.update(request="lost-1", worst_usd=json.loads(worst))
    res, requests, ledger = _ledger_run(tmp_path, f"{SENT}\n{OK}\n{json.dumps(sent)}\n",
                                        monkeypatch)
    assert res.exit_code == 2 and requests == 0, res.output
    text = " ".join(res.output.split())
    assert "[lost-1]: a sent request's worst_usd is" in text and "not resumed" in text, text
    assert len(ledger_summary(ledger).problems) == 1


def test_a_sent_request_whose_cost_a_final_line_gives_is_counted(tmp_path: Path) -> None:
    """A sent line without a readable worst case is no problem where its final line says what
    the request cost: counted at that amount (the guard refused to resume over it); without
    such an amount it is one."""
    from careful_engine.generation.spend import ledger_summary

    ledger = tmp_path / "ledger.jsonl"
    sent = json.dumps({"status": "sent", "request": "r1", "worst_usd": "abc"})
    ledger.write_text(sent + "\n" + json.dumps({"status": "ok", "request": "r1",
                                                 "conservative_usd": 0.25}) + "\n")
    ok = ledger_summary(ledger)
    assert ok.problems == [] and ok.spent == 0.25
    ledger.write_text(sent + "\n" + json.dumps({"status": "ok", "request": "r1",
                                                 "conservative_usd": "x"}) + "\n")
    lost = ledger_summary(ledger)
    assert len(lost.problems) == 1 and "no line says what it cost" in lost.problems[0].message
