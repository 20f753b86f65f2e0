"""Generation limits against hostile endpoints (loopback fakes), in seconds each.

Every request attempt is bounded (connect timeout, total deadline, size cap), so an endless
or trickling answer becomes a retryable failure and the run stops as "unavailable" after its
attempts; a refused connection stops at once; a run in which every attempt failed ends
"failed" with a non-zero exit; the manifest's spend is the ledger's; ``--budget`` is finite
and positive; ``--run`` is a plain name and no write follows a planted link.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc

import anthropic
import openai
import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl, bounded_http
from careful_engine.generation import (
    ApiUnavailable,
    GenerationError,
    RunOptions,
    anthropic_backend,
    generate,
    vllm_backend,
)
from careful_engine.generation.files import UnsafePath, atomic_write, open_append, run_folder
from careful_engine.generation.retry import MAX_ANSWER_CHARS, RetryPolicy
from careful_engine.generation.spend import SpendGuard, ledger_totals, load_prices
from tests.fakes.anthropic_server import FakeMessagesServer, Reply, message, usage
from tests.fakes.hostile_server import HostileServer, refused_url
from tests.fakes.openai_server import FakeCompletionsServer

_load()
cli = CliRunner()
QWEN = "Qwen/Qwen3-0.6B"
CLAUDE = "claude-haiku-4-5-20251001-FC"
LIMITS = bounded_http.Limits(connect=0.5, total=1.5, max_bytes=256 * 1024)
FAST = RetryPolicy(max_attempts=2, max_wait=0.0, base_wait=0.0)

# behaviour, options, what a request ends in
HOSTILE = [
    ("stall", {}, "timeout"),
    ("trickle-body", {"interval": 0.3}, "timeout"),
    ("trickle-headers", {"interval": 0.1}, "timeout"),
    ("endless", {}, "too large"),
    ("endless-chunked", {}, "too large"),
    ("huge-header", {}, "protocol"),
    ("close", {}, "connection"),
    ("reset", {}, "connection"),
    ("garbage", {}, "protocol"),
    ("not-json", {}, "malformed"),
    ("wrong-json", {"body": {"foo": 1}}, "malformed"),
    ("wrong-json", {"body": [1, 2]}, "malformed"),
    ("wrong-json", {"body": None}, "malformed"),
    ("wrong-json", {"body": {"choices": [{"text": 5}], "usage": {}}}, "malformed"),
    ("wrong-json", {"body": {"content": [], "usage": {"input_tokens": "9",
                                                      "output_tokens": -1}}}, "malformed"),
    ("gzip-bomb", {}, "compressed"),
    ("bad-length", {}, "connection"),
    ("redirect", {}, "http"),
    ("status", {"status": 500}, "http"),
    ("status", {"status": 503, "headers": {"retry-after": "99999"}}, "http"),
    ("status", {"status": 429, "headers": {"retry-after": "nan"}}, "http"),
]


def _ids(case) -> str:
    return f"{case[0]}-{HOSTILE.index(case)}"


def _openai(url: str) -> vllm_backend.GuardedCompletions:
    return vllm_backend.GuardedCompletions(
        openai.OpenAI(base_url=url, api_key="x", max_retries=0,
                      http_client=bounded_http.client(LIMITS)), FAST)


def _requester(url: str, guard: SpendGuard | None = None) -> anthropic_backend.Requester:
    client = anthropic.Anthropic(api_key="x", base_url=url, max_retries=0,
                                 http_client=bounded_http.client(LIMITS))
    return anthropic_backend.Requester(client, guard, FAST)


@pytest.mark.parametrize("case", HOSTILE, ids=_ids)
def test_each_hostile_answer_is_a_bounded_retryable_failure(case, tmp_path):
    behaviour, kw, _ = case
    price = load_prices().get("claude-haiku-4-5")
    guard = SpendGuard(5.0, price, tmp_path / "m" / "ledger.jsonl")
    tracemalloc.start()
    try:
        with HostileServer(behaviour, **kw) as s:
            for name, call in (
                    ("openai", lambda: _openai(s.url).create(
                        model="m", prompt="x", max_tokens=3, timeout=72000)),
                    ("anthropic", lambda: _requester(s.root, guard).create(
                        {"model": "m", "max_tokens": 3,
                         "messages": [{"role": "user", "content": "x"}]}))):
                start = time.monotonic()
                with pytest.raises(ApiUnavailable, match="2 attempts failed"):
                    call()
                took = time.monotonic() - start
                # two attempts, each within the request deadline (plus scheduling slack)
                assert took < 2 * LIMITS.total + 2.0, (name, took)
            assert len(s.requests) >= 4  # both clients tried twice: retried, not hung
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 * LIMITS.max_bytes  # nothing close to an endless body was held
    # the guard's spend is the ledger's, whatever the endpoint did
    spent, _ = ledger_totals(guard.ledger)
    assert spent == pytest.approx(guard.spent) and guard.reserved == pytest.approx(0)


def test_a_trickle_of_one_byte_every_two_seconds_ends_at_the_deadline():
    limits = bounded_http.Limits(connect=0.5, total=3.0, max_bytes=1024)
    with HostileServer("trickle-body", interval=2.0) as s:
        client = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0,
                               http_client=bounded_http.client(limits))
        start = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            client.completions.create(model="m", prompt="x", max_tokens=3, timeout=72000)
        took = time.monotonic() - start
    assert 2.9 < took < 4.0  # bytes kept arriving: only the total deadline ends it


def test_a_refused_connection_stops_at_once(tmp_path):
    url = refused_url()
    slow = RetryPolicy(max_attempts=8, base_wait=30.0)  # would take minutes if retried
    start = time.monotonic()
    with pytest.raises(ApiUnavailable, match="endpoint unavailable.*connection refused"):
        vllm_backend.GuardedCompletions(openai.OpenAI(
            base_url=url, api_key="x", max_retries=0,
            http_client=bounded_http.client(LIMITS)), slow).create(model="m", prompt="x",
                                                               max_tokens=1)
    guard = SpendGuard(1.0, load_prices().get("claude-haiku-4-5"), tmp_path / "l.jsonl")
    with pytest.raises(ApiUnavailable, match="endpoint unavailable.*connection refused"):
        anthropic_backend.Requester(anthropic.Anthropic(
            api_key="x", base_url=url[:-3], max_retries=0,
            http_client=bounded_http.client(LIMITS)), guard, slow).create(
            {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]})
    assert time.monotonic() - start < 2.0
    assert guard.spent == 0 and ledger_totals(guard.ledger) == (0, 0)  # nothing was sent


def _gen(tmp_path, *args: str):
    return cli.invoke(app, ["generate", "--runs-dir", str(tmp_path), "--max-attempts", "2",
                            "--max-wait", "0", "--request-timeout", "1.5",
                            "--connect-timeout", "0.5", *args], catch_exceptions=False)


def test_a_dead_vllm_endpoint_fails_quickly(tmp_path):
    start = time.monotonic()
    res = _gen(tmp_path, "--model", QWEN, "--run", "dead", "--endpoint", refused_url(),
               "--tokenizer", "server", "--limit", "1", "--categories", "base",
               "--ready-timeout", "600")
    assert time.monotonic() - start < 5
    assert res.exit_code == 2 and "endpoint unavailable" in res.output


@pytest.mark.parametrize("behaviour", ["stall", "trickle-body", "endless", "not-json",
                                       "status"])
def test_a_run_whose_every_attempt_fails_ends_failed(tmp_path, behaviour):
    """The endpoint answers /models and /tokenize, then every completion misbehaves."""
    with HostileServer(behaviour, model=QWEN, interval=0.3) as s:
        start = time.monotonic()
        res = _gen(tmp_path, "--model", QWEN, "--run", "r", "--endpoint", s.url,
                   "--tokenizer", "server", "--limit", "2", "--categories", "base",
                   "--threads", "1")
        took = time.monotonic() - start
    assert took < 10, took
    assert res.exit_code == 2, res.output
    assert "failed" in res.output and "attempts failed" in res.output
    m = json.loads((tmp_path / "r" / "Qwen_Qwen3-0.6B" / "careful_run.json").read_text())
    assert m["status"] == "failed" and "ApiUnavailable" in m["stop_reason"]
    assert m["conversations"] == {"multi_turn_base": {"written": 0}}
    assert m["settings"]["limits"] == {"connect_s": 0.5, "request_s": 1.5,
                                       "max_response_bytes": bounded_http.MAX_RESPONSE_BYTES}


def test_an_endpoint_that_dies_mid_run_stops_resumably(tmp_path):
    with FakeCompletionsServer(QWEN, responder=lambda r: "Done.") as s:
        handler = vllm_backend.build(QWEN, 0.001)
        vllm_backend.attach(handler, s.url, tokenizer_kind="server", limits=LIMITS,
                            policy=FAST)
        guarded = handler.client
        live = guarded.client
        dead = openai.OpenAI(base_url=refused_url(), api_key="x", max_retries=0,
                             http_client=bounded_http.client(LIMITS))
        calls = {"n": 0}

        class Dying:
            def create(self, **kw):
                calls["n"] += 1  # the endpoint goes away after the first conversation
                return (live if calls["n"] <= 4 else dead).completions.create(**kw)

        guarded.client = type("Client", (), {"completions": Dying(),
                                             "base_url": live.base_url})()
        options = RunOptions(model=QWEN, run_dir=tmp_path / "r", backend="vllm",
                             categories=("multi_turn_base",), limit=3)
        start = time.monotonic()
        report = generate(options, handler)
    assert time.monotonic() - start < 10
    assert report.status == "stopped" and report.generated == 1
    assert "endpoint unavailable" in report.stop_reason and calls["n"] == 5


def _garbage_after(n_good: int):
    count = {"n": 0}

    def respond(req):
        count["n"] += 1
        if count["n"] <= n_good:
            return Reply(200, message([{"type": "text", "text": "Done."}],
                                      usage_=usage(input_tokens=100, output_tokens=10)))
        return Reply(200, {"type": "message", "content": "not a list", "usage": "garbage"})

    return respond


def test_manifest_spend_equals_the_ledger_after_garbage_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    with FakeMessagesServer(responder=_garbage_after(4)) as s:  # base_0: 4 one-step turns
        res = _gen(tmp_path, "--model", CLAUDE, "--run", "g", "--budget", "2", "--base-url",
                   s.url, "--limit", "5", "--categories", "base")
    # one conversation written, then three in a row got only garbage: stopped
    assert res.exit_code == 1, res.output
    folder = tmp_path / "g" / CLAUDE
    m = json.loads((folder / "careful_run.json").read_text())
    spent, listed = ledger_totals(folder / "careful_spend.jsonl")
    assert m["status"] == "stopped" and "malformed answer" in m["stop_reason"]
    assert "3 conversations in a row got only malformed answers" in m["stop_reason"]
    assert m["conversations"] == {"multi_turn_base": {"written": 1}}
    assert m["spend"]["conservative_usd"] == round(spent, 6)
    assert m["spend"]["list_usd"] == round(listed, 6)
    garbage = [r for r in map(json.loads, (folder / "careful_spend.jsonl").read_text(
    ).splitlines()) if r["status"] == "unknown: malformed answer"]
    assert len(garbage) == 3 * 2 and all(r["conservative_usd"] == r["worst_usd"] > 0
                                          for r in garbage)  # charged their worst case


@pytest.mark.parametrize("budget", ["nan", "inf", "-inf", "0", "-1", "1e400"])
def test_budget_must_be_finite_and_positive(tmp_path, budget, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    res = _gen(tmp_path, "--model", CLAUDE, "--run", "b", f"--budget={budget}",
               "--base-url", refused_url()[:-3])
    assert res.exit_code == 2 and "--budget must be a finite positive" in res.output
    assert not (tmp_path / "b").exists()
    with pytest.raises(GenerationError):
        SpendGuard(float(budget), load_prices().get("claude-haiku-4-5"))


@pytest.mark.parametrize("value", ["nan", "0", "-3", "inf"])
def test_limits_must_be_finite_and_positive(tmp_path, value):
    res = _gen(tmp_path, "--model", QWEN, "--run", "x", "--endpoint", refused_url(),
               f"--request-timeout={value}")
    assert res.exit_code == 2 and "timeout must be a finite positive" in res.output


@pytest.mark.parametrize("name", ["../x", "..", ".", "", "/tmp/abs", "a/b", "a\\b", " a",
                                  "a\nb", "x" * 300])
def test_run_must_be_a_plain_name(tmp_path, name):
    runs = tmp_path / "runs"
    res = _gen(runs, "--model", QWEN, "--run", name, "--endpoint", refused_url())
    assert res.exit_code == 2 and "plain folder name" in res.output
    assert not (tmp_path / "x").exists() and not runs.exists()
    with pytest.raises(GenerationError):
        run_folder(runs, name)


def test_writes_never_follow_planted_links(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(UnsafePath, match="symbolic link"):
        run_folder(runs, "linked")
    folder = runs / "r" / "Qwen_Qwen3-0.6B"
    (folder / "multi_turn").mkdir(parents=True)
    for name in ("careful_run.json", "generate.log", "careful_spend.jsonl",
                 "multi_turn/BFCL_v4_multi_turn_base_result.json"):
        link = folder / name
        link.symlink_to(victim)
        with pytest.raises(UnsafePath, match="symbolic link"):
            open_append(link)
        with pytest.raises(UnsafePath, match="symbolic link"):
            atomic_write(link, "x")
        link.unlink()
    os.mkfifo(folder / "generate.log")
    with pytest.raises(UnsafePath, match="not a regular file"):
        open_append(folder / "generate.log")  # a FIFO without a reader: refused, no hang
    os.unlink(folder / "generate.log")
    # through the CLI: a planted result-file link is refused before anything is written
    (folder / "multi_turn" / "BFCL_v4_multi_turn_base_result.json").symlink_to(victim)
    with FakeCompletionsServer(QWEN, responder=lambda r: "Done.") as s:
        res = _gen(runs, "--model", QWEN, "--run", "r", "--endpoint", s.url, "--tokenizer",
                   "server", "--limit", "1", "--categories", "base")
    assert res.exit_code == 2 and "symbolic link" in res.output
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("behaviour", ["stall", "trickle-headers", "endless"])
def test_an_endpoint_whose_models_route_misbehaves_is_bounded(tmp_path, behaviour):
    """``--endpoint`` readiness polls and ``/tokenize`` go through the same limits."""
    with HostileServer(behaviour, model=QWEN, break_models=True, interval=0.1) as s:
        start = time.monotonic()
        res = _gen(tmp_path, "--model", QWEN, "--run", "m", "--endpoint", s.url,
                   "--tokenizer", "server", "--limit", "1", "--categories", "base",
                   "--ready-timeout", "2")
        took = time.monotonic() - start
        tokenizer = vllm_backend.ServerTokenizer(s.url, QWEN, LIMITS, FAST)
        with pytest.raises(ApiUnavailable, match="2 attempts failed"):
            tokenizer.tokenize("a b c")
    assert took < 8, took
    assert res.exit_code == 2 and "not ready" in res.output


@pytest.mark.parametrize(("status", "says"), [(404, "answered HTTP 404"),
                                              (401, "answered HTTP 401"),
                                              (503, "not ready after 2 s")])
def test_an_endpoint_without_a_models_route_fails_at_once(tmp_path, status, says):
    """A 4xx on ``/models`` (a wrong path, a refused key) is final for an existing
    ``--endpoint``: no wait changes it (it was waited out for --ready-timeout, 1800 s by
    default); a 5xx may pass (a proxy warming up) and is waited for."""
    with HostileServer("status", status=status, model=QWEN, break_models=True) as s:
        start = time.monotonic()
        res = _gen(tmp_path, "--model", QWEN, "--run", "m", "--endpoint", s.url,
                   "--tokenizer", "server", "--limit", "1", "--categories", "base",
                   "--ready-timeout", "60" if status < 500 else "2")
        took = time.monotonic() - start
    assert res.exit_code == 2 and says in res.output, res.output
    assert took < 8, took


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--endpoint", "x\x1b[31mRED\x1b]0;title\x07"], {}, "--endpoint: 'x\\x1b[31mRED"),
    (["--endpoint", "http://127.0.0.1:notaport/v1"], {}, "is not a valid URL"),
    (["--endpoint", "http://[::1/v1"], {}, "is not a valid URL"),
    (["--endpoint", "ftp://127.0.0.1:1/v1"], {}, "not an http:// or https:// URL"),
    (["--endpoint", "http://127.0.0.1: 1/v1"], {}, "printable ASCII without spaces"),
    (["--model", CLAUDE, "--base-url", "x\x1b[31m"], {}, "--base-url: 'x\\x1b[31m'"),
    (["--model", CLAUDE], {"ANTHROPIC_BASE_URL": "http://127.0.0.1:abc"},
     "ANTHROPIC_BASE_URL: 'http://127.0.0.1:abc' is not a valid URL"),
    ([], {"LOCAL_SERVER_PORT": "abc"}, "LOCAL_SERVER_PORT: 'abc' is not a port number"),
    ([], {"LOCAL_SERVER_PORT": "\uff11\uff10"}, "is not a port number"),
    ([], {"LOCAL_SERVER_PORT": "70000"}, "is not a port number"),
    ([], {"LOCAL_SERVER_ENDPOINT": "a b"}, "LOCAL_SERVER_ENDPOINT (a host name)"),
    (["--limit", "-1"], {}, "--limit"),
    (["--limit", "0"], {}, "--limit"),
    (["--port", "0"], {}, "--port"),
])
def test_endpoints_ports_and_limits_are_checked_before_anything_runs(tmp_path, monkeypatch,
                                                                    args, env, says):
    """A URL or port that a client or bfcl's handler would choke on mid-run (InvalidURL,
    exit 3), with control characters echoed raw, is one error line naming where it came
    from, shown escaped, exit 2; --limit -1 (all but one: entries[:-1]) and 0 are refused."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    model = [] if "--model" in args else ["--model", QWEN]
    res = _gen(tmp_path / "runs", *model, "--run", "e", "--categories", "base", *args)
    assert res.exit_code == 2, res.output
    assert says in res.output and "\x1b" not in res.output and "\x07" not in res.output
    assert "internal error" not in res.output and not (tmp_path / "runs" / "e").exists()
    with pytest.raises(GenerationError, match="--limit"):
        generate(RunOptions(model=QWEN, run_dir=tmp_path / "r", backend="vllm", limit=-1),
                 object())


