"""A run's backend is prepared by the engine, not the front end: the handler, the server, the
spend guard and the settings careful_run.json records; endpoints from the environment are
checked by one function that generation and annotation share."""

from __future__ import annotations

import contextlib

import pytest

from careful_engine.annotation import llm
from careful_engine.annotation.errors import AnnotationError
from careful_engine.core import bounded_http
from careful_engine.generation import GenerationError, RunOptions, anthropic_backend, vllm_backend
from careful_engine.generation.retry import RetryPolicy
from careful_engine.generation.runner import DEFAULT_THREADS, default_backend

CLAUDE = "claude-haiku-4-5-20251001-FC"
OPEN = "Qwen/Qwen3-8B"
POLICY = RetryPolicy(max_attempts=3, max_wait=5.0)
LIMITS = bounded_http.Limits(connect=2.0, total=30.0, max_bytes=1000)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for k in ("ANTHROPIC_BASE_URL", "LOCAL_SERVER_PORT", "LOCAL_SERVER_ENDPOINT"):
        monkeypatch.delenv(k, raising=False)


def _options(tmp_path, model: str, backend: str) -> RunOptions:
    return RunOptions(model=model, run_dir=tmp_path, backend=backend)


def test_the_backend_and_threads_follow_the_handler_class():
    assert default_backend("ClaudeHandler") == "anthropic"
    assert default_backend("QwenFCHandler") == "vllm"
    assert DEFAULT_THREADS == {"anthropic": 1, "vllm": 16}


def test_anthropic_prepare_records_the_manifest_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    options = _options(tmp_path, CLAUDE, "anthropic")
    handler, guard = anthropic_backend.prepare(options, tmp_path, budget=2.5, max_tokens=123,
                                               policy=POLICY, limits=LIMITS)
    assert guard.budget == 2.5
    assert handler.max_output_tokens == 123
    settings = options.settings
    assert settings["api_model"] == handler.model_name
    assert settings["base_url"] == "https://api.anthropic.com"
    assert settings["budget_usd"] == 2.5 and settings["temperature"] is None
    assert settings["retries"] == {"max_attempts": 3, "max_wait_s": 5.0}
    assert settings["limits"] == LIMITS.describe()


def test_anthropic_prepare_needs_a_budget_and_a_key(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    options = _options(tmp_path, CLAUDE, "anthropic")
    with pytest.raises(GenerationError, match="needs a --budget"):
        anthropic_backend.prepare(options, tmp_path, budget=None, policy=POLICY, limits=LIMITS)
    with pytest.raises(GenerationError, match="ANTHROPIC_API_KEY is not set"):
        anthropic_backend.prepare(options, tmp_path, budget=1.0, policy=POLICY, limits=LIMITS)
    assert options.settings == {}


def test_vllm_prepare_on_an_endpoint_starts_nothing(tmp_path):
    options = _options(tmp_path, OPEN, "vllm")
    prepared = vllm_backend.prepare(options, tmp_path, temperature=0.5,
                                    endpoint="http://127.0.0.1:9/v1/", tokenizer="server",
                                    policy=POLICY, limits=LIMITS)
    assert isinstance(prepared.server, contextlib.nullcontext)
    assert options.settings == {"temperature": 0.5, "limits": LIMITS.describe(),
                                "retries": {"max_attempts": 3, "max_wait_s": 5.0}}


def test_vllm_prepare_builds_the_serve_command_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_SERVER_PORT", "2345")
    monkeypatch.setenv("LOCAL_SERVER_ENDPOINT", "gpu-host")
    options = _options(tmp_path, OPEN, "vllm")
    prepared = vllm_backend.prepare(options, tmp_path, temperature=0.001, tokenizer="server",
                                    policy=POLICY, limits=LIMITS)
    assert isinstance(prepared.server, vllm_backend.VllmServer)
    assert prepared.server.base_url == "http://gpu-host:2345/v1"
    assert prepared.server.log_path == tmp_path / "vllm_serve.log"
    cmd = options.settings["vllm_command"]
    assert cmd == prepared.server.command and cmd[cmd.index("--port") + 1] == "2345"


def test_vllm_prepare_refuses_an_unknown_tokenizer(tmp_path):
    options = _options(tmp_path, OPEN, "vllm")
    with pytest.raises(GenerationError, match="--tokenizer 'fast'; choose one of auto, hf"):
        vllm_backend.prepare(options, tmp_path, temperature=0.001, tokenizer="fast",
                             policy=POLICY, limits=LIMITS)


def test_check_endpoints_checks_the_local_server_only_when_asked(monkeypatch):
    monkeypatch.setenv("LOCAL_SERVER_PORT", "99999")
    bounded_http.check_endpoints(base_url="https://example.test")
    with pytest.raises(ValueError, match="LOCAL_SERVER_PORT: '99999' is not a port number"):
        bounded_http.check_endpoints(local_server=True)
    with pytest.raises(ValueError, match="--endpoint: 'nope' is not"):
        bounded_http.check_endpoints(endpoint="nope", local_server=True)


def test_annotation_and_generation_share_the_base_url_check(monkeypatch):
    """A bad ANTHROPIC_BASE_URL is named the same way by both."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "ftp://x")
    with pytest.raises(ValueError) as generation:
        bounded_http.check_endpoints()
    with pytest.raises(AnnotationError) as annotation:
        llm.make_client(api_key="k")
    assert str(annotation.value) == str(generation.value)
    assert str(generation.value).startswith("ANTHROPIC_BASE_URL: 'ftp://x' is not an http")
