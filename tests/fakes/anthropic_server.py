"""A local fake of the Anthropic Messages API, for tests (no network, no key).

It speaks the real wire format on ``127.0.0.1`` (port chosen by the OS): ``POST /v1/messages``
answers a ``message`` object (or, for ``"stream": true``, the server-sent events of one), and
``POST /v1/messages/count_tokens`` a rough count. Replies come from a queue
(:meth:`FakeMessagesServer.enqueue`), else from a ``responder`` callable, else ``"ok"``; a reply
may be an error (429/529 with ``retry-after``, 500, ...). Every request is recorded.

Usage::

    with FakeMessagesServer(responder=lambda req: text_reply("hi")) as server:
        client = anthropic.Anthropic(api_key="test", base_url=server.url)
        ...
        assert server.requests[0].body["model"] == "..."
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackServer

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

_ids = itertools.count(1)


@dataclass
class Reply:
    """One HTTP answer: a status, a JSON body and extra headers (optionally delayed)."""

    status: int = 200
    body: dict = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received: float

    def header(self, name: str) -> str | None:
        """A request header, by case-insensitive name."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    @property
    def api_key(self) -> str | None:
        """The key sent as ``x-api-key`` or as an ``Authorization: Bearer`` token."""
        bearer = self.header("authorization") or ""
        return self.header("x-api-key") or (bearer[7:] if bearer.startswith("Bearer ") else None)

    @property
    def text(self) -> str:
        """Every text the request sent (system and message contents), joined."""
        if not isinstance(self.body, dict):
            return ""
        return json.dumps(
            {"system": self.body.get("system"), "messages": self.body.get("messages")},
            ensure_ascii=False,
        )


def usage(input_tokens: int = 10, output_tokens: int = 5, cache_creation_input_tokens: int = 0,
          cache_read_input_tokens: int = 0) -> dict:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": cache_creation_input_tokens,
        "cache_read_input_tokens": cache_read_input_tokens,
    }


def message(
    content: list[dict],
    *,
    model: str | None = None,
    stop_reason: str = "end_turn",
    usage_: dict | None = None,
    id: str | None = None,
) -> dict:
    """A ``message`` object as the API returns it (``model`` filled from the request if None)."""
    return {
        "id": id or f"msg_fake_{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage_ or usage(),
    }


def text_reply(text: str, **kw: Any) -> Reply:
    return Reply(200, message([{"type": "text", "text": text}], **kw))


def tool_use_reply(name: str, input: dict, *, text: str | None = None, id: str | None = None,
                   **kw: Any) -> Reply:
    content = [{"type": "text", "text": text}] if text else []
    content.append({"type": "tool_use", "id": id or f"toolu_fake_{next(_ids):06d}",
                    "name": name, "input": input})
    return Reply(200, message(content, stop_reason="tool_use", **kw))


def error_reply(status: int, msg: str = "fake error", *, retry_after: float | None = None,
                error_type: str | None = None) -> Reply:
    """An API error; 429 and 529 usually carry ``retry-after`` (seconds, may be fractional)."""
    headers = {}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    body = {"type": "error",
            "error": {"type": error_type or ERROR_TYPES.get(status, "api_error"), "message": msg}}
    return Reply(status, body, headers)


Responder = Callable[[Recorded], "Reply | dict | str"]


def _sse(msg: dict) -> bytes:
    """The server-sent events of a streamed message."""
    events: list[tuple[str, dict]] = []
    head = {**msg, "content": [], "stop_reason": None,
            "usage": {**msg["usage"], "output_tokens": 1}}
    events.append(("message_start", {"type": "message_start", "message": head}))
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        elif block["type"] == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start, delta = block, None
        events.append(("content_block_start",
                       {"type": "content_block_start", "index": i, "content_block": start}))
        if delta:
            events.append(("content_block_delta",
                           {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": msg.get("stop_sequence")},
        "usage": {"output_tokens": msg["usage"]["output_tokens"]},
    }))
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()


class FakeMessagesServer(LoopbackServer):
    """A threaded HTTP server faking ``/v1/messages``; use as a context manager."""

    def __init__(self, responder: Responder | None = None):
        self.responder = responder
        self.requests: list[Recorded] = []
        self._queue: deque[Reply | dict | str] = deque()
        self._lock = threading.Lock()

    # -------------------------------------------------------------- control

    @property
    def url(self) -> str:
        """The base URL to give the client (``anthropic.Anthropic(base_url=...)``)."""
        return self.root

    def enqueue(self, *replies: Reply | dict | str) -> None:
        """Replies for the next requests to /v1/messages, in order (before the responder)."""
        with self._lock:
            self._queue.extend(replies)

    def messages_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.rstrip("/") == "/v1/messages"]

    # -------------------------------------------------------------- answers

    def _next(self, req: Recorded) -> Reply:
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
        reply = queued if queued is not None else (
            self.responder(req) if self.responder else "ok"
        )
        if isinstance(reply, str):
            reply = text_reply(reply)
        elif isinstance(reply, dict):
            reply = Reply(200, reply)
        body = dict(reply.body)
        if body.get("type") == "message" and not body.get("model"):
            body["model"] = (req.body or {}).get("model", "fake-model")
        return Reply(reply.status, body, reply.headers, reply.delay)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: bytes, headers: dict[str, str],
                      content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                self.send_header("request-id", f"req_fake_{next(_ids):06d}")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                req = Recorded("POST", self.path, dict(self.headers.items()), body, time.time())
                with fake._lock:
                    fake.requests.append(req)
                path = self.path.split("?")[0].rstrip("/")
                if path == "/v1/messages/count_tokens":
                    tokens = max(1, len(req.text) // 4)
                    self._send(200, json.dumps({"input_tokens": tokens}).encode(), {})
                    return
                if path != "/v1/messages":
                    err = error_reply(404, f"no route {self.path}")
                    self._send(404, json.dumps(err.body).encode(), {})
                    return
                reply = fake._next(req)
                if reply.delay:
                    time.sleep(reply.delay)
                streamed = isinstance(body, dict) and body.get("stream") is True
                if streamed and reply.status == 200 and reply.body.get("type") == "message":
                    self._send(200, _sse(reply.body), reply.headers, "text/event-stream")
                else:
                    self._send(reply.status, json.dumps(reply.body).encode(), reply.headers)

            def do_GET(self) -> None:  # noqa: N802
                err = error_reply(404, f"no route {self.path}")
                self._send(404, json.dumps(err.body).encode(), {})

        return Handler