# ---------------------------------------------------------------- malformed answers

BIG = "x" * (MAX_ANSWER_CHARS + 1)  # well-formed, but more text than an answer may have


def _first_user(entry_id: str) -> str:
    return {c.id: c.question[0][0]["content"]
            for c in bfcl.conversations("multi_turn_base")}[entry_id]


def _answers(bad: set[str] | None = None, after: int | None = None):
    """A completions responder: oversized for the conversations in ``bad`` (every request
    after the first ``after`` if given), ``Done.`` otherwise."""
    firsts = {_first_user(i) for i in bad or ()}
    count = {"n": 0}

    def respond(req) -> str:
        count["n"] += 1
        if after is not None:
            return BIG if count["n"] > after else "Done."
        return BIG if any(f in req.body["prompt"] for f in firsts) else "Done."

    return respond


def _written(tmp_path, run: str) -> dict[str, dict]:
    path = tmp_path / run / "Qwen_Qwen3-0.6B" / "multi_turn" / \
        "BFCL_v4_multi_turn_base_result.json"
    if not path.exists():
        return {}
    return {e["id"]: e for e in map(json.loads, path.read_text().splitlines())}


@pytest.mark.parametrize("bad", ["multi_turn_base_0", "multi_turn_base_1",
                                 "multi_turn_base_2"])
