"""The LLM annotator against a local fake of the Anthropic Messages API."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation import llm
from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.signals import FunctionInput, load_inputs
from careful_engine.annotation.store import Store
from careful_engine.effects import boundary
from tests.annotation_db import raw
from tests.fakes.anthropic_server import (
    FakeMessagesServer,
    Recorded,
    Reply,
    error_reply,
    text_reply,
    tool_use_reply,
    usage,
)

_load()  # every command on `careful`

SECRET = "SECRET-HUMAN-REASON"
FUNCTIONS = ["rm", "cd", "ls", "mv", "echo", "send_message", "get_stock_info", "post_tweet"]
FINAL = set(boundary.load("paper-final").destructive)


def _function_of(req: Recorded) -> str:
    first = req.body["messages"][0]["content"]
    return re.search(r"Function `(\w+)`", first).group(1)


def answering(req: Recorded) -> Reply:
    """Answers in varied, realistic shapes, deciding by the paper's boundary."""
    name = _function_of(req)
    yes = name in FINAL
    reason = f"{name}: {'cannot be undone' if yes else 'only reads or is harmless'} {{braces}}"
    answer = json.dumps({"destructive": yes, "reason": reason})
    shapes = {
        "rm": f"```json\n{answer}\n```",
        "cd": f"Looking at the source, cd changes the working directory.\n{answer}\nDone.",
        "mv": None,  # tool_use
        "ls": '{"destructive": "no", "reason": "lists entries"}',
    }
    if name == "mv":
        return tool_use_reply("label", {"destructive": yes, "reason": reason}, text="ok")
    return text_reply(shapes.get(name) or answer,
                      usage_=usage(100, 20, cache_read_input_tokens=7))


@pytest.fixture
def env(tmp_path):
    decl = tmp_path / "effects.json"
    decl.write_text(json.dumps({"functions": {
        n: {"kind": "write" if n != "ls" and n != "get_stock_info" else "read",
            "proposed": n in ("rm", "mv", "send_message", "post_tweet"),
            "signals": ["entries-removed"] if n in ("rm", "mv") else []}
        for n in FUNCTIONS
    }}))
    store = Store(tmp_path / "careful.db")
    store.add_annotator("A1")
    store.add_annotator("A2", "llm", "claude-test")
    store.new_round("r", load_inputs(decl), ["A1", "A2"])
    s = store.annotator_session("r", "A1")
    for f in s.functions():  # a human's labels, with a reason no model may ever see
        s.label(f.name, True, f"{SECRET} {f.name}")
    s.submit()
    with FakeMessagesServer(responder=answering) as server:
        yield store, server, tmp_path
    store.close()


def test_llm_annotator_labels_blind_and_records_usage(env):
    store, server, _ = env
    # the first request meets a rate limit, an overload and a server error before succeeding
    server.enqueue(error_reply(429, retry_after=0.01), error_reply(529, retry_after=0.01),
                   error_reply(500, retry_after=0.01))
    seen = []
    run = llm.annotate(store, "r", "A2", "claude-test", base_url=server.url, api_key="test",
                       on_result=lambda f, d, r: seen.append((f, d)))
    assert sorted(run.labelled) == sorted(FUNCTIONS) and not run.failed
    assert run.submitted
    assert [f for f, _ in seen] == [f.name for f in store.round_functions("r")]
    labels = store.adjudication_session("r", "lead").labels()["A2"]
    assert {f for f, lb in labels.items() if lb.destructive} == FINAL & set(FUNCTIONS)
    assert labels["ls"].reason == "lists entries"
    assert labels["rm"].reason.endswith("{braces}")

    reqs = server.messages_requests()
    assert len(reqs) == len(FUNCTIONS) + 3  # three retried
    for req in reqs:
        assert req.body["model"] == "claude-test"
        assert req.api_key == "test"
        assert "destructive" in req.body["system"]
        assert SECRET not in req.text  # blind: no other annotator's label reaches the model
    rm_prompt = next(r for r in reqs if _function_of(r) == "rm").body["messages"][0]["content"]
    assert "def rm(" in rm_prompt  # the simulator source
    assert "destructive candidate" in rm_prompt and "entries-removed" in rm_prompt

    calls = list(raw(store.path)["llm_calls"].rows)
    assert len(calls) == len(FUNCTIONS) and all(c["ok"] for c in calls)
    assert run.usage["input_tokens"] == sum(c["input_tokens"] for c in calls)
    assert run.usage["cache_read_input_tokens"] == 7 * (len(FUNCTIONS) - 1)  # mv: default usage
    assert all(c["request_id"].startswith("msg_fake_") for c in calls)
    assert store.annotator("A2").model == "claude-test"


