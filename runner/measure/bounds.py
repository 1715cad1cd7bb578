"""Bounds on everything the measurement client reads from a server: time and bytes.

A server is outside input. Every HTTP exchange tally has with one (the streaming
requests of a wave, ``/v1/models``, ``/metrics``, the rehearsal's probes) is bounded by
an *overall* deadline, not only httpx's per-read timeouts (a server trickling one byte
every half second never trips those), and by a size cap on what is kept
(``docs/measure.md``, "Bounds"):

- a streaming request: its ``deadline_s``, else :data:`DEFAULT_REQUEST_DEADLINE_S` (600 s);
- an SSE line or event: :data:`MAX_SSE_LINE_BYTES` (1 MiB), then the request fails;
- content chunks per request: :func:`chunk_limit` (2 x max_tokens + 64);
- an error body: :data:`MAX_ERROR_BODY_BYTES` (64 KiB, the rest unread);
- a non-streamed answer: :data:`MAX_ANSWER_BYTES` (8 MiB);
- ``/metrics``: :data:`MAX_METRICS_BYTES` (16 MiB) and 10 s, else a scrape problem;
- ``/v1/models``: :data:`MAX_MODELS_BYTES` (1 MiB) and 10 s;
- a rehearsal probe's reply: :data:`MAX_PROBE_BYTES` (1 MiB) and ``--timeout``.

:func:`fetch` is the one way to make a bounded non-streaming request: it streams the
reply, stops at the cap and (through :func:`.transport.deadline_guard`) at the deadline.
Requests ask for ``Accept-Encoding: identity``; a server that compresses anyway is
decompressed with the same cap on the decoded bytes (gzip and deflate; anything else
is refused).
"""

from __future__ import annotations

import socket
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import httpx

from .transport import deadline_guard

__all__ = [
    "DEFAULT_REQUEST_DEADLINE_S",
    "IDENTITY",
    "MAX_ANSWER_BYTES",
    "MAX_ERROR_BODY_BYTES",
    "MAX_METRICS_BYTES",
    "MAX_MODELS_BYTES",
    "MAX_PROBE_BYTES",
    "MAX_SSE_LINE_BYTES",
    "Reply",
    "ReplyRefused",
    "chunk_limit",
    "content_encoding",
    "fetch",
    "mib",
    "read_capped",
]

DEFAULT_REQUEST_DEADLINE_S = 600.0   # a streaming request without a deadline of its own
MAX_SSE_LINE_BYTES = 1 << 20
MAX_ERROR_BODY_BYTES = 64 << 10
MAX_ANSWER_BYTES = 8 << 20
MAX_METRICS_BYTES = 16 << 20
MAX_MODELS_BYTES = 1 << 20
MAX_PROBE_BYTES = 1 << 20
IDENTITY = {"accept-encoding": "identity"}


def chunk_limit(max_tokens: int) -> int:
    """Content chunks a request may deliver: each carries at least one token, so more is a broken server."""
    return 2 * max_tokens + 64


def mib(size: int) -> str:
    """``1 MiB``, ``64 KiB``: a limit as people read it."""
    if size >= 1 << 20 and size % (1 << 20) == 0:
        return f"{size >> 20} MiB"
    if size >= 1 << 10 and size % (1 << 10) == 0:
        return f"{size >> 10} KiB"
    return f"{size} bytes"


class ReplyRefused(Exception):
    """A reply over its size cap, or in an encoding tally does not decode."""


@dataclass(frozen=True)
class Reply:
    """A bounded non-streaming reply."""

    status: int
    headers: httpx.Headers
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def content_encoding(response: httpx.Response) -> str:
    """The reply's ``content-encoding``, lower case (``identity`` when it names none)."""
    return response.headers.get("content-encoding", "identity").strip().lower() or "identity"


def _decoded(response: httpx.Response, limit: int) -> Iterator[bytes]:
    """The response's body bytes, decompressed (gzip/deflate) with ``limit`` on the output."""
    encoding = content_encoding(response)
    if encoding == "identity":
        yield from response.iter_raw()
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ReplyRefused(f"the reply is compressed with {encoding!r} although identity was asked")
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 16 if "gzip" in encoding else zlib.MAX_WBITS)
    for raw in response.iter_raw():
        data = raw
        while data:
            try:
                out = inflate.decompress(data, limit + 1)
            except zlib.error as exc:
                raise ReplyRefused(f"the reply's {encoding} body is corrupt: {exc}") from None
            yield out
            data = inflate.unconsumed_tail
            if len(out) > limit:
                return


def read_capped(response: httpx.Response, limit: int, deadline: float | None, what: str) -> bytes:
    """Read a body up to ``limit`` bytes; ``ReplyRefused`` beyond, ``httpx.ReadTimeout`` past ``deadline``."""
    parts: list[bytes] = []
    size = 0
    for part in _decoded(response, limit):
        size += len(part)
        parts.append(part)
        if size > limit:
            raise ReplyRefused(f"{what} is over the {mib(limit)} limit")
        if deadline is not None and time.perf_counter() > deadline:
            raise httpx.ReadTimeout("overall deadline passed", request=response.request)
    return b"".join(parts)


def fetch(client: httpx.Client, method: str, url: str, *, deadline_s: float, max_bytes: int, what: str,
          content: bytes | None = None, headers: Mapping[str, str] | None = None,
          on_socket: Callable[[socket.socket | None], None] | None = None) -> Reply:
    """One request, its whole exchange within ``deadline_s`` and its body within ``max_bytes``.

    Raises ``httpx.TimeoutException`` when the deadline passes (however the server
    dribbles), ``httpx.HTTPError`` for transport errors, :class:`ReplyRefused` for a
    body over the cap. ``on_socket`` is given the request's socket at its first I/O
    (to shut it down from another thread on a cancel).
    """
    deadline = time.perf_counter() + deadline_s
    timeout = httpx.Timeout(deadline_s)
    with deadline_guard(deadline, on_socket), \
            client.stream(method, url, content=content, headers={**IDENTITY, **(headers or {})},
                          timeout=timeout) as response:
        body = read_capped(response, max_bytes, deadline, what)
        return Reply(response.status_code, response.headers, body)
