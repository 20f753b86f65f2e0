"""Open models through bfcl's own OSS handlers and an OpenAI-compatible completions endpoint.

bfcl's ``OSSHandler`` builds the raw prompt itself (``_format_prompt``), counts its tokens with
a tokenizer, asks ``POST {base}/completions`` for ``min(4096, context - prompt - 2)`` tokens
(1000 if the prompt already fills the context) at the run's temperature, and decodes the text
with the model's registered decoder. This module gives such a handler what bfcl's
``spin_up_local_server`` would (an endpoint, a tokenizer, a context length) without importing
bfcl's generation pipeline, and can start ``vllm serve`` the way bfcl does.

Tokenizers: ``hf`` loads the model's tokenizer with transformers, as bfcl does (``pip install
.[vllm]`` brings it); ``server`` asks the endpoint's own ``POST /tokenize`` (vLLM serves it
with the same tokenizer) and needs nothing local. Handlers that apply a chat template through
the tokenizer (``tiiuae/Falcon3-*-FC``, bfcl's quick-testing handler) need ``hf``.

Context length: ``min(--max-model-len, model context)``, the paper's setting with 65 536; the
same value is passed to ``vllm serve --max-model-len`` so server and handler agree.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from careful_engine.core import bfcl, bounded_http
from careful_engine.generation import files
from careful_engine.generation.errors import ApiUnavailable, GenerationError
from careful_engine.generation.retry import (
    RetryPolicy,
    call_with_retries,
    classify,
    completion_problem,
)

if TYPE_CHECKING:
    from careful_engine.generation.runner import RunOptions

DEFAULT_PORT = 1053  # bfcl_eval/constants/eval_config.py LOCAL_SERVER_PORT
DEFAULT_MAX_MODEL_LEN = 65_536
TOKENIZERS = ("auto", "hf", "server")


_clients: dict[bounded_http.Limits, Any] = {}


def _http(limits: bounded_http.Limits | None = None) -> Any:
    limits = limits or bounded_http.Limits.from_env()
    if limits not in _clients:
        _clients[limits] = bounded_http.client(limits)
    return _clients[limits]


def _get_json(url: str, limits: bounded_http.Limits | None = None) -> Any:
    r = _http(limits).get(url)
    r.raise_for_status()
    return r.json()


def _post_json(url: str, body: dict, limits: bounded_http.Limits | None = None) -> Any:
    r = _http(limits).post(url, json=body)
    r.raise_for_status()
    return r.json()


def served_models(base_url: str, limits: bounded_http.Limits | None = None) -> list[dict]:
    """``GET {base_url}/models``: the models an OpenAI-compatible endpoint serves (entries
    with a text id only)."""
    data = _get_json(base_url.rstrip("/") + "/models", limits)
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        return []
    return [m for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]


class GuardedCompletions:
    """``client.completions.create`` with bounded retries (:func:`.retry.call_with_retries`):
    a refused connection stops the run at once; timeouts, lost connections, 5xx and malformed
    answers are retried up to the policy's attempts, then the run stops (only malformed
    answers: :class:`~.errors.MalformedAnswers`, which the runner may record as the
    conversation's inference error instead); another 4xx is the request's fault (an
    inference error, as in bfcl)."""

    def __init__(self, client: Any, policy: RetryPolicy | None = None) -> None:
        self.client = client
        self.policy = policy or RetryPolicy()
        self.completions = self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def create(self, **request: Any) -> Any:
        return call_with_retries(lambda: self.client.completions.create(**request),
                                 policy=self.policy, endpoint=str(self.client.base_url),
                                 problem=completion_problem)


MAX_TOKEN_COUNT = 10_000_000


def _tokenize_problem(out: Any) -> str | None:
    if not isinstance(out, dict):
        return "/tokenize did not answer an object"
    tokens, count = out.get("tokens"), out.get("count")
    if isinstance(tokens, list) and len(tokens) <= MAX_TOKEN_COUNT:
        return None
    if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= MAX_TOKEN_COUNT:
        return None
    return "/tokenize answered no usable token count"


class ServerTokenizer:
    """Token counts from a vLLM server's ``POST /tokenize`` (no local tokenizer needed)."""

    def __init__(self, base_url: str, model: str, limits: bounded_http.Limits | None = None,
                 policy: RetryPolicy | None = None) -> None:
        root = base_url.rstrip("/")
        self.url = (root[: -len("/v1")] if root.endswith("/v1") else root) + "/tokenize"
        self.model = model
        self.model_max_length: int | None = None
        self.limits = limits
        self.policy = policy or RetryPolicy()

    def tokenize(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        out = call_with_retries(lambda: _post_json(self.url, body, self.limits),
                                policy=self.policy, endpoint=self.url,
                                problem=_tokenize_problem)
        ctx = out.get("max_model_len")
        if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0:
            self.model_max_length = ctx
        tokens = out.get("tokens")
        return list(tokens) if isinstance(tokens, list) else [0] * out["count"]

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        raise GenerationError("this handler applies a chat template through the tokenizer; "
                              "use --tokenizer hf (pip install .[vllm] brings transformers)")


def hf_tokenizer(model_path_or_id: str, local: bool = False) -> tuple[Any, int | None]:
    """The model's tokenizer and context length, loaded as bfcl loads them."""
    try:
        from transformers import AutoConfig, AutoTokenizer
    except ModuleNotFoundError as e:
        raise GenerationError("--tokenizer hf needs transformers (pip install .[vllm]); "
                              "with an endpoint, --tokenizer server needs nothing") from e
    kwargs = {"pretrained_model_name_or_path": model_path_or_id, "trust_remote_code": True}
    if local:
        kwargs["local_files_only"] = True
    tokenizer = AutoTokenizer.from_pretrained(**kwargs)
    config = AutoConfig.from_pretrained(**kwargs)
    ctx = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    return tokenizer, int(ctx) if ctx else None


def build(key: str, temperature: float) -> Any:
    """bfcl's registered handler for ``key``, as bfcl generate builds it."""
    import importlib

    entry = bfcl.registry().get(key)
    if entry is None:
        raise GenerationError(f"{key!r} is not in bfcl-eval's model registry")
    try:
        cls = getattr(importlib.import_module(entry.handler_module), entry.handler_class)
    except ModuleNotFoundError as e:
        raise GenerationError(f"{key!r}'s handler needs the package {e.name!r}") from e
    if not issubclass(cls, bfcl.oss_handler_class()):
        raise GenerationError(f"{key!r} uses {entry.handler_class}, not an OSS handler; the "
                              "vllm backend runs open models (use --backend anthropic for "
                              "Claude)")
    return cls(model_name=entry.model_name, temperature=temperature, registry_name=key,
               is_fc_model=entry.is_fc_model)


def attach(handler: Any, base_url: str, *, model: str | None = None, tokenizer: Any = None,
           tokenizer_kind: str = "auto", max_model_len: int = DEFAULT_MAX_MODEL_LEN,
           local_model_path: str | None = None, api_key: str = "EMPTY",
           limits: bounded_http.Limits | None = None,
           policy: RetryPolicy | None = None) -> dict[str, Any]:
    """Point an OSS handler at an endpoint; give it a tokenizer and a context length.

    ``model`` is the name the endpoint serves (default: the local path or the Hugging Face id,
    as bfcl sends it; if the endpoint serves exactly one other model, that one). Returns what
    was chosen, for the manifest.
    """
    from openai import OpenAI

    wanted = model or local_model_path or handler.model_name_huggingface
    limits = limits or bounded_http.Limits.from_env()
    served = []
    try:
        served = served_models(base_url, limits)
    except Exception as e:  # noqa: BLE001 - an endpoint without /models still serves
        if classify(e)[0] == "unreachable":
            raise ApiUnavailable(f"endpoint unavailable: {base_url}: {classify(e)[1]}") from e
    names = [m.get("id") for m in served]
    if model is None and names and wanted not in names and len(names) == 1:
        wanted = names[0]
    handler.model_path_or_id = wanted
    handler.base_url = base_url
    handler.client = GuardedCompletions(
        OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=limits.total,
               http_client=bounded_http.client(limits)), policy)
    ctx: int | None = None
    kind = tokenizer_kind
    if tokenizer is None:
        if kind == "auto":
            try:
                import transformers  # noqa: F401

                kind = "hf"
            except ModuleNotFoundError:
                kind = "server"
        if kind == "hf":
            tokenizer, ctx = hf_tokenizer(local_model_path or handler.model_name_huggingface,
                                          local=local_model_path is not None)
        else:
            tokenizer = ServerTokenizer(base_url, wanted, limits, policy)
    elif kind == "auto":
        kind = "given"
    for m in served:
        served_len = m.get("max_model_len") if m.get("id") == wanted else None
        # the server's answer: a whole number of tokens, else left out (the default holds)
        if type(served_len) is int and 0 < served_len <= MAX_TOKEN_COUNT:
            ctx = min(ctx or served_len, served_len)
    ctx = min(max_model_len, ctx) if ctx else max_model_len
    handler.tokenizer = tokenizer
    handler.max_context_length = ctx
    return {"endpoint": base_url, "served_model": wanted, "tokenizer": kind,
            "max_context_length": ctx}