def test_unusable_answer_is_retried_then_reported(env):
    store, server, _ = env
    server.enqueue("I think it is fine.", "still no JSON", '{"destructive": true, "reason": ""}')
    run = llm.annotate(store, "r", "A2", "claude-test", base_url=server.url, api_key="t",
                       limit=2, attempts=2, submit=True)
    first, second = [f.name for f in store.round_functions("r")][:2]
    assert first in run.failed and "no JSON" in run.failed[first]
    # the second function's first answer lacks the required reason; the retry succeeds
    assert run.labelled == [second]
    retry = server.messages_requests()[3]
    assert retry.body["messages"][1]["role"] == "assistant"
    assert "could not be used" in retry.body["messages"][2]["content"]
    assert run.submitted is None  # incomplete: not submitted
    # a rerun resumes with what is left
    run2 = llm.annotate(store, "r", "A2", "claude-test", base_url=server.url, api_key="t")
    assert run2.skipped == [second] and len(run2.labelled) == len(FUNCTIONS) - 1
    assert run2.submitted
    failed_calls = [c for c in raw(store.path)["llm_calls"].rows if not c["ok"]]
    assert len(failed_calls) == 3


def test_api_errors_stop_the_run_and_keep_labels(env):
    store, server, _ = env
    server.enqueue(text_reply('{"destructive": false, "reason": "x"}'),
                   *[error_reply(500, "boom")] * 3)
    client = llm.make_client("k", server.url, max_retries=0)
    with pytest.raises(AnnotationError, match="3 API errors in a row"):
        llm.annotate(store, "r", "A2", "claude-test", client=client)
    assert len(store.annotator_session("r", "A2").labels()) == 1


def test_no_key_is_a_clear_error(env, monkeypatch):
    store, server, _ = env
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(AnnotationError, match="ANTHROPIC_API_KEY"):
        llm.annotate(store, "r", "A2", "claude-test", base_url=server.url)


def test_parse_answer():
    assert llm.parse_answer('{"destructive": true, "reason": "r"}') == (True, "r")
    assert llm.parse_answer('Sure.\n```json\n{"reason": "a {b}", "destructive": false}\n```') \
        == (False, "a {b}")
    assert llm.parse_answer('{"note": {"x": 1}} then {"destructive": "yes", "reason": "q"}') \
        == (True, "q")
    assert llm.parse_answer('destructive: false, "reason": "lenient"') == (False, "lenient")
    for bad in ("no json here", '{"destructive": "maybe", "reason": "x"}'):
        with pytest.raises(llm.AnswerError):
            llm.parse_answer(bad)


def test_review_sheet_sections(tmp_path):
    sheet = tmp_path / "sheet.md"
    sheet.write_text(
        "# Review sheet\n\nintro\n\n## GorillaFileSystem\n\n### `rm`\nRemoves a file. "
        "Signals: entries removed.\n\n### mv (GorillaFileSystem)\nMoves.\n"
        "```python\ndef mv(self, source, destination):\n    ...\n```\n\n## MessageAPI\n"
    )
    fns = [FunctionInput("rm", "GorillaFileSystem"), FunctionInput("mv", "GorillaFileSystem"),
           FunctionInput("ls", "GorillaFileSystem")]
    sheets = llm.function_sheets(fns, sheet)
    assert sheets["rm"].startswith("### `rm`\nRemoves a file.")
    assert "def rm(" in sheets["rm"]  # source appended
    assert sheets["mv"].count("def mv(") == 1  # the sheet's own source is kept, not doubled
    assert "Description:" in sheets["ls"] and "def ls(" in sheets["ls"]  # minimal entry
    empty = tmp_path / "empty.md"
    empty.write_text("# nothing\n")
    with pytest.raises(AnnotationError, match="no section"):
        llm.function_sheets(fns, empty)