@pytest.mark.parametrize("threads", ["1", "3"])
def test_an_oversized_answer_is_that_conversations_inference_error(tmp_path, bad, threads):
    """One conversation answered with more text than an answer may have, whatever its
    place: its line is an inference error that says why, the others are generated, exit 0
    as for any inference error, no traceback."""
    first = _first_user(bad)
    with FakeCompletionsServer(QWEN, responder=_answers({bad})) as s:
        res = _gen(tmp_path, "--model", QWEN, "--run", "o", "--endpoint", s.url,
                   "--tokenizer", "server", "--limit", "3", "--categories", "base",
                   "--threads", threads)
        asked = sum(first in r.body["prompt"] for r in s.completions())
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert "1 conversation(s) recorded as inference errors" in res.output
    entries = _written(tmp_path, "o")
    assert list(entries) == [f"multi_turn_base_{i}" for i in range(3)]  # all, sorted
    error = entries.pop(bad)["result"]
    assert error.startswith("Error during inference: ")
    assert f"malformed answer: the answer has more than {MAX_ANSWER_CHARS:,} characters" in error
    assert asked == 2  # its first request, tried --max-attempts times
    for entry in entries.values():
        assert entry["result"] and entry["result"] == [["Done."]] * len(entry["result"])
    m = json.loads((tmp_path / "o" / "Qwen_Qwen3-0.6B" / "careful_run.json").read_text())
    assert m["status"] == "complete" and m["inference_errors"] == 1 and not m["stop_reason"]


