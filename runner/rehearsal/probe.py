"""One rehearsal probe: a tiny request, its bounded exchange, and the parts of the reply that decide.

A probe's whole exchange is bounded by the timeout (an overall deadline, not per read:
a server trickling bytes cannot stretch it) and its reply by 1 MiB
(:func:`runner.measure.bounds.fetch`); a probe over either is "no answer, rerun". Every
reply is hostile input: JSON is read with the strict reader (depth and size bound),
SSE frames with the bounded decoder, and what a result keeps from the server is clipped
(:data:`TEXT_BYTES`, :data:`MAX_IDS`, :data:`ERROR_BYTES`).

``parts`` are the reply parts a judgement reads, the same for a plain JSON answer and a
stream: ``text``, ``completion_tokens`` (from ``usage``), ``token_ids`` (the first
:data:`MAX_IDS`) and ``token_ids_count``, ``finish_reason``, ``stop_reason``,
``streamed``, and for a stream ``frames``, ``usage_chunk`` (a frame carrying ``usage``
with ``choices: []``), ``done`` (``[DONE]`` seen), ``error_frame`` and, when some frames
were not JSON (or one was over 1 MiB), ``malformed_frames``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..measure.reply import error_of, read_frame

if TYPE_CHECKING:
    import socket

    import httpx

__all__ = [
    "MAX_TOKENS",
    "NO_ANSWER",
    "PRIORITY",
    "WRONG_PROBE",
    "Judge",
    "Outcome",
    "Probe",
    "ProbeResult",
    "error_of",
    "has_choice",
    "not_sent",
    "request_bytes",
    "send",
    "token_count",
]

MAX_TOKENS = 8
PRIORITY = 10
NO_ANSWER = "no answer, rerun"
WRONG_PROBE = "probe wrong for this server"
TEXT_BYTES = 1024          # the reply text a result keeps (JSON-encoded bytes)
MAX_IDS = 64               # token ids a result keeps
ERROR_BYTES = 8 << 10      # an error body a result keeps
MAX_FRAMES = 4096          # SSE frames read from one probe's stream
Outcome = Literal["pass", "no_answer", "wrong"]


@dataclass(frozen=True)
class Probe:
    name: str
    path: str
    body: dict[str, Any]
    expect: str

    @property
    def streams(self) -> bool:
        return self.body.get("stream") is True


@dataclass(frozen=True)
class ProbeResult:
    name: str
    endpoint: str
    request: dict[str, Any]
    request_sha256: str
    status: int | None
    ok: bool
    outcome: Outcome
    reading: str | None
    detail: str
    error: Any
    finish_reason: str | None
    stop_reason: Any
    usage: Any
    response_sha256: str | None
    elapsed_s: float
    response_text: str | None
    parts: dict[str, Any] = field(default_factory=dict)

    @property
    def answered(self) -> bool:
        """An HTTP answer below 500 came back (a 4xx is an answer; 5xx and transport errors are not)."""
        return self.status is not None and self.status < 500

    def to_json(self) -> dict[str, Any]:
        return {
            "probe": self.name, "endpoint": self.endpoint, "request": self.request,
            "request_sha256": self.request_sha256, "status": self.status, "ok": self.ok,
            "reading": self.reading, "detail": self.detail, "error": self.error,
            "finish_reason": self.finish_reason, "stop_reason": self.stop_reason, "usage": self.usage,
            "response_sha256": self.response_sha256, "elapsed_s": round(self.elapsed_s, 6),
            "parts": self.parts,
        }


Judge = Callable[[Probe, int, Any, dict[str, Any]], tuple[bool, Outcome, str]]
"""(probe, HTTP status, parsed body, parts) -> (ok, outcome, detail)."""


def has_choice(body: Any) -> bool:
    """The answer carries a first choice (an object) to read."""
    return isinstance(body, dict) and read_frame(body).choice is not None


def token_count(parts: dict[str, Any]) -> int | None:
    """Generated tokens by the reply's own account: ``usage.completion_tokens``, else its token ids."""
    for key in ("completion_tokens", "token_ids_count"):
        value = parts.get(key)
        if isinstance(value, int):
            return value
    return None


def request_bytes(probe: Probe) -> tuple[bytes, str]:
    data = json.dumps(probe.body, separators=(",", ":"), sort_keys=True).encode()
    return data, hashlib.sha256(data).hexdigest()


def not_sent(probe: Probe, detail: str, elapsed: float = 0.0) -> ProbeResult:
    """A probe that got no answer (or was not sent): "no answer, rerun"."""
    return ProbeResult(probe.name, probe.path, probe.body, request_bytes(probe)[1], None, False, "no_answer",
                       NO_ANSWER, detail, {"transport": detail}, None, None, None, None, elapsed, None)


