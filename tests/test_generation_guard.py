"""Hostile model answers through ``careful generate`` (the CLI), under the process-wide guard.

A fake endpoint plays a model that answers every payload of :mod:`tests.guard`'s corpus, in
the format its handler decodes: bfcl's prompting text (Qwen, prompting loop), Qwen's
``<tool_call>`` text and Llama 3.1's JSON-ish text (their FC decoders ``eval`` it), and Claude
``tool_use`` blocks (the FC loop: hostile names, argument strings and argument text). Each
payload step is one model answer; conversations of ``multi_turn_base`` carry them, one answer
per query, until every step has been served. While the run is guarded, nothing may compile or
exec a string, start a process, import os/subprocess/shutil, or open a file outside the test's
folder, and the canary file must never appear.
"""

from __future__ import annotations

import json
import platform
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.protocol import patch
from tests.fakes.anthropic_server import FakeMessagesServer, Reply, message, usage
from tests.fakes.openai_server import FakeCompletionsServer
from tests.guard import guarded, hostile_payloads, new_canary

# format: (registry key, backend)
MODELS = {
    "prompting": ("Qwen/Qwen3-8B", "vllm"),
    "qwen_fc_text": ("Qwen/Qwen3-8B-FC", "vllm"),
    "llama_3_1_text": ("meta-llama/Llama-3.1-8B-Instruct-FC", "vllm"),
    "fc": ("claude-haiku-4-5-20251001-FC", "anthropic"),
}


_load()
cli = CliRunner()
OS_RELEASE = (Path("/etc/os-release"), Path("/usr/lib/os-release"))


def _first_text(conv: bfcl.Conversation) -> str:
    return "\n".join(m["content"] for m in conv.question[0] if m["role"] == "user").strip()


def _allocate(steps: list) -> dict[str, list]:
    """Per conversation, as many answers as it has turns (each turn asks at least once, so
    every one of them is served)."""
    out: dict[str, list] = {}
    firsts: set[str] = set()
    todo = list(steps)
    for conv in bfcl.conversations("multi_turn_base"):
        first = _first_text(conv)
        if not todo:
            break
        if any(first in f or f in first for f in firsts):
            continue  # one conversation must not be taken for another
        firsts.add(first)
        out[conv.id] = todo[: len(conv.question)]
        del todo[: len(conv.question)]
    assert not todo, "not enough conversations for the corpus"
    return out


class Player:
    """Answers each conversation's queries from its list, in order; then "Done."."""

    def __init__(self, plan: dict[str, list]) -> None:
        self.plan = plan
        self.firsts = {_first_text(bfcl.conversation(i)): i for i in plan}
        self.asked: dict[str, int] = {}
        self.served: list[str] = []
        self._lock = threading.Lock()

    def next(self, text: str) -> object | None:
        entry_id = next(i for f, i in self.firsts.items() if f in text)
        with self._lock:
            k = self.asked.get(entry_id, 0)
            self.asked[entry_id] = k + 1
            if k < len(self.plan[entry_id]):
                name, step = self.plan[entry_id][k]
                self.served.append(name)
                return step
        return None


def _completions(player: Player):
    def respond(req) -> str:
        step = player.next(req.body["prompt"])
        return "Done." if step is None else step

    return respond


def _tool_use(name: str, args: str, i: int) -> dict:
    try:
        value = json.loads(args)
    except ValueError:
        value = args  # not JSON: a hostile endpoint sends it as it is
    return {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": value}


def _messages(player: Player):
    def respond(req) -> Reply:
        first = req.body["messages"][0]["content"]
        text = first if isinstance(first, str) else " ".join(
            b.get("text", "") for b in first if isinstance(b, dict))
        step = player.next(text)
        u = usage(input_tokens=100, output_tokens=10)
        if step is None:
            return Reply(200, message([{"type": "text", "text": "Done."}], usage_=u))
        if isinstance(step, list):
            blocks = [_tool_use(n, a, i) for i, d in enumerate(step) for n, a in d.items()]
            return Reply(200, message(blocks, stop_reason="tool_use", usage_=u))
        return Reply(200, message([{"type": "text", "text": str(step)}], usage_=u))

    return respond


def _cli_args(key: str, backend: str, run_dir: Path, ids: list[str], url: str) -> list[str]:
    args = ["generate", "--model", key, "--run", run_dir.name, "--runs-dir",
            str(run_dir.parent), "--ids", ",".join(ids), "--threads", "4",
            "--max-wait", "0"]  # a malformed answer is retried at once (minutes of sleep else)
    if backend == "vllm":
        return [*args, "--endpoint", url, "--tokenizer", "server"]
    return [*args, "--base-url", url, "--budget", "50"]


@pytest.mark.parametrize("fmt", list(MODELS))
def test_hostile_answers_never_run(fmt, tmp_path, monkeypatch):
    canary = new_canary()
    payloads = hostile_payloads(canary, (fmt,))
    steps = [(p.name, s) for p in payloads for s in p.steps]
    plan = _allocate(steps)
    player = Player(plan)
    key, backend = MODELS[fmt]
    run_dir = tmp_path / "runs" / "hostile"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    if backend == "vllm":
        server = FakeCompletionsServer(key, responder=_completions(player))
    else:
        server = FakeMessagesServer(responder=_messages(player))
    # the loops are compiled from bfcl's installed source once per process, before any model
    # text exists; inside the guard, nothing may compile at all
    patch.install()
    platform.processor()  # the SDKs' platform header runs `uname -p` once per process
    with server:
        # the SDKs read the OS name for their platform headers (the distro package)
        with guarded(tmp_path, canary=canary, read=OS_RELEASE):
            res = cli.invoke(app, _cli_args(key, backend, run_dir, list(plan), server.url))
    assert res.exit_code == 0, res.output
    assert sorted(player.served) == sorted(name for name, _ in steps)  # every step answered
    assert len(payloads) >= 100 or fmt in ("qwen_fc_text", "llama_3_1_text")
    # the answers are in the result file as the model gave them, and nothing ran
    text = "".join(p.read_text() for p in run_dir.rglob("*_result.json"))
    lines = [json.loads(x) for x in text.splitlines()]
    assert len(lines) == len(plan) and all(isinstance(e["result"], list) for e in lines)
    assert not canary.exists()
