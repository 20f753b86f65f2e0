"""A loopback endpoint that misbehaves on purpose, at the socket level.

Each behaviour answers every request the same way: ``stall`` (accept, read, never answer),
``trickle-body`` (headers, then one body byte every ``interval`` seconds), ``trickle-headers``
(the status line and headers one byte at a time), ``endless`` (a Content-Length body streamed
without end), ``endless-chunked``, ``huge-header`` (an endless header line), ``close``
(close at once), ``reset`` (RST), ``garbage`` (bytes that are not HTTP), ``not-json``,
``wrong-json`` (valid JSON, wrong shape: ``body`` gives it), ``gzip-bomb`` (a compressed body),
``bad-length`` (Content-Length longer than the body, then close), ``redirect`` (to itself),
``status`` (``status`` with ``body``), ``slow-ok`` (a valid answer after ``interval``).
``GET .../models`` is answered normally unless ``break_models`` is set, so a vLLM client can
attach before the completions misbehave. Requests are counted.

Usage::

    with HostileServer("trickle-body", interval=2.0) as s:
        ...  s.url  (…/v1), s.requests
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
from typing import Any

OK_COMPLETION = {
    "id": "cmpl-hostile", "object": "text_completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "text": "Done.", "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


def refused_url() -> str:
    """A loopback URL on which nothing listens (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"


class HostileServer:
    def __init__(self, behaviour: str, *, interval: float = 0.2, body: Any = None,
                 status: int = 500, model: str = "m", break_models: bool = False,
                 headers: dict[str, str] | None = None) -> None:
        self.behaviour = behaviour
        self.interval = interval
        self.body = body
        self.status = status
        self.model = model
        self.break_models = break_models
        self.headers = headers or {}
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def root(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    def __enter__(self) -> HostileServer:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> str | None:
        conn.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            rest += chunk
        return head.split(b"\r\n", 1)[0].decode("latin-1")

    def _send(self, conn: socket.socket, status: int, body: bytes,
              headers: dict[str, str] | None = None) -> None:
        hdrs = {"content-type": "application/json", "content-length": str(len(body)),
                **self.headers, **(headers or {})}
        head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
        conn.sendall(head.encode() + b"\r\n" + body)

    def _conn(self, conn: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                line = self._read_request(conn)
                if line is None:
                    return
                with self._lock:
                    self.requests.append(line)
                if " /v1/models" in line and not self.break_models:
                    self._send(conn, 200, json.dumps({"object": "list", "data": [{
                        "id": self.model, "object": "model", "max_model_len": 40960}]}).encode())
                    continue
                if " /tokenize" in line and not self.break_models:
                    self._send(conn, 200, json.dumps({"count": 5, "max_model_len": 40960,
                                                      "tokens": [1, 2, 3, 4, 5]}).encode())
                    continue
                if not self._misbehave(conn):
                    return
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _sleep(self, seconds: float) -> bool:
        return not self._stop.wait(seconds)

    def _misbehave(self, conn: socket.socket) -> bool:
        """Answer one request; False closes the connection."""
        b = self.behaviour
        if b == "stall":
            while self._sleep(0.1):
                pass
            return False
        if b == "trickle-body":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: 100000\r\n\r\n")
            while self._sleep(self.interval):
                conn.sendall(b" ")
            return False
        if b == "trickle-headers":
            for byte in b"HTTP/1.1 200 OK\r\nx-slow: " + b"a" * 100000:
                if not self._sleep(self.interval):
                    break
                conn.sendall(bytes([byte]))
            return False
        if b in ("endless", "endless-chunked"):
            chunked = b == "endless-chunked"
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         + (b"transfer-encoding: chunked\r\n\r\n" if chunked
                            else b"content-length: 100000000000\r\n\r\n") + b'{"a": "')
            block = b"x" * 65536
            block = (b"%x\r\n" % len(block)) + block + b"\r\n" if chunked else block
            while not self._stop.is_set():
                conn.sendall(block)
            return False
        if b == "huge-header":
            conn.sendall(b"HTTP/1.1 200 OK\r\nx-huge: ")
            while not self._stop.is_set():
                conn.sendall(b"a" * 65536)
            return False
        if b == "close":
            return False
        if b == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if b == "garbage":
            conn.sendall(b"\x00\xff garbage, not HTTP at all\r\n\r\n")
            return False
        if b == "not-json":
            self._send(conn, 200, b"<html>this is not json</html>")
            return True
        if b == "wrong-json":
            self._send(conn, 200, json.dumps(self.body).encode())
            return True
        if b == "gzip-bomb":
            self._send(conn, 200, gzip.compress(b"0" * 5_000_000),
                       {"content-encoding": "gzip"})
            return True
        if b == "bad-length":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: 5000\r\n\r\n{\"a\": 1")
            return False
        if b == "redirect":
            self._send(conn, 307, b"", {"location": self.url + "/completions"})
            return True
        if b == "status":
            body = self.body if isinstance(self.body, bytes) else json.dumps(
                self.body or {"error": {"message": "hostile", "type": "api_error"}}).encode()
            self._send(conn, self.status, body)
            return True
        if b == "slow-ok":
            if not self._sleep(self.interval):
                return False
            self._send(conn, 200, json.dumps(self.body or OK_COMPLETION).encode())
            return True
        raise ValueError(f"unknown behaviour {b!r}")


def wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
