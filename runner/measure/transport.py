"""An httpx transport that stamps every socket read, so a chunk's arrival is the read's time.

The measurement client times a chunk by the network read that carried it, not by when
httpx has finished parsing it: :class:`StampingTransport` is httpx's own
``HTTPTransport`` whose connection pool uses a network backend wrapping each stream's
``read`` with ``time.perf_counter()``. The stream is what httpx exposes as the
response's ``network_stream`` extension, so ``stream.last_read`` is at hand while
iterating. Should httpx's internals differ (another version), the transport is the
plain one and the client falls back to stamping after the read returns.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

__all__ = ["StampingStream", "StampingTransport", "read_time"]


class StampingStream(httpcore.NetworkStream):
    """A network stream that remembers when its last read returned."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self.last_read = 0.0

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, timeout)
        self.last_read = time.perf_counter()
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return StampingStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _StampingBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return StampingStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return StampingStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class StampingTransport(httpx.HTTPTransport):
    """httpx's HTTP/1.1 transport, its pool on the stamping network backend."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(limits=limits)
        with contextlib.suppress(AttributeError, TypeError):  # another httpx/httpcore: keep the plain pool
            self._pool = httpcore.ConnectionPool(
                ssl_context=httpx.create_ssl_context(),
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
                http1=True,
                http2=False,
                network_backend=_StampingBackend(),
            )


def read_time(stream: object) -> float | None:
    """When the stream's last read returned, if it is a stamping stream."""
    return stream.last_read if isinstance(stream, StampingStream) else None
