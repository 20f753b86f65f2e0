"""A local stand-in for an OpenAI-compatible completions endpoint (what ``vllm serve`` offers).

On ``127.0.0.1`` (port chosen by the OS) it serves ``GET /v1/models`` (one model, with vLLM's
``max_model_len``), ``POST /v1/completions`` (a ``text_completion`` object whose text comes from
a ``responder(request) -> str``) and vLLM's ``POST /tokenize`` (one token per whitespace-separated
word). Usage counts the prompt the same way. Every request is recorded. No GPU, no vllm.

Usage::

    with FakeCompletionsServer("Qwen/Qwen3-8B", responder=lambda req: "[ls(a=True)]") as s:
        OpenAI(base_url=s.url, api_key="EMPTY").completions.create(...)
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackServer

_ids = itertools.count(1)


def count_tokens(text: str) -> int:
    return len(text.split())


@dataclass
class Recorded:
    method: str
    path: str
    body: Any
    received: float


class FakeCompletionsServer(LoopbackServer):
    """A threaded fake of vLLM's OpenAI-compatible server; use as a context manager."""

    def __init__(self, model: str, responder: Callable[[Recorded], str] | None = None,
                 max_model_len: int = 40960) -> None:
        self.model = model
        self.responder = responder or (lambda req: "ok")
        self.max_model_len = max_model_len
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The OpenAI base URL (``.../v1``)."""
        return self.root + "/v1"

    def completions(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.rstrip("/") == "/v1/completions"]

    def _completion(self, req: Recorded) -> dict:
        text = self.responder(req)
        prompt = str((req.body or {}).get("prompt", ""))
        p, c = count_tokens(prompt), max(1, count_tokens(text))
        return {
            "id": f"cmpl-fake-{next(_ids)}", "object": "text_completion",
            "created": int(time.time()), "model": (req.body or {}).get("model", self.model),
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:  # noqa: N802
                with fake._lock:
                    fake.requests.append(Recorded("GET", self.path, None, time.time()))
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{
                        "id": fake.model, "object": "model", "owned_by": "vllm",
                        "max_model_len": fake.max_model_len}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                req = Recorded("POST", self.path, body, time.time())
                with fake._lock:
                    fake.requests.append(req)
                path = self.path.rstrip("/")
                if path == "/tokenize":
                    n = count_tokens(str((body or {}).get("prompt", "")))
                    self._send(200, {"count": n, "max_model_len": fake.max_model_len,
                                     "tokens": list(range(n))})
                elif path == "/v1/completions":
                    self._send(200, fake._completion(req))
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

        return Handler
