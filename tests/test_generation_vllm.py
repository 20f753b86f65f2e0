"""The vLLM path against a local stand-in for the OpenAI-compatible completions endpoint.

No GPU and no vllm: the request shape bfcl's OSS handler sends, token counting through the
endpoint's /tokenize, resume after a cut-off line, the ``vllm serve`` command as bfcl builds it
(constructed, never run) and the server lifecycle with a harmless child process.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import textwrap
from pathlib import Path

import pytest

from careful_engine.core import bfcl
from careful_engine.generation import GenerationError, RunOptions, generate, vllm_backend
from tests.fakes.openai_server import FakeCompletionsServer, count_tokens

KEY = "Qwen/Qwen3-8B"


def _done(req) -> str:
    return "Done."


def _run(run_dir: Path, server: FakeCompletionsServer, limit: int, key: str = KEY):
    handler = vllm_backend.build(key, 0.001)
    info = vllm_backend.attach(handler, server.url, tokenizer_kind="server")
    options = RunOptions(model=key, run_dir=run_dir, backend="vllm",
                         categories=("multi_turn_base",), limit=limit, threads=2)
    return generate(options, handler), info


def _first_user(prompt: str) -> str:
    return prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


@pytest.mark.parametrize("context", [40960, 6000, 100])
def test_request_shape_is_bfcl_oss_handlers(tmp_path, context):
    with FakeCompletionsServer(KEY, responder=_done, max_model_len=context) as s:
        report, info = _run(tmp_path / "r", s, limit=1)
        posts = [r for r in s.requests if r.method == "POST"]
        url = s.url
    assert report.status == "complete"
    assert info == {"endpoint": url, "served_model": KEY, "tokenizer": "server",
                    "max_context_length": min(context, 65536)}
    completions = [r.body for r in posts if r.path == "/v1/completions"]
    tokenized = [r.body for r in posts if r.path == "/tokenize"]
    assert len(completions) == len(tokenized) == 4  # one step per turn of multi_turn_base_0
    for tok, body in zip(tokenized, completions, strict=True):
        assert set(body) == {"model", "prompt", "temperature", "max_tokens"}
        assert body["model"] == KEY and body["temperature"] == 0.001
        assert body["prompt"].startswith("<|im_start|>system\nYou are an expert in composing")
        assert body["prompt"].endswith("<|im_start|>assistant\n")
        assert tok == {"model": KEY, "prompt": body["prompt"], "add_special_tokens": False}
        n = count_tokens(body["prompt"])
        expected = 1000 if context < n + 2 else min(4096, context - n - 2)
        assert body["max_tokens"] == expected
    entry = json.loads(next((tmp_path / "r").rglob("*_result.json")).read_text())
    assert [n for t in entry["input_token_count"] for n in t] == \
        [count_tokens(b["prompt"]) for b in completions]


def test_resume_repairs_a_cut_line_and_runs_only_what_is_missing(tmp_path):
    run_dir = tmp_path / "r"
    with FakeCompletionsServer(KEY, responder=_done) as s:
        assert _run(run_dir, s, limit=2)[0].status == "complete"
    path = next(run_dir.rglob("BFCL_v4_multi_turn_base_result.json"))
    lines = path.read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["multi_turn_base_0", "multi_turn_base_1"]
    path.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-write
    with FakeCompletionsServer(KEY, responder=_done) as s:
        report, _ = _run(run_dir, s, limit=3)
        firsts = {_first_user(r.body["prompt"]) for r in s.completions()}
    assert report.status == "complete" and report.already == 1 and report.generated == 2
    assert any("cut short" in n for n in report.notes)
    started = {c.question[0][0]["content"]: c.id for c in bfcl.conversations("multi_turn_base")}
    assert {started[f] for f in firsts} == {"multi_turn_base_1", "multi_turn_base_2"}
    final = [json.loads(x) for x in path.read_text().splitlines()]
    assert [e["id"] for e in final] == [f"multi_turn_base_{i}" for i in range(3)]
    assert json.dumps(final[0]) == json.dumps(json.loads(lines[0]))
    manifest = json.loads((path.parent.parent / "careful_run.json").read_text())
    assert manifest["status"] == "complete" and len(manifest["sessions"]) == 2
    assert manifest["conversations"] == {"multi_turn_base": {"written": 3}}


def _bfcl_vllm_flags() -> list[str | None]:
    """The list literal bfcl passes to Popen for vLLM: constants, None for expressions."""
    from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler

    src = textwrap.dedent(inspect.getsource(OSSHandler.spin_up_local_server))
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value == "vllm":
            return [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
    raise AssertionError("bfcl's vllm command not found")


def test_vllm_command_is_bfcls_plus_max_model_len():
    cmd = vllm_backend.vllm_command("Qwen/Qwen3-0.6B", port=1053, num_gpus=1,
                                    gpu_memory_utilization=0.9, max_model_len=40960)
    flags = _bfcl_vllm_flags()
    assert len(cmd) == len(flags) + 2
    for ours, theirs in zip(cmd, flags, strict=False):
        if theirs is not None:
            assert ours == theirs
    assert cmd == ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "1053", "--dtype", "bfloat16",
                   "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.9",
                   "--trust-remote-code", "--max-model-len", "40960"]
    lora = vllm_backend.vllm_command("m", enable_lora=True, max_lora_rank=16,
                                     lora_modules=["a=/x", "b=/y"])
    assert lora[-7:] == ["--enable-lora", "--max-lora-rank", "16", "--lora-modules", "a=/x",
                         "--lora-modules", "b=/y"]


def test_server_lifecycle_with_a_stand_in_process(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    with FakeCompletionsServer(KEY) as s:
        server = vllm_backend.VllmServer(sleeper, s.url, tmp_path / "serve.log", 10)
        with server:
            assert server.process.poll() is None
        assert server.process.poll() is not None  # terminated on exit
    crasher = [sys.executable, "-c", "import sys; sys.exit(3)"]
    server = vllm_backend.VllmServer(crasher, "http://127.0.0.1:9/v1", tmp_path / "x.log", 10)
    with pytest.raises(GenerationError, match="exited with code 3"):
        server.__enter__()
    missing = vllm_backend.VllmServer(["careful-no-such-vllm-binary"], "http://127.0.0.1:9/v1",
                                      tmp_path / "y.log", 1)
    with pytest.raises(GenerationError, match="pip install"):
        missing.__enter__()


def test_attach_uses_the_single_served_model_and_server_tokens():
    with FakeCompletionsServer("my-served-name", max_model_len=32768) as s:
        handler = vllm_backend.build("Qwen/Qwen3-0.6B", 0.001)
        info = vllm_backend.attach(handler, s.url, tokenizer_kind="server",
                                   max_model_len=20000)
        assert info["served_model"] == "my-served-name"
        assert handler.max_context_length == 20000
        assert len(handler.tokenizer.tokenize("a b c")) == 3
        with pytest.raises(GenerationError, match="hf"):
            handler.tokenizer.apply_chat_template([])


def test_backends_refuse_the_wrong_handler():
    with pytest.raises(GenerationError, match="anthropic"):
        vllm_backend.build("claude-haiku-4-5-20251001-FC", 0.001)
    from careful_engine.generation import anthropic_backend

    with pytest.raises(GenerationError, match="ClaudeHandler"):
        anthropic_backend.build(KEY, api_key="x", base_url="http://127.0.0.1:9")


@pytest.mark.parametrize("served_len", ["abc", [1], 1e400, -5, True, 0])
def test_attach_ignores_a_served_length_that_is_not_a_length(served_len):
    """The endpoint's /v1/models answer is input: a max_model_len that is not a positive whole
    number is left out (the configured length holds), never an internal error."""
    with FakeCompletionsServer("my-served-name", max_model_len=served_len) as s:
        handler = vllm_backend.build("Qwen/Qwen3-0.6B", 0.001)
        info = vllm_backend.attach(handler, s.url, tokenizer_kind="server",
                                   max_model_len=20000)
    assert info["max_context_length"] == handler.max_context_length == 20000


# ------------------------------------------------- every line written is read back by score

def _read_back(path: Path):
    from careful_engine.core import runs

    files, problems = runs.find_result_files(path.parents[2])
    assert not problems
    [rf] = files
    return runs.load_result_file(rf)


def test_an_entry_holding_a_line_separator_is_read_back_and_kept_by_the_sort(tmp_path):
    """Lines are written with U+2028, U+2029 and NEL raw (JSON allows them in strings); read
    back split at those too, such an entry was missed by the totals and deleted from the file
    when the finished file was sorted."""
    from careful_engine.generation import results

    writer = results.ResultWriter(tmp_path / "r", KEY)
    texts = {"multi_turn_base_2": "ok", "multi_turn_base_0": "Done.\u2028More?\u2029\x85",
             "multi_turn_base_1": "fine"}
    for entry_id, text in texts.items():
        writer.write({"id": entry_id, "result": [[text]]})
    path = results.result_path(tmp_path / "r", KEY, "multi_turn_base")
    assert "\u2028" in path.read_text(encoding="utf-8")  # (written raw)
    assert len(results.read_entries(path)) == 3
    assert results.totals(tmp_path / "r", KEY, ["multi_turn_base"])["conversations"] == {
        "multi_turn_base": {"written": 3}}
    writer.sort("multi_turn_base")
    assert {e["id"]: e["result"][0][0] for e in results.read_entries(path)} == texts
    assert _read_back(path).entries.keys() == set(texts)


def test_every_line_generate_writes_is_one_score_reads(tmp_path, monkeypatch):
    """An entry longer or deeper than a result line may be, or one that would grow the file
    past the size a result file is read with, is written as an inference error that says why
    (token counts kept), so ``careful score`` never skips what generate wrote. A lone
    surrogate from the model is kept, escaped."""
    from careful_engine.core import runs
    from careful_engine.generation import results

    writer = results.ResultWriter(tmp_path / "r", KEY)
    ids = [f"multi_turn_base_{i}" for i in range(6)]
    counts = {"input_token_count": [[5, 6]], "output_token_count": [[1, 2]], "latency": [[0.1]]}
    huge = {"id": ids[0], "result": [["x" * (runs.MAX_ENTRY_CHARS + 10)]], **counts}
    deep: list = []
    for _ in range(runs.MAX_DEPTH + 5):
        deep = [deep]
    whys = [writer.write(huge),
            writer.write({"id": ids[1], "result": [[deep]], **counts}),
            writer.write({"id": ids[2], "result": [["said \ud800 and \udfff"]], **counts})]
    assert "characters" in whys[0] and "nests deeper" in whys[1] and whys[2] is None
    path = results.result_path(tmp_path / "r", KEY, "multi_turn_base")
    monkeypatch.setattr(results, "MAX_RESULT_BYTES",
                        path.stat().st_size + results._ERROR_ROOM + 3000)
    whys += [writer.write({"id": ids[3], "result": [["y" * 1000]], **counts}),
             writer.write({"id": ids[4], "result": [["z" * 3000]], **counts})]
    assert whys[3] is None and "would grow past" in whys[4]
    loaded = _read_back(path)
    assert list(loaded.entries) == ids[:5]  # every line read back
    assert [p.message for p in loaded.problems if p.id in ids[:5]
            and "error string" not in p.message] == []
    for i in (0, 1, 4):
        entry = loaded.entries[ids[i]]
        assert entry["result"].startswith("Error during inference: ")
        if i != 4:  # (the file's last room holds no token counts)
            assert entry["input_token_count"] == [[5, 6]] and entry["latency"] == [[0.1]]
    assert loaded.entries[ids[2]]["result"] == [["said \ud800 and \udfff"]]


def test_a_run_whose_conversation_outgrows_a_result_line_scores(tmp_path, monkeypatch):
    """Through ``generate``: a model whose calls make a conversation longer than a result
    line may be gets an inference error for it, and the run completes."""
    from careful_engine.core import runs
    from careful_engine.generation import results

    monkeypatch.setattr(runs, "MAX_ENTRY_CHARS", 60_000)
    arg = "x" * 25_000
    call = '<tool_call>\n{"name": "ls", "arguments": {"a": "' + arg + '"}}\n</tool_call>'
    with FakeCompletionsServer(KEY, responder=lambda r: call if len(
            [m for m in r.body["prompt"].split("<tool_call>")]) < 4 else "Done.") as s:
        report, _ = _run(tmp_path / "r", s, limit=1)
    assert report.status == "complete"
    path = results.result_path(tmp_path / "r", KEY, "multi_turn_base")
    [entry] = _read_back(path).entries.values()
    assert len(path.read_text()) < 10_000
    assert entry["result"].startswith("Error during inference: the conversation's result line "
                                      "is ")
    assert entry["result"].endswith(" characters long, more than the 60,000 a line is read with")
    assert len(entry["input_token_count"]) == 4  # the counts of every turn are kept


@pytest.mark.parametrize("usage", [10**10, 10**11, -1, True, 1.5])
def test_usage_that_score_would_refuse_is_a_malformed_answer(usage):
    from careful_engine.generation.retry import completion_problem, message_problem

    completion = {"choices": [{"text": "ok"}],
                  "usage": {"prompt_tokens": usage, "completion_tokens": 1}}
    assert "not token counts" in completion_problem(completion)
    message = {"content": [], "usage": {"input_tokens": 1, "output_tokens": usage}}
    assert "output_tokens is" in message_problem(message)
    assert "not a token count" in message_problem(message)
    big = {"choices": [{"text": "x" * (2 * 2**20 + 1)}],
           "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    assert "characters" in completion_problem(big)


def test_sorting_and_a_full_file_keep_every_line_readable(tmp_path, monkeypatch):
    """Sorting a finished file keeps a lone surrogate escaped (it rewrote it raw, and the
    UTF-8 write failed); a file near its size cap takes a short inference-error line, and
    when even that does not fit the run stops with a GenerationError, never writing past."""
    from careful_engine.generation import results

    writer = results.ResultWriter(tmp_path / "r", KEY)
    writer.write({"id": "multi_turn_base_1", "result": [["ok"]]})
    writer.write({"id": "multi_turn_base_0", "result": [["echo('\ud800')"]]})
    writer.sort("multi_turn_base")
    path = results.result_path(tmp_path / "r", KEY, "multi_turn_base")
    loaded = _read_back(path)
    assert list(loaded.entries) == ["multi_turn_base_0", "multi_turn_base_1"]
    assert loaded.entries["multi_turn_base_0"]["result"] == [["echo('\ud800')"]]

    size = path.stat().st_size
    monkeypatch.setattr(results, "MAX_RESULT_BYTES", size + results._ERROR_ROOM + 200)
    counts = {"input_token_count": [[1] * 10_000]}
    why = writer.write({"id": "multi_turn_base_2", "result": [["x" * 500]], **counts})
    assert "would grow past" in why
    entry = _read_back(path).entries["multi_turn_base_2"]
    assert "input_token_count" not in entry  # no room for them
    monkeypatch.setattr(results, "MAX_RESULT_BYTES", path.stat().st_size + 50)
    with pytest.raises(GenerationError, match="is full"):
        writer.write({"id": "multi_turn_base_3", "result": [["y"]]})
    assert path.stat().st_size <= results.MAX_RESULT_BYTES


def test_usage_whose_logged_input_would_exceed_a_token_count_is_malformed():
    from careful_engine.core.decode import MAX_TOKEN_COUNT
    from careful_engine.generation.retry import message_problem

    half = MAX_TOKEN_COUNT // 2 + 1
    usage = {"input_tokens": half, "output_tokens": 1, "cache_read_input_tokens": half}
    assert "adds up" in message_problem({"content": [], "usage": usage})
    usage["cache_read_input_tokens"] = 5
    assert message_problem({"content": [], "usage": usage}) is None


@pytest.mark.parametrize("answers", [["x"], 5, {"0": 7}, {"0": [{"answer": ["yes"]}]},
                                     {"0": [{"answer": {"a": 1}}, "yes", None]}])
def test_totals_read_user_answers_of_any_shape(tmp_path, answers):
    """A result file edited by hand (or by another tool) between sessions: careful_user_answers
    of the wrong shape counts as no answers instead of stopping generate's summary with
    AttributeError or TypeError."""
    from careful_engine.generation import results

    writer = results.ResultWriter(tmp_path / "r", KEY)
    writer.write({"id": "multi_turn_base_0", "result": [["ok"]],
                  "careful_user_answers": answers})
    writer.write({"id": "multi_turn_base_1", "result": [["ok"]],
                  "careful_user_answers": {"0": [{"answer": "yes"}, {"answer": "restate"}]}})
    out = results.totals(tmp_path / "r", KEY, ["multi_turn_base"])
    assert out["user_answers"] == {"yes": 1, "no": 0, "restate": 1}
