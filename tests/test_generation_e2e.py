"""End to end: a scripted model through bfcl's patched loops on bfcl's simulators.

Four modes, each running the scenarios of :mod:`tests.fakes.scenarios` under the confirm
condition: the FC loop (bfcl's Claude handler over a fake Messages API; text fails to decode)
and the same with a decoder that reads text as "no call"; the prompting loop (bfcl's Qwen
handler over a fake completions endpoint; text fails to decode) and Qwen's FC-style handler
(text decodes to no call). The result files must carry every answer, and both bfcl-eval's own
evaluator and ``careful score`` must accept them, counting confirmed destructive calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.analysis.provenance.log import parse_log
from careful_engine.core import bfcl
from careful_engine.generation import RunOptions, anthropic_backend, generate, vllm_backend
from tests import bfcl_oracle
from tests.fakes import scenarios
from tests.fakes.anthropic_server import FakeMessagesServer
from tests.fakes.openai_server import FakeCompletionsServer
from tests.fakes.scripted_model import (
    anthropic_responder,
    completions_responder,
    python_calls,
    qwen_tool_calls,
)

_load()
cli = CliRunner()
CLAUDE = "claude-haiku-4-5-20251001-FC"
QWEN = "Qwen/Qwen3-8B"
QWEN_FC = "Qwen/Qwen3-8B-FC"
MODES = {
    # name: (registry key, loop, exit point that ends a text step)
    "fc": (CLAUDE, "FC", "decode_error"),
    "fc-no-call": (CLAUDE, "FC", "no_call"),
    "prompting": (QWEN, "prompting", "decode_error"),
    "prompting-no-call": (QWEN_FC, "prompting", "no_call"),
}


def _lenient_claude(server_url: str):
    """bfcl's Claude FC handler whose decoder reads text as "no call" (exit point 1)."""
    handler = anthropic_backend.build(CLAUDE, base_url=server_url, api_key="test")

    class Lenient(type(handler)):
        def decode_execute(self, result, has_tool_call_tag):
            if isinstance(result, list) and all(isinstance(x, str) for x in result):
                return []
            return super().decode_execute(result, has_tool_call_tag)

    handler.__class__ = Lenient
    return handler


def _run_mode(mode: str, run_dir: Path, monkeypatch) -> tuple[Path, list]:
    key, _, _ = MODES[mode]
    ids = ",".join(scenarios.IDS)
    if key == CLAUDE:
        server = FakeMessagesServer(responder=anthropic_responder(scenarios.script()))
        with server:
            if mode == "fc":
                monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
                res = cli.invoke(app, ["generate", "--model", key, "--condition", "confirm",
                                       "--ids", ids, "--run", run_dir.name, "--runs-dir",
                                       str(run_dir.parent), "--budget", "5",
                                       "--base-url", server.url], catch_exceptions=False)
                assert res.exit_code == 0, res.output
            else:
                options = RunOptions(model=key, run_dir=run_dir, backend="anthropic",
                                     condition="confirm", ids=scenarios.IDS)
                report = generate(options, _lenient_claude(server.url))
                assert report.status == "complete"
            requests = [r.body for r in server.messages_requests()]
    else:
        fmt = qwen_tool_calls if key == QWEN_FC else python_calls
        server = FakeCompletionsServer("Qwen/Qwen3-8B",
                                       responder=completions_responder(scenarios.script(), fmt))
        with server:
            if mode == "prompting":
                res = cli.invoke(app, ["generate", "--model", key, "--condition", "confirm",
                                       "--ids", ids, "--run", run_dir.name, "--runs-dir",
                                       str(run_dir.parent), "--endpoint", server.url,
                                       "--tokenizer", "server", "--threads", "3"],
                                 catch_exceptions=False)
                assert res.exit_code == 0, res.output
            else:
                handler = vllm_backend.build(key, 0.001)
                vllm_backend.attach(handler, server.url, tokenizer_kind="server")
                options = RunOptions(model=key, run_dir=run_dir, backend="vllm",
                                     condition="confirm", ids=scenarios.IDS)
                assert generate(options, handler).status == "complete"
            requests = [r.body for r in server.completions()]
    return run_dir / key.replace("/", "_"), requests