def _choice_parts(obj: dict[str, Any], parts: dict[str, Any], ids: list[int]) -> None:
    """Fold one answer or stream frame into ``parts`` (text, ids, finish and stop reasons, usage)."""
    from ..measure.record import MAX_COUNT, clip

    read = read_frame(obj)
    usage = read.usage
    if isinstance(usage, dict):
        tokens = usage.get("completion_tokens")
        if type(tokens) is int and 0 <= tokens <= MAX_COUNT:
            parts["completion_tokens"] = tokens
        if read.usage_only:
            parts["usage_chunk"] = True
    if read.choice is None:
        return
    if isinstance(read.text, str):
        parts["text"] = clip((parts.get("text") or "") + read.text, TEXT_BYTES)
    chunk_ids = read.token_ids
    if chunk_ids is not None:
        if all(type(t) is int for t in chunk_ids):
            parts["token_ids_count"] = (parts.get("token_ids_count") or 0) + len(chunk_ids)
            ids.extend(chunk_ids[:max(0, MAX_IDS - len(ids))])
            parts["token_ids"] = list(ids)
        else:
            parts["token_ids_malformed"] = True
    if read.finish_reason is not None:
        parts["finish_reason"] = read.finish_reason
        parts["stop_reason"] = read.stop_reason


def _json_parts(body: Any) -> dict[str, Any]:
    parts: dict[str, Any] = {"streamed": False, "text": None, "completion_tokens": None, "token_ids": None,
                             "token_ids_count": None, "finish_reason": None, "stop_reason": None}
    if isinstance(body, dict):
        _choice_parts(body, parts, [])
    return parts


def _stream_parts(raw: bytes) -> tuple[Any, dict[str, Any]]:
    """A stream's frames folded into parts, and its last JSON frame (the usage chunk when there is one)."""
    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    from ..measure.bounds import MAX_PROBE_BYTES
    from ..measure.record import bounded_json
    from ..measure.sse import SSEDecoder, SSEOverflow

    parts: dict[str, Any] = {"streamed": True, "text": None, "completion_tokens": None, "token_ids": None,
                             "token_ids_count": None, "finish_reason": None, "stop_reason": None, "frames": 0,
                             "usage_chunk": False, "done": False, "error_frame": None}
    ids: list[int] = []
    decoder = SSEDecoder(max_line=MAX_PROBE_BYTES)
    try:
        frames = decoder.feed(raw) + decoder.close()
    except SSEOverflow as exc:
        parts["malformed_frames"], parts["overflow"] = 1, str(exc)
        return None, parts
    last: Any = None
    for frame in frames[:MAX_FRAMES]:
        parts["frames"] += 1
        if frame.strip() == "[DONE]":
            parts["done"] = True
            continue
        try:
            obj = read_json(frame, "an SSE frame", max_bytes=MAX_PROBE_BYTES)
        except FormatError:
            parts["malformed_frames"] = parts.get("malformed_frames", 0) + 1
            continue
        if not isinstance(obj, dict):
            continue
        last = obj
        if read_frame(obj).error:
            parts["error_frame"] = bounded_json(obj, ERROR_BYTES)
            continue
        _choice_parts(obj, parts, ids)
    return last, parts


def send(client: httpx.Client, url: str, probe: Probe, timeout: float, judge: Judge,
         on_socket: Callable[[socket.socket | None], None] | None = None) -> tuple[ProbeResult, bool]:
    """One probe, its whole exchange within ``timeout`` seconds and its reply within 1 MiB; (result, timed out).

    ``on_socket`` is given the request's socket at its first I/O (to cut it from another thread)."""
    import httpx

    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    from ..measure.bounds import MAX_PROBE_BYTES, ReplyRefused, fetch
    from ..measure.record import bounded_json

    data, request_sha = request_bytes(probe)
    began = time.perf_counter()
    try:
        reply = fetch(client, "POST", url.rstrip("/") + probe.path, content=data, deadline_s=timeout,
                      max_bytes=MAX_PROBE_BYTES, what="the reply", headers={"content-type": "application/json"},
                      on_socket=on_socket)
    except httpx.TimeoutException as exc:
        detail = f"no complete answer within {timeout:g} s ({type(exc).__name__})"
        return not_sent(probe, detail, time.perf_counter() - began), True
    except ReplyRefused as exc:
        return not_sent(probe, str(exc), time.perf_counter() - began), False
    except (httpx.HTTPError, OSError) as exc:
        return not_sent(probe, f"{type(exc).__name__}: {exc}"[:500], time.perf_counter() - began), False
    elapsed = time.perf_counter() - began
    raw = reply.body
    text = reply.text
    event_stream = reply.headers.get("content-type", "").startswith("text/event-stream")
    body: Any
    if reply.status == 200 and (event_stream or (probe.streams and raw.lstrip().startswith(b"data:"))):
        body, parts = _stream_parts(raw)
    else:
        try:
            body = read_json(raw, "the reply", max_bytes=MAX_PROBE_BYTES)
        except FormatError:
            body = text
        parts = _json_parts(body)
        if probe.streams and reply.status == 200:
            parts["not_streamed"] = True
    ok, outcome, detail = judge(probe, reply.status, body, parts)
    error = bounded_json(error_of(body)[0], ERROR_BYTES) if reply.status >= 400 else parts.get("error_frame")
    reading = None if ok else (NO_ANSWER if outcome == "no_answer" else WRONG_PROBE)
    usage = body.get("usage") if isinstance(body, dict) else None
    return ProbeResult(
        probe.name, probe.path, probe.body, request_sha, reply.status, ok, outcome, reading, detail, error,
        parts.get("finish_reason"), parts.get("stop_reason"), bounded_json(usage, ERROR_BYTES),
        hashlib.sha256(raw).hexdigest(), elapsed, text, parts,
    ), False
