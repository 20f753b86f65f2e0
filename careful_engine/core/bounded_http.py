"""Bounded HTTP for generation and the LLM annotator: every request has a connect timeout,
a total deadline and a cap on the bytes it may receive.

httpx's timeouts apply to each socket operation, so a body that trickles one byte every two
seconds, or headers that do, never times out, and an endless body grows memory without bound
(bfcl also asks for ``timeout=72000`` on every completion). Here every socket operation of a
request gets at most the time left before the request's deadline, and every byte received
counts against the cap, whatever the caller asked for; past either, the request fails with a
timeout or a read error, which the backends treat as a retryable endpoint failure. Bodies are
requested uncompressed and a compressed answer is refused, so the cap bounds what is held in
memory.

Both SDKs (anthropic, openai) use ``httpx2``; :func:`client` builds the ``httpx2.Client`` they
are given. The limits are per attempt (the callers' retry policies bound the attempts).
Env proxies are not routed through these limits (loopback endpoints need none).
"""

from __future__ import annotations

import errno
import math
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore2
import httpx2

from careful_engine.core.safe_text import visible

CONNECT_TIMEOUT = 10.0  # seconds to open a connection
REQUEST_TIMEOUT = 600.0  # seconds for a whole request: connect, send, headers and body
MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # bytes received per request, headers included


@dataclass(frozen=True)
class Limits:
    """Per request: connect timeout, total deadline (seconds), bytes received (cap)."""

    connect: float = CONNECT_TIMEOUT
    total: float = REQUEST_TIMEOUT
    max_bytes: int = MAX_RESPONSE_BYTES

    @classmethod
    def from_env(cls, connect: float | None = None, total: float | None = None,
                 max_bytes: int | None = None) -> Limits:
        """Given values, else ``CAREFUL_CONNECT_TIMEOUT``, ``CAREFUL_REQUEST_TIMEOUT``,
        ``CAREFUL_MAX_RESPONSE_BYTES``, else the defaults."""
        def pick(value: Any, env: str, default: Any, kind: type) -> Any:
            if value is None:
                raw = os.getenv(env)
                value = kind(raw) if raw else default
            return value

        limits = cls(pick(connect, "CAREFUL_CONNECT_TIMEOUT", CONNECT_TIMEOUT, float),
                     pick(total, "CAREFUL_REQUEST_TIMEOUT", REQUEST_TIMEOUT, float),
                     pick(max_bytes, "CAREFUL_MAX_RESPONSE_BYTES", MAX_RESPONSE_BYTES, int))
        limits.check()
        return limits

    def check(self) -> None:
        for name in ("connect", "total"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"the {name} timeout must be a finite positive number of "
                                 f"seconds, not {v!r}")
        if not (isinstance(self.max_bytes, int) and self.max_bytes > 0):
            raise ValueError(f"the response size cap must be a positive number of bytes, "
                             f"not {self.max_bytes!r}")

    def describe(self) -> dict[str, float | int]:
        return {"connect_s": self.connect, "request_s": self.total,
                "max_response_bytes": self.max_bytes}


class _Request(threading.local):
    """The request in flight on this thread (a sync client sends and reads in one thread)."""

    deadline: float | None = None
    total: float = 0.0
    received: int = 0
    cap: int = 0


_current = _Request()