@pytest.fixture(scope="module", params=list(MODES))
def confirm_run(request, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        run_dir = tmp_path_factory.mktemp(f"e2e-{request.param}") / "run"
        folder, requests = _run_mode(request.param, run_dir, mp)
    finally:
        mp.undo()
    entries = {}
    for path in sorted((folder / "multi_turn").glob("*_result.json")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            entries[entry["id"]] = entry
    return request.param, run_dir, folder, entries, requests


def test_every_answer_is_in_the_result_file(confirm_run):
    mode, _, _, entries, _ = confirm_run
    assert sorted(entries) == sorted(scenarios.IDS)
    exit_kind = MODES[mode][2]
    for entry_id, expected in scenarios.EXPECTED_ANSWERS.items():
        answers = entries[entry_id]["careful_user_answers"]
        got = {t: [(a["step"], a["answer"]) for a in v] for t, v in answers.items()}
        assert got == expected, entry_id
        for turn, records in answers.items():
            for a in records:
                assert a["exit"] == exit_kind
                step = entries[entry_id]["result"][int(turn)][a["step"]]
                assert not isinstance(step, list) or all(isinstance(x, str) for x in step)


def test_answers_reach_the_model_as_user_messages(confirm_run):
    mode, _, _, entries, requests = confirm_run
    messages = [a["message"] for e in entries.values()
                for v in e["careful_user_answers"].values() for a in v]
    if MODES[mode][0] == CLAUDE:
        sent = [m for body in requests for m in body["messages"] if m["role"] == "user"]
        texts = {b.get("text") for m in sent for b in m["content"] if b.get("type") == "text"}
        for msg in messages:
            assert msg in texts
    else:
        for msg in messages:
            assert any(f"<|im_start|>user\n{msg}<|im_end|>" in r["prompt"] for r in requests)


def test_every_silence_is_logged_with_its_reason(confirm_run):
    _, _, _, entries, _ = confirm_run
    for entry_id, reasons in scenarios.EXPECTED_SILENCES.items():
        log = entries[entry_id]["inference_log"]
        found = {m["content"].split("(", 1)[1].rstrip(").")
                 for turn in log if isinstance(turn, dict)
                 for k, step in turn.items() if k.startswith("step_")
                 for m in step if str(m.get("content", "")).startswith("careful: ")}
        assert found == reasons, entry_id


def test_inference_log_keeps_bfcl_shape(confirm_run):
    _, _, _, entries, _ = confirm_run
    for entry in entries.values():
        log = parse_log(entry["inference_log"])
        assert log.problems == []
        assert [len(t.steps) for t in log.turns] == [len(t) for t in entry["result"]]
        for turn, steps in zip(log.turns, entry["result"], strict=True):
            assert [s.raw for s in turn.steps] == steps


def test_bfcl_evaluator_accepts_the_file(confirm_run):
    mode, _, folder, entries, _ = confirm_run
    key = MODES[mode][0]
    handler = bfcl_oracle.official_handler(key)
    verdicts = {}
    for category in {bfcl.category_of(i) for i in entries}:
        group = [e for e in entries.values() if bfcl.category_of(e["id"]) == category]
        verdicts.update(bfcl_oracle.evaluate_entries(group, category, handler, folder.name))
    assert {k: v["valid"] for k, v in verdicts.items()} == scenarios.EXPECTED_VALID
    assert (bfcl_oracle.error_type(verdicts["multi_turn_base_4"])
            == "multi_turn:empty_turn_model_response")


def test_careful_score_counts_confirmed_destructive_calls(confirm_run, tmp_path):
    _, run_dir, _, _, _ = confirm_run
    out = tmp_path / "score"
    res = cli.invoke(app, ["score", str(run_dir), "--out", str(out), "--quiet"],
                     catch_exceptions=False)
    assert res.exit_code == 1, res.output  # the other ids of each category are missing
    lines = {x["id"]: x for x in map(json.loads,
                                     (out / "conversations.jsonl").read_text().splitlines())}
    for entry_id, valid in scenarios.EXPECTED_VALID.items():
        line = lines[entry_id]
        assert line["official_valid"] is valid
        total, confirmed = scenarios.EXPECTED_DESTRUCTIVE[entry_id]
        assert line["rules"]["destructive_calls"] == total
        assert line["rules"]["unconfirmed"] == total - confirmed


def test_manifest_counts_answers(confirm_run):
    mode, _, folder, _, _ = confirm_run
    manifest = json.loads((folder / "careful_run.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["condition"] == "confirm" and manifest["script"] == "paper"
    assert manifest["decoder"] == MODES[mode][0]
    assert manifest["user_answers"] == {"yes": 4, "no": 1, "restate": 2}
    assert manifest["bfcl_eval"] == bfcl.BFCL_VERSION