def test_an_endpoint_whose_every_answer_is_malformed_fails_writing_nothing(tmp_path):
    """No conversation got a usable answer: nothing to tell a bad conversation from a bad
    endpoint, so the run fails as for an endpoint whose every attempt failed."""
    with FakeCompletionsServer(QWEN, responder=lambda r: BIG) as s:
        res = _gen(tmp_path, "--model", QWEN, "--run", "a", "--endpoint", s.url,
                   "--tokenizer", "server", "--limit", "2", "--categories", "base",
                   "--threads", "1")
    assert res.exit_code == 2, res.output
    assert "failed" in res.output and "malformed answer" in res.output
    assert "Traceback" not in res.output and _written(tmp_path, "a") == {}
    m = json.loads((tmp_path / "a" / "Qwen_Qwen3-0.6B" / "careful_run.json").read_text())
    assert m["status"] == "failed" and "ApiUnavailable" in m["stop_reason"]


def test_an_endpoint_that_turns_malformed_stops_after_a_few_conversations(tmp_path):
    """Usable answers, then only oversized ones: a few conversations in a row got nothing
    usable, so the run stops (resumable) instead of spending attempts on every one left; the
    conversations that met the broken endpoint are not written, so a resume runs them."""
    with FakeCompletionsServer(QWEN, responder=_answers(after=4)) as s:  # base_0: 4 turns
        res = _gen(tmp_path, "--model", QWEN, "--run", "t", "--endpoint", s.url,
                   "--tokenizer", "server", "--limit", "8", "--categories", "base",
                   "--threads", "1")
        sent = len(s.completions())
    assert res.exit_code == 1, res.output
    assert "3 conversations in a row got only malformed answers" in res.output
    assert "Traceback" not in res.output
    assert sent == 4 + 2 * 3  # base_0's four, then two attempts for each of three
    assert list(_written(tmp_path, "t")) == ["multi_turn_base_0"]
    with FakeCompletionsServer(QWEN, responder=lambda r: "Done.") as s:
        res = _gen(tmp_path, "--model", QWEN, "--run", "t", "--endpoint", s.url,
                   "--tokenizer", "server", "--limit", "8", "--categories", "base",
                   "--threads", "2")
    assert res.exit_code == 0, res.output
    entries = _written(tmp_path, "t")
    assert len(entries) == 8 and all(e["result"] == [["Done."]] * len(e["result"])
                                     for e in entries.values())
