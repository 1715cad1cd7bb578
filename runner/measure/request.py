"""One streaming request, measured: send, read SSE frames as they arrive, classify the outcome.

A chunk's arrival is the time the socket read that carried it returned
(:mod:`.transport`). Deadlines are enforced by a :class:`Cutter` thread that shuts the request's socket
down when its deadline, the wave deadline or a cancel comes (a blocked read then
returns at once; closing alone would not wake it). What had arrived is kept.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from .record import RequestRecord, Status, TokensSource
from .sse import SSEDecoder
from .transport import read_time

__all__ = ["Cutter", "Ticket", "run_request"]

_POLL_S = 0.02          # how often the cutter looks at the cancel event
_ERROR_BODY_LIMIT = 65536


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(eq=False)
class Ticket:
    """An in-flight request as the cutter sees it."""

    deadline: float | None
    reason: str | None = None
    sock: socket.socket | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, sock: socket.socket | None) -> None:
        """The request's socket; shut at once if the request was already cut."""
        with self.lock:
            self.sock = sock
            cut = self.reason is not None
        if cut:
            _shutdown(sock)

    def cut(self, reason: str) -> None:
        with self.lock:
            if self.reason is not None:
                return
            self.reason = reason
            sock = self.sock
        _shutdown(sock)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class Cutter:
    """Cuts in-flight requests at their own deadline, at the wave deadline, or on cancel."""

    def __init__(self, cancel: threading.Event | None, wave_deadline: float | None) -> None:
        self.cancel = cancel
        self.wave_deadline = wave_deadline
        self._cond = threading.Condition()
        self._tickets: set[Ticket] = set()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="tally-measure-cutter", daemon=True)
        self._thread.start()

    def stop_reason(self) -> str | None:
        """Why no new request may start now (``None`` = it may)."""
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        if self.wave_deadline is not None and time.perf_counter() >= self.wave_deadline:
            return "wave_deadline"
        return None

    def register(self, deadline: float | None) -> Ticket:
        ticket = Ticket(deadline)
        with self._cond:
            self._tickets.add(ticket)
            self._cond.notify()
        return ticket

    def release(self, ticket: Ticket) -> None:
        with self._cond:
            self._tickets.discard(ticket)

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(5)

    def _loop(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.perf_counter()
                wave_over = self.wave_deadline is not None and now >= self.wave_deadline
                cancelled = self.cancel is not None and self.cancel.is_set()
                wake = [t.deadline for t in self._tickets if t.deadline is not None and t.reason is None]
                for ticket in list(self._tickets):
                    if ticket.reason is not None:
                        continue
                    if cancelled:
                        ticket.cut("cancelled")
                    elif wave_over:
                        ticket.cut("wave_deadline")
                    elif ticket.deadline is not None and now >= ticket.deadline:
                        ticket.cut("deadline")
                if self.wave_deadline is not None and not wave_over:
                    wake.append(self.wave_deadline)
                timeout = min(wake) - now if wake else None
                if self.cancel is not None:
                    timeout = _POLL_S if timeout is None else min(timeout, _POLL_S)
                self._cond.wait(None if timeout is None else max(timeout, 0.0))


@dataclass
class _Progress:
    """What has arrived so far (owned by the request's thread)."""

    send_t: float
    chunk_t: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    ids_everywhere: bool = True
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    stop_reason: Any = None
    request_id: str | None = None
    done: bool = False
    clean_end: bool = False          # the body ended without a transport error
    not_streamed: bool = False
    error: Any = None
    error_reason: str | None = None

    def whole_answer(self, raw: bytes, arrived: float) -> None:
        """A non-streamed JSON answer: the whole completion as one chunk."""
        try:
            obj = json.loads(raw)
        except ValueError:
            self.error, self.error_reason = raw[:2000].decode("utf-8", "replace"), "answer is not JSON"
            return
        if not isinstance(obj, dict) or "error" in obj:
            self.error, self.error_reason = obj, f"error answer: {_error_message(obj)}"
            return
        self.not_streamed = True
        self.frame(json.dumps(obj), arrived)
        self.done = True

    def frame(self, data: str, arrived: float) -> None:
        if data == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            self.error = {"frame": data[:2000]}
            self.error_reason = "malformed SSE frame (not JSON)"
            return
        if not isinstance(obj, dict):
            return
        if "error" in obj or obj.get("object") == "error":
            # vLLM rejects a streaming request inside an HTTP 200: an error frame, then [DONE].
            body = obj.get("error", obj)
            self.error = obj
            message = body.get("message") if isinstance(body, dict) else body
            self.error_reason = f"error frame: {message}"
            return
        if self.request_id is None and isinstance(obj.get("id"), str):
            self.request_id = obj["id"]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = {k: int(v) for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
        choices = obj.get("choices")
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        text = choice.get("text")
        for key in ("delta", "message"):
            if text is None and isinstance(choice.get(key), dict):
                text = choice[key].get("content")
        ids = choice.get("token_ids")
        if isinstance(ids, list):
            content = len(ids) > 0
            count = len(ids)
        else:
            content = bool(text)
            count = 1
            if content:
                self.ids_everywhere = False
        if content:
            self.chunk_t.append(arrived - self.send_t)
            self.chunk_tokens.append(count)
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
            self.stop_reason = choice.get("stop_reason")


def _error_message(body: Any) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
        if body.get("detail"):
            return str(body["detail"])
    return str(body)[:300]


def run_request(http: httpx.Client, url: str, body: Mapping[str, Any], *, index: int, prompt_id: str,
                cutter: Cutter, deadline_s: float | None, read_timeout_s: float) -> RequestRecord:
    """Send one streaming request and measure it; never raises for what the server does."""
    seed = body.get("seed")
    max_tokens = int(body.get("max_tokens", 0))
    salt = str(body.get("cache_salt", ""))
    sent_at = utc_now()
    send_t = time.perf_counter()
    ticket = cutter.register(send_t + deadline_s if deadline_s is not None else None)
    progress = _Progress(send_t)
    http_status: int | None = None
    exception: tuple[str, str] | None = None
    read_timeout = read_timeout_s if deadline_s is None else min(read_timeout_s, deadline_s + 1.0)
    timeout = httpx.Timeout(connect=min(10.0, read_timeout), read=read_timeout, write=10.0, pool=read_timeout)
    try:
        with http.stream("POST", url, json=dict(body), timeout=timeout) as response:
            http_status = response.status_code
            if response.status_code != 200:
                raw = b""
                for part in response.iter_raw():
                    raw += part
                    if len(raw) > _ERROR_BODY_LIMIT:
                        break
                try:
                    progress.error = json.loads(raw)
                except ValueError:
                    progress.error = raw[:2000].decode("utf-8", "replace")
                progress.error_reason = f"HTTP {response.status_code}: {_error_message(progress.error)}"
            elif response.headers.get("content-type", "").startswith("application/json"):
                # A server that ignored stream=true: one answer, its tokens counted at its arrival.
                raw = response.read()
                progress.whole_answer(raw, time.perf_counter())
            else:
                stream = response.extensions.get("network_stream")
                ticket.attach(stream.get_extra_info("socket") if stream is not None else None)
                stamping = read_time(stream) is not None
                decoder = SSEDecoder()
                for raw in response.iter_raw():
                    # the time the socket read carrying these bytes returned (else: now)
                    arrived = stream.last_read if stamping else time.perf_counter()  # type: ignore[union-attr]
                    for data in decoder.feed(raw):
                        progress.frame(data, arrived)
                for data in decoder.close():
                    progress.frame(data, time.perf_counter())
                progress.clean_end = True
    except httpx.TimeoutException as exc:
        exception = ("timeout", f"{type(exc).__name__}: {exc}")
    except (httpx.HTTPError, OSError) as exc:
        exception = ("transport", f"{type(exc).__name__}: {exc}")
    finally:
        cutter.release(ticket)
    ended_s = time.perf_counter() - send_t
    return _finish(progress, index=index, prompt_id=prompt_id, sent_at=sent_at, ended_s=ended_s, seed=seed,
                   max_tokens=max_tokens, salt=salt, http_status=http_status, exception=exception,
                   cut=ticket.reason, deadline_s=deadline_s)


def _finish(p: _Progress, *, index: int, prompt_id: str, sent_at: str, ended_s: float, seed: Any, max_tokens: int,
            salt: str, http_status: int | None, exception: tuple[str, str] | None, cut: str | None,
            deadline_s: float | None) -> RequestRecord:
    source: TokensSource
    if p.usage is not None and "completion_tokens" in p.usage:
        delivered, source = p.usage["completion_tokens"], "usage"
    elif p.chunk_t and p.ids_everywhere:
        delivered, source = sum(p.chunk_tokens), "token_ids"
    elif p.chunk_t:
        delivered, source = len(p.chunk_t), "chunks"
    else:
        delivered, source = 0, "none"
    chunks = f"after {len(p.chunk_t)} chunks"
    status: Status
    reason: str | None = None
    if p.error_reason is not None:
        status, reason = "failed", p.error_reason
    elif p.done:
        status = "ok"  # everything arrived; a later transport hiccup loses nothing
        if p.not_streamed:
            reason = "the server answered without streaming (one chunk)"
    elif p.clean_end and p.finish_reason is not None and exception is None and cut is None:
        status, reason = "ok", "no [DONE] frame: the stream ended cleanly after its finish_reason"
    elif cut == "cancelled":
        status, reason = "cancelled", f"cancelled {chunks}"
    elif cut in ("deadline", "wave_deadline") or (exception is not None and exception[0] == "timeout"):
        which = {"deadline": f"request deadline {deadline_s:g} s" if deadline_s is not None else "deadline",
                 "wave_deadline": "wave deadline"}.get(cut or "", f"read timeout ({exception[1] if exception else ''})")
        status = "censored" if p.chunk_t else "timeout"
        reason = f"{which} passed {chunks}" + (f", {delivered} tokens kept" if p.chunk_t else " (no content)")
    elif exception is not None:
        status, reason = "failed", f"connection lost {chunks}: {exception[1]}"
    else:
        status, reason = "failed", f"stream ended without [DONE] {chunks}"
    early = status == "ok" and delivered < max_tokens
    if early:
        reason = "; ".join(filter(None, [reason, f"stopped early: {delivered} of {max_tokens} tokens, "
                                                 f"finish_reason {p.finish_reason}"]))
    return RequestRecord(
        index=index, prompt_id=prompt_id, status=status, reason=reason, sent_at=sent_at, send_t=p.send_t,
        ended_s=ended_s, seed=seed if isinstance(seed, int) else None, max_tokens=max_tokens, cache_salt=salt,
        http_status=http_status, error=p.error, request_id=p.request_id, chunk_t=tuple(p.chunk_t),
        chunk_tokens=tuple(p.chunk_tokens) if p.ids_everywhere and p.chunk_t else None, delivered_tokens=delivered,
        tokens_source=source, usage=p.usage, finish_reason=p.finish_reason, stop_reason=p.stop_reason, done=p.done,
        early_stop=early,
    )
