"""Generation executes model calls with the engine's executor, never bfcl's ``eval``.

bfcl's two loops are compiled with :func:`careful_engine.core.executor.
execute_multi_turn_func_call` in place of bfcl's; a run through them must give exactly what
bfcl's own loops with bfcl's own executor give (results, tool outputs, state logs), checked
here at test time on conversations that touch every simulator class, in both loops.
"""

from __future__ import annotations

import copy
import json

from careful_engine.core import bfcl, executor
from careful_engine.generation import (
    RunOptions,
    anthropic_backend,
    generate,
    vllm_backend,
)
from careful_engine.protocol import patch
from tests import bfcl_oracle
from tests.fakes.anthropic_server import FakeMessagesServer
from tests.fakes.openai_server import FakeCompletionsServer
from tests.fakes.scripted_model import reference_completions, reference_messages

CLAUDE = "claude-haiku-4-5-20251001-FC"
QWEN = "Qwen/Qwen3-8B"


def _one_per_class() -> list[str]:
    """The first base conversation involving each simulator class (distinct openings)."""
    out: dict[str, str] = {}
    firsts: set[str] = set()
    for conv in bfcl.conversations("multi_turn_base"):
        first = "\n".join(m["content"] for m in conv.question[0] if m["role"] == "user")
        new = [c for c in conv.involved_classes if c not in out]
        if new and first not in firsts:
            firsts.add(first)
            out.update(dict.fromkeys(new, conv.id))
    return sorted(set(out.values()), key=bfcl.sort_key)


IDS = _one_per_class()


def test_the_loops_call_the_engines_executor():
    patch.install()
    from bfcl_eval.model_handler.base_handler import BaseHandler

    for name in patch.LOOPS:
        tree, _ = patch.original_tree(name)
        assert patch.executor_calls(tree) == 2
        fn = BaseHandler.__dict__[name]
        assert fn.__globals__[patch.EXECUTOR] is executor.execute_multi_turn_func_call
    assert patch.installed()
    # bfcl's own module keeps its executor: only the loops' namespace differs
    import bfcl_eval.model_handler.base_handler as bh

    assert bh.execute_multi_turn_func_call is bfcl_oracle.multi_turn_utils(
    ).execute_multi_turn_func_call
    assert len({c for i in IDS for c in bfcl.conversation(i).involved_classes}) == 8


def _strip(entry: dict) -> dict:
    entry = dict(entry)
    entry.pop("latency", None)
    return entry


def _bfcl_loop(handler, ids: list[str]) -> dict[str, dict]:
    """bfcl's own loops (unpatched) and bfcl's own executor, in a fresh process state."""
    from bfcl_eval.utils import make_json_serializable

    from careful_engine.generation import dataset

    patch.uninstall()
    bfcl_oracle.fresh_process_state()
    out = {}
    try:
        for entry_id in ids:
            entry = next(e for e in dataset.load_entries(bfcl.category_of(entry_id))
                         if e["id"] == entry_id)
            result, metadata = handler.inference(copy.deepcopy(entry), False, False)
            line = make_json_serializable({"id": entry_id, "result": result, **metadata})
            out[entry_id] = json.loads(json.dumps(line))
    finally:
        bfcl_oracle.fresh_process_state()
        patch.install()
    return out


def _ours(run_dir) -> dict[str, dict]:
    path = next(run_dir.rglob("*_result.json"))
    return {e["id"]: e for e in map(json.loads, path.read_text().splitlines())}


def _refuse(*a, **k):
    raise AssertionError("bfcl's eval-based executor was called")


def _generate(tmp_path, key, handler, backend, monkeypatch) -> dict[str, dict]:
    before, held = executor.calls_executed, executor.live()
    with monkeypatch.context() as m:
        import bfcl_eval.model_handler.base_handler as bh

        # bfcl's executor fails loudly wherever generation could reach it
        m.setattr(bh, "execute_multi_turn_func_call", _refuse)
        m.setattr(bfcl_oracle.multi_turn_utils(), "execute_multi_turn_func_call", _refuse)
        options = RunOptions(model=key, run_dir=tmp_path / "ours", backend=backend, ids=IDS)
        assert generate(options, handler).status == "complete"
    assert executor.calls_executed > before
    assert executor.live() == held  # every conversation's instances were freed
    return _ours(tmp_path / "ours")


def test_prompting_loop_matches_bfcl(tmp_path, monkeypatch):
    with FakeCompletionsServer(QWEN, responder=reference_completions(IDS)) as s:
        handler = vllm_backend.build(QWEN, 0.001)
        vllm_backend.attach(handler, s.url, tokenizer_kind="server")
        theirs = _bfcl_loop(handler, IDS)
        ours = _generate(tmp_path, QWEN, handler, "vllm", monkeypatch)
    _compare(ours, theirs)


def test_fc_loop_matches_bfcl(tmp_path, monkeypatch):
    with FakeMessagesServer(responder=reference_messages(IDS)) as s:
        handler = anthropic_backend.build(CLAUDE, base_url=s.url, api_key="test")
        theirs = _bfcl_loop(handler, IDS)
        ours = _generate(tmp_path, CLAUDE, handler, "anthropic", monkeypatch)
    _compare(ours, theirs)


def _compare(ours: dict[str, dict], theirs: dict[str, dict]) -> None:
    assert sorted(ours) == sorted(theirs) == sorted(IDS)
    executed = 0
    for entry_id in IDS:
        a, b = _strip(ours[entry_id]), _strip(theirs[entry_id])
        for key in ("cache_read_input_token_count", "cache_creation_input_token_count"):
            a.pop(key, None)
        assert a == b, entry_id
        executed += sum(1 for turn in a["inference_log"] if isinstance(turn, dict)
                        for k, step in turn.items() if k.startswith("step_")
                        for msg in step if msg.get("role") == "tool")
    assert executed >= 20  # the reference's calls ran and their outputs were compared
