"""bfcl's two multi-turn loops are patched at their two exit points, and nowhere else."""

from __future__ import annotations

import ast
import copy
import difflib
import inspect
import json

import pytest

from careful_engine.generation import RunOptions, generate, vllm_backend
from careful_engine.protocol import patch
from careful_engine.protocol.hook import renumber_log
from tests.fakes.openai_server import FakeCompletionsServer


@pytest.fixture
def clean_patch():
    patch.uninstall()
    yield
    patch.uninstall()


@pytest.mark.parametrize("name", list(patch.LOOPS))
def test_only_the_two_exit_points_change(name):
    original, _ = patch.original_tree(name)
    patched, _ = patch.original_tree(name)
    patch.transform(patched, patch.LOOPS[name])
    # removing the hooks gives back the installed tree, line numbers and offsets included
    restored = patch.strip_hooks(ast.parse(ast.unparse(patched)))
    assert ast.dump(patch.strip_hooks(patched), include_attributes=True) == \
        ast.dump(original, include_attributes=True)
    assert ast.dump(restored) == ast.dump(original)
    # as text: four added lines (two hooks), nothing removed
    before, after = ast.unparse(original).splitlines(), ast.unparse(
        patch.transform(patch.original_tree(name)[0], patch.LOOPS[name])).splitlines()
    diff = [d for d in difflib.ndiff(before, after) if d[:2] in ("+ ", "- ")]
    mode = patch.LOOPS[name]
    assert [d[0] + " " + d[2:].strip() for d in diff] == [
        f"+ if self._careful_user_answer('{mode}', 'no_call', locals()):", "+ continue",
        f"+ if self._careful_user_answer('{mode}', 'decode_error', locals()):", "+ continue",
    ]


@pytest.mark.parametrize("name", list(patch.LOOPS))
def test_each_hook_sits_right_before_its_break(name):
    tree, _ = patch.original_tree(name)
    patch.transform(tree, patch.LOOPS[name])
    for kind, body in patch.exit_points(tree).items():
        hook, brk = body[-2], body[-1]
        assert patch.is_hook(hook) and isinstance(brk, ast.Break)
        assert hook.test.args[1].value == kind
        assert hook.lineno == brk.lineno
        assert patch._prints(body, patch.EXIT_MESSAGES[kind])


def test_unexpected_source_is_refused():
    tree = ast.parse("def f(self):\n    while True:\n        break\n")
    with pytest.raises(patch.PatchError, match="pinned version"):
        patch.transform(tree, "FC")


def test_install_compiles_bfcls_own_source(clean_patch):
    from bfcl_eval.model_handler.base_handler import BaseHandler

    originals = {n: BaseHandler.__dict__[n] for n in patch.LOOPS}
    patch.install()
    patch.install()  # idempotent
    assert patch.installed()
    for name, original in originals.items():
        fn = BaseHandler.__dict__[name]
        assert fn is not original and fn.__careful_original__ is original
        assert fn.__final__ is True  # still @final
        assert fn.__code__.co_filename == inspect.getsourcefile(original)
        assert fn.__code__.co_firstlineno == original.__code__.co_firstlineno
        assert fn.__qualname__ == original.__qualname__
    patch.uninstall()
    assert not patch.installed()
    assert all(BaseHandler.__dict__[n] is originals[n] for n in patch.LOOPS)
    assert not hasattr(BaseHandler, patch.HOOK)


def test_final_is_still_enforced_for_oss_handlers(clean_patch):
    from bfcl_eval.model_handler.local_inference.qwen import QwenHandler
    from overrides import override

    patch.install()
    with pytest.raises(TypeError):
        class Bad(QwenHandler):  # noqa: F841
            @override
            def inference_multi_turn_prompting(self, *a, **k):
                return None


def _standard_run(tmp_path, name):
    with FakeCompletionsServer("Qwen/Qwen3-8B", responder=lambda r: "Shall I proceed?") as s:
        handler = vllm_backend.build("Qwen/Qwen3-8B", 0.001)
        vllm_backend.attach(handler, s.url, tokenizer_kind="server")
        options = RunOptions(model="Qwen/Qwen3-8B", run_dir=tmp_path / name, backend="vllm",
                             ids=["multi_turn_base_2"])
        assert generate(options, handler).status == "complete"
    entry = json.loads(next((tmp_path / name).rglob("*_result.json")).read_text())
    entry.pop("latency")
    return entry


def _bfcl_run():
    """bfcl's own, unpatched loop on the same conversation."""
    from bfcl_eval.utils import make_json_serializable

    from careful_engine.core import process
    from careful_engine.generation import dataset

    assert not patch.installed()
    entry = next(e for e in dataset.load_entries("multi_turn_base")
                 if e["id"] == "multi_turn_base_2")
    with FakeCompletionsServer("Qwen/Qwen3-8B", responder=lambda r: "Shall I proceed?") as s:
        handler = vllm_backend.build("Qwen/Qwen3-8B", 0.001)
        vllm_backend.attach(handler, s.url, tokenizer_kind="server")
        process.reset_bfcl_process_state()
        result, metadata = handler.inference(copy.deepcopy(entry), False, False)
        process.reset_bfcl_process_state()
    metadata.pop("latency")
    return json.loads(json.dumps(make_json_serializable(
        {"id": entry["id"], "result": result, **metadata})))


def test_the_patched_loop_without_a_protocol_is_bfcls_loop(tmp_path, clean_patch):
    plain = _bfcl_run()
    patched = _standard_run(tmp_path, "patched")  # generation installs the patch itself
    assert patch.installed()
    assert patched == plain
    assert all(len(turn) == 1 for turn in plain["result"])  # every question ended its turn


def test_renumber_log_orders_steps_as_they_ran():
    log = [[], {"begin_of_turn_query": [], "careful_answered_step_0": ["a"], "step_0": ["b"],
                "step_1": ["c"]}, [], {"begin_of_turn_query": [], "step_0": ["x"]}]
    renumber_log(log)
    assert log[1] == {"begin_of_turn_query": [], "step_0": ["a"], "step_1": ["b"],
                      "step_2": ["c"]}
    assert log[3] == {"begin_of_turn_query": [], "step_0": ["x"]}


def test_a_failing_hook_is_not_read_as_a_decoding_error(tmp_path, monkeypatch):
    """The first exit point sits inside bfcl's try: a hook failure must stop the run loudly,
    not be taken for a decoding error that calls the hook a second time."""
    from careful_engine.protocol.user import ScriptedUser

    calls = []

    def broken(self, text, ref, state):
        calls.append(text)
        raise RuntimeError("boom")

    monkeypatch.setattr(ScriptedUser, "decide", broken)
    with FakeCompletionsServer("Qwen/Qwen3-8B", responder=lambda r: "Shall I?") as s:
        handler = vllm_backend.build("Qwen/Qwen3-8B-FC", 0.001)  # text decodes to no call
        vllm_backend.attach(handler, s.url, tokenizer_kind="server")
        options = RunOptions(model="Qwen/Qwen3-8B-FC", run_dir=tmp_path / "r", backend="vllm",
                             condition="confirm", ids=["multi_turn_base_2"])
        with pytest.raises(patch.HookFailure, match="boom"):
            generate(options, handler)
    assert calls == ["Shall I?"]
    assert not issubclass(patch.HookFailure, Exception)
    manifest = json.loads((tmp_path / "r" / "Qwen_Qwen3-8B-FC" / "careful_run.json").read_text())
    assert manifest["status"] == "stopped" and "HookFailure" in manifest["stop_reason"]
