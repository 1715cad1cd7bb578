"""An httpx transport that stamps every socket read and bounds every request by an overall deadline.

The measurement client times a chunk by the network read that carried it, not by when
httpx has finished parsing it: :class:`StampingTransport` is httpx's own
``HTTPTransport`` whose connection pool uses a network backend wrapping each stream's
``read`` with ``time.perf_counter()``. The stream is what httpx exposes as the
response's ``network_stream`` extension, so ``stream.last_read`` is at hand while
iterating.

The same wrapper enforces an *overall* deadline (httpx's timeouts are per read, so a
server trickling one byte at a time never trips them): inside :func:`deadline_guard`,
every connect, read and write of the calling thread waits at most until the guard's
deadline, and raises httpx's timeout once it has passed; the guard's ``on_socket`` is
told the socket of the first I/O (the measurement client's cutter shuts it down on a
cancel, which wakes a blocked read at once), so a request is covered from its first
byte, headers included, on a new or a pooled connection.

Every transport of the process verifies TLS with one shared context (:func:`tls_context`,
httpx's default one), built the first time a connection to an ``https`` origin is made:
a context costs tens of milliseconds of the runner's time to build, and a window over
plain HTTP never needs one.

Should httpx's internals differ (another version), the transport is the plain one
(:attr:`StampingTransport.guarded` is false): the client then falls back to stamping
after the read returns, and the cutter shuts the socket once the response headers are in.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

__all__ = ["StampingStream", "StampingTransport", "deadline_guard", "move_deadline", "read_time", "tls_context"]

_tls: list[ssl.SSLContext] = []
_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """The process's one TLS context (httpx's default verification), built on first use."""
    with _tls_lock:
        if not _tls:
            _tls.append(httpx.create_ssl_context())
        return _tls[0]


@dataclass
class _Guard:
    deadline: float | None
    on_socket: Callable[[socket.socket | None], None] | None
    stream: object = None

    def remaining(self, timeout: float | None, error: type[Exception], stream: object) -> float | None:
        """The timeout to use for one blocking call: the caller's, capped by the deadline."""
        if self.on_socket is not None and stream is not None and stream is not self.stream:
            self.stream = stream
            sock = stream.get_extra_info("socket") if isinstance(stream, httpcore.NetworkStream) else None
            self.on_socket(sock)
        if self.deadline is None:
            return timeout
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise error("overall deadline passed")
        return left if timeout is None else min(timeout, left)


_local = threading.local()


def _guard() -> _Guard | None:
    return getattr(_local, "guard", None)


def move_deadline(deadline: float | None) -> None:
    """Move the calling thread's guard deadline (a decode bound counted from the first token)."""
    guard = _guard()
    if guard is not None:
        guard.deadline = deadline


@contextlib.contextmanager
def deadline_guard(deadline: float | None,
                   on_socket: Callable[[socket.socket | None], None] | None = None) -> Iterator[None]:
    """Bound this thread's connects, reads and writes by ``deadline`` (``perf_counter`` time).

    Nested guards are not combined: the innermost one applies.
    """
    outer = _guard()
    _local.guard = _Guard(deadline, on_socket)
    try:
        yield
    finally:
        _local.guard = outer


class StampingStream(httpcore.NetworkStream):
    """A network stream that remembers when its last read returned and honours the thread's guard."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self.last_read = 0.0

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        guard = _guard()
        if guard is not None:
            timeout = guard.remaining(timeout, httpcore.ReadTimeout, self)
        data = self._inner.read(max_bytes, timeout)
        self.last_read = time.perf_counter()
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        guard = _guard()
        if guard is not None:
            timeout = guard.remaining(timeout, httpcore.WriteTimeout, self)
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        guard = _guard()
        if guard is not None:
            timeout = guard.remaining(timeout, httpcore.ConnectTimeout, None)
        return StampingStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _StampingBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        guard = _guard()
        if guard is not None:
            timeout = guard.remaining(timeout, httpcore.ConnectTimeout, None)
        return StampingStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        guard = _guard()
        if guard is not None:
            timeout = guard.remaining(timeout, httpcore.ConnectTimeout, None)
        return StampingStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Pool(httpcore.ConnectionPool):
    """httpcore's pool, given the shared TLS context when it first connects to an https origin."""

    def create_connection(self, origin: httpcore.Origin) -> httpcore.ConnectionInterface:
        if origin.scheme == b"https" and getattr(self, "_ssl_context", None) is None:
            self._ssl_context = tls_context()
        return super().create_connection(origin)


class StampingTransport(httpx.HTTPTransport):
    """httpx's HTTP/1.1 transport, its pool on the stamping, deadline-guarded network backend."""

    def __init__(self, limits: httpx.Limits | None = None) -> None:
        limits = limits or httpx.Limits()
        self.guarded = False
        try:  # httpx's own __init__ would build a TLS context per transport: the pool gets the shared one
            self._pool = _Pool(
                ssl_context=None,
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
                http1=True,
                http2=False,
                network_backend=_StampingBackend(),
            )
            self.guarded = True
        except (AttributeError, TypeError):  # another httpx/httpcore: the plain pool
            super().__init__(verify=tls_context(), limits=limits)


def read_time(stream: object) -> float | None:
    """When the stream's last read returned, if it is a stamping stream."""
    return stream.last_read if isinstance(stream, StampingStream) else None