def test_annotate_llm_command(env):
    store, server, tmp = env
    store.add_annotator("A3", "llm", "claude-other")
    runner = CliRunner()
    args = ["annotate-llm", "--db", str(store.path), "-r", "r", "--model", "claude-other",
            "--annotator", "A3", "--base-url", server.url]
    result = runner.invoke(app, args, env={"ANTHROPIC_API_KEY": "k"})
    assert result.exit_code == 2 and "not an annotator of round" in result.output
    result = runner.invoke(app, [*args, "--join"], env={"ANTHROPIC_API_KEY": "k"})
    assert result.exit_code == 0, result.output
    assert f"{len(FUNCTIONS)} labelled" in result.output and "submitted" in result.output
    assert "rm = yes" in result.output
    result = runner.invoke(app, ["round", "status", "r", "--db", str(store.path)],
                           env={"COLUMNS": "200"})
    assert "claude-other" in result.output and "open" in result.output  # A2 still labels
    assert store.annotator_session("r", "A3").submitted
    with FakeMessagesServer() as other:  # the wrong model name for an existing annotator
        result = runner.invoke(app, [*args[:-1], other.url, "--model", "claude-x"],
                               env={"ANTHROPIC_API_KEY": "k"})
    assert result.exit_code == 2 and "exists already" in result.output


# ------------------------------------------------------------- hostile endpoints

def _msg(content, usage_=None) -> dict:
    return {"id": "msg_h", "type": "message", "role": "assistant", "model": "m",
            "content": content, "stop_reason": "end_turn", "stop_sequence": None,
            "usage": usage_ or {"input_tokens": 10, "output_tokens": 5}}


_OK = [{"type": "text", "text": '{"destructive": true, "reason": "deletes data"}'}]
HOSTILE_BODIES = {
    "usage-text": _msg(_OK, {"input_tokens": "abc", "output_tokens": 5}),
    "usage-huge": _msg(_OK, {"input_tokens": 10**30, "output_tokens": 5}),
    "usage-negative": _msg(_OK, {"input_tokens": 10, "output_tokens": -1}),
    "cache-float": _msg(_OK, {"input_tokens": 1, "output_tokens": 1,
                              "cache_read_input_tokens": 1.5}),
    "text-not-text": _msg([{"type": "text", "text": {"a": 1}}]),
    "tool-input-list": _msg([{"type": "tool_use", "id": "t", "name": "x", "input": [1]}]),
    "content-not-list": _msg("just text"),
    "long-answer": _msg([{"type": "text", "text": '{"destructive": true, "reason": "'
                          + "x" * 40_000 + '"}'}]),
    "a-list": [1, 2, 3],
    "deep-body": b"[" * 100_000 + b"]" * 100_000,
    "not-json": b"{nope",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_BODIES))