def _left(timeout: float | None) -> float | None:
    """The caller's timeout, cut to what is left of the request's deadline."""
    if _current.deadline is None:
        return timeout
    left = _current.deadline - time.monotonic()
    if left <= 0:
        raise httpcore2.ReadTimeout(f"no complete answer within the request deadline of "
                                    f"{_current.total:g} s")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, _left(timeout))
        if _current.deadline is not None:
            _current.received += len(data)
            if _current.received > _current.cap:
                raise httpcore2.ReadError(f"the answer exceeds {_current.cap} bytes")
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend, connect: float) -> None:
        self._inner = inner
        self._connect = connect

    def _timeout(self, timeout: float | None) -> float:
        left = _left(timeout)
        return self._connect if left is None else min(left, self._connect)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, self._timeout(timeout),
                                               local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore2.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, self._timeout(timeout),
                                                       socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class BoundedTransport(httpx2.HTTPTransport):
    """httpx2's transport with :class:`Limits` enforced on every request."""

    def __init__(self, limits: Limits, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limits = limits
        pool = self._pool
        if not isinstance(getattr(pool, "_network_backend", None), httpcore2.NetworkBackend):
            raise RuntimeError("httpcore2's connection pool has no network backend to bound; "
                               "this httpx2 is not the tested version")
        pool._network_backend = _Backend(pool._network_backend, limits.connect)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["accept-encoding"] = "identity"  # the cap counts what is held
        _current.deadline = time.monotonic() + self.limits.total
        _current.total = self.limits.total
        _current.received = 0
        _current.cap = self.limits.max_bytes
        response = super().handle_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.close()
            raise httpx2.RemoteProtocolError(f"the answer is compressed ({encoding}) although "
                                             "an uncompressed one was asked for",
                                             request=request)
        return response


def client(limits: Limits, **kwargs: Any) -> httpx2.Client:
    """An ``httpx2.Client`` whose requests are bounded by ``limits``."""
    timeout = httpx2.Timeout(limits.total, connect=limits.connect)
    return httpx2.Client(transport=BoundedTransport(limits), timeout=timeout,
                         follow_redirects=False, **kwargs)


def check_url(url: object, what: str) -> str:
    """An endpoint's base URL as given (``what`` names where it came from): printable ASCII,
    http or https, a host and a valid port; else ValueError with the value shown escaped
    (clients and bfcl's handlers raise their own errors on such a URL, mid-run)."""
    shown = f"'{visible(str(url))[:200]}'"
    if not isinstance(url, str) or not url or not all(0x21 <= ord(c) < 0x7F for c in url):
        raise ValueError(f"{what}: {shown} is not a URL (printable ASCII without spaces)")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL) as e:
        raise ValueError(f"{what}: {shown} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what}: {shown} is not an http:// or https:// URL with a host")
    return url


def check_port(value: object, what: str) -> int:
    """A TCP port number (1-65535) from an option or an environment value, else ValueError."""
    text = str(value)
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535):
        raise ValueError(f"{what}: '{visible(text)[:40]}' is not a port number (1-65535)")
    return int(text)


def check_endpoints(*, base_url: str | None = None, endpoint: str | None = None,
                    local_server: bool = False) -> None:
    """The endpoints a run will call, checked as given, before a client or bfcl's handler
    parses them mid-run: ``endpoint`` (--endpoint); ``base_url`` (--base-url), else
    ANTHROPIC_BASE_URL when set; with ``local_server``, bfcl's LOCAL_SERVER_PORT and
    LOCAL_SERVER_ENDPOINT when set. ValueError naming the first bad one."""
    if endpoint is not None:
        check_url(endpoint, "--endpoint")
    if base_url is not None:
        check_url(base_url, "--base-url")
    elif os.getenv("ANTHROPIC_BASE_URL"):
        check_url(os.environ["ANTHROPIC_BASE_URL"], "ANTHROPIC_BASE_URL")
    if not local_server:
        return
    if os.getenv("LOCAL_SERVER_PORT") is not None:
        check_port(os.environ["LOCAL_SERVER_PORT"], "LOCAL_SERVER_PORT")
    if os.getenv("LOCAL_SERVER_ENDPOINT") is not None:
        check_url(f"http://{os.environ['LOCAL_SERVER_ENDPOINT']}:1/v1",
                  "LOCAL_SERVER_ENDPOINT (a host name)")


# ---------------------------------------------------------------- classifying failures

_UNREACHABLE = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL)


def unreachable(error: BaseException) -> str | None:
    """Why a failed request could not reach the endpoint at all (refused, no such host),
    or None. Such a request was never sent: retrying it at once is pointless."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return f"host not found ({e})"
        if isinstance(e, OSError) and e.errno in _UNREACHABLE:
            return os.strerror(e.errno).lower()
        text = str(e)
        if isinstance(e, httpx2.ConnectError | httpcore2.ConnectError):
            for marker in ("Connection refused", "Name or service not known",
                           "nodename nor servname", "No address associated",
                           "Temporary failure in name resolution"):
                if marker in text:
                    return "connection refused" if marker == "Connection refused" else \
                        f"host not found ({text})"
        e = e.__cause__ or e.__context__
    return None