# ---------------------------------------------------------------- vllm serve


def vllm_command(model_path_or_id: str, *, port: int = DEFAULT_PORT, dtype: str = "bfloat16",
                 num_gpus: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, enable_lora: bool = False,
                 max_lora_rank: int | None = None,
                 lora_modules: list[str] | None = None) -> list[str]:
    """bfcl's ``vllm serve`` command (base_oss_handler.py spin_up_local_server), plus
    ``--max-model-len`` when given."""
    cmd = ["vllm", "serve", str(model_path_or_id), "--port", str(port), "--dtype", str(dtype),
           "--tensor-parallel-size", str(num_gpus), "--gpu-memory-utilization",
           str(gpu_memory_utilization), "--trust-remote-code"]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if enable_lora:
        cmd.append("--enable-lora")
    if max_lora_rank is not None:
        cmd += ["--max-lora-rank", str(max_lora_rank)]
    for module in lora_modules or []:
        cmd += ["--lora-modules", module]
    return cmd


def wait_ready(base_url: str, process: subprocess.Popen | None = None,
               timeout: float = 1800.0, interval: float = 1.0,
               refused_is_final: bool = False, limits: bounded_http.Limits | None = None) -> None:
    """Poll ``GET {base_url}/models`` until it answers 200, as bfcl does (with a timeout).

    ``refused_is_final`` (an existing ``--endpoint``): a refused connection or an unknown host
    fails at once as "endpoint unavailable" instead of being waited out, and so does an answer
    no wait changes (a 4xx other than 408 and 429: a wrong path or a refused key).
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise GenerationError(f"the server exited with code {process.returncode} before "
                                  "it was ready; see its log")
        try:
            status = _http(limits).get(base_url.rstrip("/") + "/models").status_code
            if status == 200:
                return
            if refused_is_final and 400 <= status < 500 and status not in (408, 429):
                raise GenerationError(
                    f"endpoint unusable: {base_url}/models answered HTTP {status}; an "
                    "OpenAI-compatible endpoint answers 200 there (is the URL's /v1 right?)")
        except GenerationError:
            raise
        except Exception as e:  # noqa: BLE001 - classified: only "unreachable" may be final
            kind, why = classify(e)
            if kind == "bug":
                raise
            if kind == "unreachable" and refused_is_final:
                raise GenerationError(f"endpoint unavailable: {base_url}: {why}") from e
        if time.monotonic() > deadline:
            raise GenerationError(f"{base_url} not ready after {timeout:.0f} s")
        time.sleep(interval)


@dataclass
class VllmServer:
    """``vllm serve`` as a child process, its output in a log file; a context manager."""

    command: list[str]
    base_url: str
    log_path: Path
    ready_timeout: float = 1800.0
    limits: bounded_http.Limits | None = None
    process: subprocess.Popen | None = field(default=None, init=False)

    def __enter__(self) -> VllmServer:
        files.ensure_dir(self.log_path.parent, self.log_path.parent.parent.parent)
        log = files.open_append(self.log_path, binary=True)
        try:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, env=os.environ.copy())
        except FileNotFoundError as e:
            log.close()
            raise GenerationError("vllm is not installed: pip install .[vllm], or give "
                                  "--endpoint") from e
        self._log = log
        try:
            wait_ready(self.base_url, self.process, self.ready_timeout, limits=self.limits)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        p = self.process
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log = getattr(self, "_log", None)
        if log is not None:
            log.close()


# ---------------------------------------------------------------- a run's backend


@dataclass
class Prepared:
    """An open-model run's backend: bfcl's handler, the server to hold open while the run goes
    (``vllm serve``, or nothing for an existing endpoint) and ``attach``, which points the
    handler at the endpoint once it is up and returns the settings it found for the
    manifest."""

    handler: Any
    server: contextlib.AbstractContextManager
    attach: Callable[[], dict]


def prepare(options: RunOptions, folder: Path, *, temperature: float,
            endpoint: str | None = None, served: str | None = None, tokenizer: str = "auto",
            max_model_len: int = DEFAULT_MAX_MODEL_LEN, port: int | None = None,
            num_gpus: int = 1, gpu_memory_utilization: float = 0.9,
            local_model_path: str | None = None, ready_timeout: float = 1800.0,
            policy: RetryPolicy, limits: bounded_http.Limits) -> Prepared:
    """The handler and server of an open-model run: an existing ``endpoint``, or ``vllm
    serve`` on ``port`` (default LOCAL_SERVER_PORT, else bfcl's 1053) logging to
    ``folder/vllm_serve.log``; the backend's settings recorded in ``options.settings`` for
    the manifest. GenerationError on an unknown tokenizer kind or model."""
    if tokenizer not in TOKENIZERS:
        raise GenerationError(f"--tokenizer {tokenizer!r}; choose one of "
                              f"{', '.join(TOKENIZERS)}")
    handler = build(options.model, temperature)
    options.settings.update({"temperature": temperature, "limits": limits.describe(),
                             "retries": policy.describe()})
    if endpoint is not None:
        given = endpoint.rstrip("/")

        def attach_given() -> dict:
            wait_ready(given, timeout=ready_timeout, refused_is_final=True, limits=limits)
            return attach(handler, given, model=served, tokenizer_kind=tokenizer,
                          max_model_len=max_model_len, local_model_path=local_model_path,
                          limits=limits, policy=policy)

        return Prepared(handler, contextlib.nullcontext(), attach_given)
    path = local_model_path or handler.model_name_huggingface
    tok, ctx = None, None
    if tokenizer in ("auto", "hf"):
        try:
            tok, ctx = hf_tokenizer(path, local=local_model_path is not None)
        except GenerationError:
            if tokenizer == "hf":
                raise
    port = port or int(os.getenv("LOCAL_SERVER_PORT", DEFAULT_PORT))
    length = min(max_model_len, ctx) if ctx else None
    cmd = vllm_command(path, port=port, num_gpus=num_gpus,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=length)
    base_url = f"http://{os.getenv('LOCAL_SERVER_ENDPOINT', 'localhost')}:{port}/v1"
    server = VllmServer(cmd, base_url, folder / "vllm_serve.log", ready_timeout, limits)
    options.settings.update({"vllm_command": cmd})

    def attach_started() -> dict:
        return attach(handler, base_url, model=served or path, tokenizer=tok,
                      tokenizer_kind="hf" if tok is not None else "server",
                      max_model_len=length or max_model_len,
                      local_model_path=local_model_path, limits=limits, policy=policy)

    return Prepared(handler, server, attach_started)