def test_a_malformed_answer_is_recorded_and_the_run_stops_with_one_line(env, case):
    """Answers that are not a usable message (bad usage, text that is not text, too long,
    not JSON) never end in a traceback: each is recorded as a failed call, and three in a
    row stop the run with one line and exit 2 (as API errors do)."""
    from tests.fakes.hostile_server import HostileServer

    store, _, _ = env
    body = HOSTILE_BODIES[case]
    raw_body = body if isinstance(body, bytes) else json.dumps(body).encode()
    with HostileServer("status", status=200, body=raw_body) as server:
        result = CliRunner().invoke(
            app, ["annotate-llm", "--db", str(store.path), "-r", "r", "-m", "claude-test",
                  "-a", "A2", "--base-url", server.root],
            env={"ANTHROPIC_API_KEY": "k", "COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None \
        or isinstance(result.exception, SystemExit)
    assert "3 API errors in a row (last: malformed answer" in result.output
    calls = list(raw(store.path)["llm_calls"].rows)
    assert len(calls) == 3 and not any(c["ok"] for c in calls)
    assert all(c["error"].startswith("malformed answer: ") for c in calls)
    assert not store.annotator_session("r", "A2").labels()


def test_a_slow_endpoint_is_cut_at_the_request_deadline(env, monkeypatch):
    """A body that trickles one byte at a time fails at the request deadline (the client
    is bounded like generation's), instead of holding the run for ever."""
    import time

    from tests.fakes.hostile_server import HostileServer

    store, _, _ = env
    monkeypatch.setenv("CAREFUL_REQUEST_TIMEOUT", "1.0")
    with HostileServer("trickle-body", interval=0.2) as server:
        client = llm.make_client("k", server.root, max_retries=0)
        start = time.monotonic()
        run = llm.annotate(store, "r", "A2", "claude-test", client=client, limit=1)
        took = time.monotonic() - start
    assert took < 5, took
    [(fn, error)] = run.failed.items()
    assert "APITimeoutError" in error or "Timeout" in error, error


def test_an_answer_that_is_not_one_verdict_about_this_function_is_asked_again(env):
    store, server, _ = env
    lone = "\ud800"
    server.enqueue(
        '{"destructive": false, "reason": "first"} {"destructive": true, "reason": "second"}',
        '{"function": "zzz_other", "destructive": true, "reason": "another function"}',
        '{"destructive": true, "reason": "x", "deep": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"destructive": true, "reason": "a lone surrogate ' + lone + '"}',
    )
    run = llm.annotate(store, "r", "A2", "claude-test", base_url=server.url, api_key="t",
                       limit=2, attempts=2)
    assert not run.labelled and len(run.failed) == 2
    calls = list(raw(store.path)["llm_calls"].rows)
    errors = [c["error"] for c in calls]
    assert "contradicting verdicts" in errors[0]
    assert "about 'zzz_other'" in errors[1]
    assert "nested too deeply" in errors[2]
    assert "control character" in errors[3]
    assert lone not in calls[3]["response"] and "\ufffd" in calls[3]["response"]
    retry = server.messages_requests()[1]  # the same function asked again, told why
    assert "contradicting verdicts" in retry.body["messages"][2]["content"]


def test_parse_answer_refuses_contradictions_and_other_functions():
    assert llm.parse_answer('{"destructive": true, "reason": "r"} {"destructive": "yes", '
                            '"reason": "again"}') == (True, "r")
    assert llm.parse_answer('{"answer": {"destructive": false, "reason": "nested"}}') \
        == (False, "nested")
    assert llm.parse_answer('{"function": "`rm`", "destructive": true, "reason": "r"}',
                            "rm") == (True, "r")
    for bad, why in [
        ('{"destructive": true, "reason": "a"} {"destructive": false, "reason": "b"}',
         "contradicting"),
        ('destructive: true ... destructive: no', "contradicting"),
        ('{"name": "mv", "destructive": true, "reason": "r"}', "about 'mv'"),
        ('{"destructive": true, "x": ' + "[" * 3000 + "]" * 3000 + "}", "nested too deeply"),
        ("{" + "x" * llm.MAX_ANSWER_CHARS, "characters"),
    ]:
        with pytest.raises(llm.AnswerError, match=why):
            llm.parse_answer(bad, "rm")


def test_lone_surrogates_from_the_endpoint_are_stored_replaced(env):
    """A lone surrogate in an answer's id or stop reason, or in an API error's text, is
    stored replaced (SQLite refuses it) instead of ending the run with a traceback."""
    from tests.fakes.hostile_server import HostileServer

    store, _, _ = env
    answer = _msg(_OK)
    answer["id"], answer["stop_reason"] = "msg_\ud800", "end_\udfff"
    with HostileServer("status", status=200, body=json.dumps(answer).encode()) as server:
        run = llm.annotate(store, "r", "A2", "claude-test", base_url=server.root,
                           api_key="k", limit=1)
    assert len(run.labelled) == 1
    with HostileServer("status", status=400, body=b'"\\ud800 bad request"') as server:
        run = llm.annotate(store, "r", "A2", "claude-test", limit=1,
                           client=llm.make_client("k", server.root, max_retries=0))
    assert len(run.failed) == 1 and "\ufffd" in next(iter(run.failed.values()))
    calls = list(raw(store.path)["llm_calls"].rows)
    assert calls[0]["request_id"] == "msg_\ufffd" and calls[0]["stop_reason"] == "end_\ufffd"
    assert "\ufffd bad request" in calls[1]["error"]


def test_a_verdict_may_name_its_function_in_the_usual_ways():
    for named in ("cd", "`cd`", "cd()", "GorillaFileSystem.cd", "cd(folder)"):
        answer = json.dumps({"function": named, "destructive": False, "reason": "moves"})
        assert llm.parse_answer(answer, "cd") == (False, "moves")
    assert llm.message_problem(type("M", (), {"content": [1, 2], "usage": None})()) \
        == "a content block is an int, without a type"


def test_a_base_url_that_is_not_a_url_is_one_error(monkeypatch):
    with pytest.raises(AnnotationError, match=r"--base-url: 'x\\x1b\[31m' is not a URL"):
        llm.make_client("k", "x\x1b[31m")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:abc")
    with pytest.raises(AnnotationError, match="ANTHROPIC_BASE_URL: .* is not a valid URL"):
        llm.make_client("k")
