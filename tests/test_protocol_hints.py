"""Effect hints: declarations appended to every function description, held-out docs included,
in MCP vocabulary, and nothing else changed, in what both kinds of handler send."""

from __future__ import annotations

import copy
import json
import re

import pytest

from careful_engine.effects import boundary
from careful_engine.effects.declarations import load
from careful_engine.generation import RunOptions, anthropic_backend, generate, vllm_backend
from careful_engine.generation.dataset import load_entries
from careful_engine.protocol import apply_hints
from careful_engine.protocol.hints import HINT_KEYS, PREFIX, hints, render
from tests.fakes.anthropic_server import FakeMessagesServer
from tests.fakes.openai_server import FakeCompletionsServer

DECL = load()
BOUNDARY = boundary.load("paper-final")
ENTRY = "multi_turn_miss_func_1"  # mv is held out until turn 2
HINT = re.compile(" " + re.escape(PREFIX) + r"\{[^}]*\}")


def test_hints_use_mcp_vocabulary():
    assert hints("rm", DECL.functions, BOUNDARY) == {
        "readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}
    assert hints("ls", DECL.functions, BOUNDARY) == {
        "readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
    cd = hints("cd", DECL.functions, BOUNDARY)  # a hidden-only write is not read-only
    assert cd["readOnlyHint"] is False and cd["destructiveHint"] is False
    assert render(hints("cp", DECL.functions, BOUNDARY)) == (
        'Tool annotations (MCP): {"readOnlyHint": false, "destructiveHint": false, '
        '"idempotentHint": false}')
    assert tuple(json.loads(render(cd)[len(PREFIX):])) == HINT_KEYS


def test_apply_hints_covers_held_out_docs_and_changes_nothing_else():
    (entry,) = [e for e in load_entries("multi_turn_miss_func") if e["id"] == ENTRY]
    plain = copy.deepcopy(entry)
    hinted = apply_hints(copy.deepcopy(entry), DECL.functions, BOUNDARY)
    docs = hinted["function"] + [d for v in hinted["missed_function"].values() for d in v]
    assert {d["name"] for d in hinted["missed_function"]["2"]} == {"mv"}
    for doc in docs:
        assert HINT.search(doc["description"]).end() == len(doc["description"]), doc["name"]
        assert "instruction" not in doc["description"].lower()
    strip = lambda e: json.loads(re.sub(r" Tool annotations \(MCP\): \{[^}]*\}", "",  # noqa: E731
                                        json.dumps(e)))
    assert strip(hinted) == plain
    assert apply_hints(copy.deepcopy(hinted), DECL.functions, BOUNDARY) == hinted  # once only
    assert load_entries("multi_turn_miss_func")[1] == entry  # the cached load is untouched


def _claude_requests(tmp_path, condition):
    with FakeMessagesServer(responder=lambda req: "Done.") as s:
        handler = anthropic_backend.build("claude-haiku-4-5-20251001-FC", base_url=s.url,
                                          api_key="test")
        options = RunOptions(model="claude-haiku-4-5-20251001-FC", run_dir=tmp_path / condition,
                             backend="anthropic", condition=condition, ids=[ENTRY])
        assert generate(options, handler).status == "complete"
        return [r.body for r in s.messages_requests()]


def test_fc_tools_carry_hints_from_the_start_and_at_the_holdout_turn(tmp_path):
    standard = _claude_requests(tmp_path, "standard")
    hinted = _claude_requests(tmp_path, "hints")
    assert len(standard) == len(hinted) == 5  # one step per turn
    for turn, (a, b) in enumerate(zip(standard, hinted, strict=True)):
        names = [t["name"] for t in b["tools"]]
        assert ("mv" in names) == (turn >= 2)
        for tool in b["tools"]:  # bfcl appends the response schema after the description
            assert len(HINT.findall(tool["description"])) == 1, tool["name"]
        for tool in a["tools"]:
            assert PREFIX not in tool["description"]
        # nothing else differs: same messages, same tools apart from the descriptions
        assert a["messages"] == b["messages"]
        assert [{**t, "description": None} for t in a["tools"]] == \
            [{**t, "description": None} for t in b["tools"]]
        assert [t["description"] for t in a["tools"]] == \
            [HINT.sub("", t["description"]) for t in b["tools"]]


def test_prompting_system_prompt_and_holdout_message_carry_hints(tmp_path):
    with FakeCompletionsServer("Qwen/Qwen3-8B", responder=lambda r: "Done.") as s:
        handler = vllm_backend.build("Qwen/Qwen3-8B", 0.001)
        vllm_backend.attach(handler, s.url, tokenizer_kind="server")
        options = RunOptions(model="Qwen/Qwen3-8B", run_dir=tmp_path / "p", backend="vllm",
                             condition="hints", ids=[ENTRY])
        assert generate(options, handler).status == "complete"
        prompts = [r.body["prompt"] for r in s.completions()]
    system = prompts[0].split("<|im_end|>", 1)[0]
    shown = [d["name"] for d in load_entries("multi_turn_miss_func")[1]["function"]]
    assert system.count(PREFIX) == len(shown) and "mv" not in shown
    holdout = prompts[2].split("<|im_start|>user\n")[-1]
    assert "'name': 'mv'" in holdout and holdout.count(PREFIX) == 1


@pytest.mark.parametrize("name", ["rm", "send_message", "get_stock_info"])
def test_every_function_can_be_hinted(name):
    assert set(hints(name, DECL.functions, BOUNDARY)) == set(HINT_KEYS)
