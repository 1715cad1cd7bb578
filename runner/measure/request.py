"""One streaming request, measured: send, read SSE frames as they arrive, classify the outcome.

A chunk's arrival is the time the socket read that carried it returned
(:mod:`.transport`). Deadlines are enforced twice: every connect, read and write of the
request waits at most until its deadline (:func:`.transport.deadline_guard`, which
covers a server trickling bytes, headers included), and a :class:`Cutter` thread shuts
the request's socket down when its deadline, the wave deadline or a cancel comes (a
blocked read then returns at once; closing alone would not wake it). A request without
a deadline of its own gets :data:`.bounds.DEFAULT_REQUEST_DEADLINE_S`. What had arrived
is kept. What is read is bounded too (:mod:`.bounds`): SSE lines, error bodies,
non-streamed answers, the number of content chunks, and the server strings a record keeps.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from ledger.errors import FormatError
from ledger.strictjson import read_json

from .bounds import (
    DEFAULT_REQUEST_DEADLINE_S,
    IDENTITY,
    MAX_ANSWER_BYTES,
    MAX_ERROR_BODY_BYTES,
    ReplyRefused,
    chunk_limit,
    content_encoding,
    read_capped,
)
from .record import (
    ANSWER,
    BOTH,
    MAX_COUNT,
    REASON_BYTES,
    REASONING,
    SERVER_STRING_BYTES,
    RequestRecord,
    Status,
    TokensSource,
    bounded_json,
    clip,
)
from .reply import error_reason, read_frame
from .sse import SSEDecoder, SSEOverflow
from .timing import count_chunk_tokens
from .transport import deadline_guard, move_deadline, read_time

__all__ = ["Cutter", "Ticket", "run_request"]

_POLL_S = 0.02          # how often the cutter looks at the cancel event
_ENCODING_BYTES = 40    # of a refused content-encoding, kept in the reason


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(eq=False)
class Ticket:
    """An in-flight request as the cutter sees it."""

    deadline: float | None
    wave: bool = True               # cut at the wave deadline
    cancellable: bool = True        # cut on cancel
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

    def set_wave_deadline(self, wave_deadline: float | None) -> None:
        with self._cond:
            self.wave_deadline = wave_deadline
            self._cond.notify()

    def register(self, deadline: float | None, *, wave: bool = True, cancellable: bool = True) -> Ticket:
        ticket = Ticket(deadline, wave, cancellable)
        with self._cond:
            self._tickets.add(ticket)
            self._cond.notify()
        return ticket

    def move(self, ticket: Ticket, deadline: float | None) -> None:
        """Give an in-flight request another deadline of its own (a decode bound from its first token)."""
        with self._cond:
            ticket.deadline = deadline
            self._cond.notify()

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
                    if cancelled and ticket.cancellable:
                        ticket.cut("cancelled")
                    elif wave_over and ticket.wave:
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
    chunk_cap: int
    chunk_t: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    ids_everywhere: bool = True
    usage: dict[str, int] | None = None
    chunk_usage: list[int | None] = field(default_factory=list)   # completion_tokens seen with each content chunk
    chunk_kinds: list[str] = field(default_factory=list)          # reasoning / answer / both, per content chunk
    usage_reasoning: int | None = None                            # usage.completion_tokens_details.reasoning_tokens
    chunk_text: list[str] | None = None                           # kept only for a declared tokenizer
    timings: dict[str, float] | None = None                       # the server's last ``timings`` (llama.cpp)
    token_ids: list[int] | None = None                            # the emitted ids, kept only when asked
    finish_reason: str | None = None
    stop_reason: Any = None
    request_id: str | None = None
    done: bool = False
    clean_end: bool = False          # the body ended without a transport error
    not_streamed: bool = False
    error: Any = None
    error_reason: str | None = None
    halt: bool = False               # stop reading: what follows is refused
    on_first: Callable[[float], None] | None = None   # told the first content chunk's arrival (a decode bound)

    def refuse(self, reason: str) -> None:
        self.error_reason, self.halt = reason, True

    def whole_answer(self, raw: bytes, arrived: float) -> None:
        """A non-streamed JSON answer: the whole completion as one chunk."""
        try:
            obj = read_json(raw, "the answer", max_bytes=MAX_ANSWER_BYTES)
        except FormatError as exc:
            self.error, self.error_reason = clip(raw[:2000].decode("utf-8", "replace"), 2000), str(exc)
            return
        if not isinstance(obj, dict) or "error" in obj:
            self.error, self.error_reason = bounded_json(obj), f"error answer: {error_reason(obj)}"
            return
        self.not_streamed = True
        self.frame(obj, arrived)
        self.done = True

    def frame(self, data: str | dict[str, Any], arrived: float) -> None:
        if data == "[DONE]":
            self.done = True
            return
        if isinstance(data, str):
            try:
                obj = json.loads(data)
            except (ValueError, RecursionError):
                self.error = {"frame": clip(data, 2000)}
                self.error_reason = "malformed SSE frame (not JSON)"
                return
        else:
            obj = data
        if not isinstance(obj, dict):
            return
        read = read_frame(obj)
        if read.error:
            # vLLM rejects a streaming request inside an HTTP 200: an error frame, then [DONE].
            body = obj.get("error", obj)
            self.error = bounded_json(obj)
            message = body.get("message") if isinstance(body, dict) else body
            self.error_reason = f"error frame: {message}"
            return
        if self.request_id is None and isinstance(obj.get("id"), str):
            self.request_id = clip(obj["id"], SERVER_STRING_BYTES)
        usage = read.usage
        frame_usage: int | None = None
        if isinstance(usage, dict):
            self.usage = {str(k)[:64]: v for k, v in list(usage.items())[:32]
                          if type(v) is int and 0 <= v <= MAX_COUNT}
            frame_usage = self.usage.get("completion_tokens")
            self.usage_reasoning = _reasoning_usage(usage, self.usage_reasoning)
        timings = obj.get("timings")
        if isinstance(timings, dict):
            self.timings = _numbers(timings)
        if read.choice is None:
            return
        text = read.text
        ids = read.token_ids
        if ids is not None:
            content = len(ids) > 0
            count = len(ids)
            if self.token_ids is not None and len(self.token_ids) + count <= self.chunk_cap:
                self.token_ids.extend(i for i in ids if type(i) is int and 0 <= i <= MAX_COUNT)
        else:
            content = bool(text) or read.reasoning is not None
            count = 1
            if content:
                self.ids_everywhere = False
        if content:
            if len(self.chunk_t) >= self.chunk_cap:
                self.refuse(f"the server sent more than {self.chunk_cap} content chunks "
                            "(2 x max_tokens + 64): refused")
                return
            self.chunk_t.append(arrived - self.send_t)
            if len(self.chunk_t) == 1 and self.on_first is not None:
                self.on_first(arrived)
            self.chunk_tokens.append(count)
            self.chunk_usage.append(frame_usage)
            self.chunk_kinds.append(_kind(bool(text), read.reasoning is not None))
            if self.chunk_text is not None:
                self.chunk_text.append(_chunk_text(text, read.reasoning))
        if read.finish_reason is not None:
            self.finish_reason, self.stop_reason = read.finish_reason, read.stop_reason


def _kind(answer: bool, reasoning: bool) -> str:
    """A token chunk's kind (:data:`.record.CHUNK_KINDS`): reasoning only, both, or answer (also when it
    carried token ids but no text at all)."""
    if reasoning:
        return BOTH if answer else REASONING
    return ANSWER


def _chunk_text(text: Any, reasoning: str | None) -> str:
    """A chunk's text for a declared tokenizer: its reasoning and its answer text."""
    return (reasoning or "") + (text if isinstance(text, str) else "")


def _reasoning_usage(usage: dict[str, Any], before: int | None) -> int | None:
    """``usage.completion_tokens_details.reasoning_tokens`` when it is a count (else what was seen before)."""
    details = usage.get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if type(value) is int and 0 <= value <= MAX_COUNT else before


def _numbers(values: dict[Any, Any]) -> dict[str, float]:
    """A server's flat object of figures (llama.cpp ``timings``): finite numbers only, 32 members at most."""
    return {str(k)[:64]: v for k, v in list(values.items())[:32]
            if type(v) in (int, float) and math.isfinite(v) and abs(v) <= MAX_COUNT}


def run_request(http: httpx.Client, url: str, body: Mapping[str, Any], *, index: int, prompt_id: str,
                cutter: Cutter, deadline_s: float | None, read_timeout_s: float, chunks_are_steps: bool = True,
                tokenizer: Callable[[str], int] | None = None, decode_bound_s: float | None = None,
                keep_token_ids: bool = False) -> RequestRecord:
    """Send one streaming request and measure it; never raises for what the server does.

    The whole request (connect, headers, body) ends by ``deadline_s`` after the send
    (:data:`.bounds.DEFAULT_REQUEST_DEADLINE_S` when ``None``) or at the wave deadline,
    whichever comes first; ``read_timeout_s`` bounds each single read.
    ``chunks_are_steps``: the server streams one chunk per engine step (its chunk
    intervals are round times); ``tokenizer`` counts the tokens of a chunk's text when
    the server sends no token ids (declared by the caller, never guessed).

    ``decode_bound_s`` (a plan's bounded decode run): ``deadline_s`` then bounds the wait for
    the first token only, and the request is cut ``decode_bound_s`` after its first token
    arrived (never later than the wave deadline), so a long prefill does not eat the bound.
    A run cut by its bound is ``bounded``: its delivered tokens over its decode time are
    the observation.

    ``keep_token_ids`` (a plan's ``keep_token_ids``): the record keeps the emitted token ids,
    where the server streams them, for what the arms emitted to be compared afterwards.
    """
    seed = body.get("seed")
    max_tokens = int(body.get("max_tokens", 0))
    salt = str(body.get("cache_salt", ""))
    sent_at = utc_now()
    send_t = time.perf_counter()
    own_deadline = send_t + (deadline_s if deadline_s is not None else DEFAULT_REQUEST_DEADLINE_S)
    ticket = cutter.register(own_deadline)
    overall = own_deadline if cutter.wave_deadline is None else min(own_deadline, cutter.wave_deadline)
    progress = _Progress(send_t, chunk_limit(max(max_tokens, 1)))
    bound: list[float] = []        # the decode bound's deadline, once the first token arrived

    def first_token(arrived: float) -> None:
        assert decode_bound_s is not None
        limit = arrived + decode_bound_s
        bound.append(limit)
        cutter.move(ticket, limit)
        move_deadline(limit if cutter.wave_deadline is None else min(limit, cutter.wave_deadline))

    if decode_bound_s is not None:
        progress.on_first = first_token
    if tokenizer is not None:
        progress.chunk_text = []
    if keep_token_ids:
        progress.token_ids = []
    http_status: int | None = None
    exception: tuple[str, str] | None = None
    read_timeout = min(read_timeout_s, overall - send_t + 1.0)
    timeout = httpx.Timeout(connect=min(10.0, read_timeout), read=read_timeout, write=10.0, pool=read_timeout)
    try:
        with deadline_guard(overall, ticket.attach), \
                http.stream("POST", url, json=dict(body), headers=IDENTITY, timeout=timeout) as response:
            http_status = response.status_code
            if response.status_code != 200:
                try:
                    raw = read_capped(response, MAX_ERROR_BODY_BYTES, None, "the error body")
                except ReplyRefused as exc:
                    progress.error_reason = f"HTTP {response.status_code}: {exc}"
                else:
                    try:
                        progress.error = bounded_json(read_json(raw, "the error body"))
                    except FormatError:
                        progress.error = clip(raw[:2000].decode("utf-8", "replace"), 2000)
                    progress.error_reason = f"HTTP {response.status_code}: {error_reason(progress.error)}"
            elif response.headers.get("content-type", "").startswith("application/json"):
                # A server that ignored stream=true: one answer, its tokens counted at its arrival.
                try:
                    raw = read_capped(response, MAX_ANSWER_BYTES, None, "the non-streamed answer")
                except ReplyRefused as exc:
                    progress.refuse(str(exc))
                else:
                    progress.whole_answer(raw, time.perf_counter())
            elif content_encoding(response) != "identity":
                # identity was asked: compressed bytes are never fed to the SSE decoder
                progress.refuse(f"content-encoding {clip(content_encoding(response), _ENCODING_BYTES)} refused "
                                "(identity was asked)")
            else:
                stream = response.extensions.get("network_stream")
                ticket.attach(stream.get_extra_info("socket") if stream is not None else None)
                stamping = read_time(stream) is not None
                decoder = SSEDecoder()
                try:
                    for raw in response.iter_raw():
                        # the time the socket read carrying these bytes returned (else: now)
                        arrived = stream.last_read if stamping else time.perf_counter()  # type: ignore[union-attr]
                        for data in decoder.feed(raw):
                            progress.frame(data, arrived)
                            if progress.halt:
                                break
                        if progress.halt:
                            break
                    else:
                        if ticket.reason is None:  # a shut socket reads as the end of a close-delimited body
                            for data in decoder.close():
                                progress.frame(data, time.perf_counter())
                            progress.clean_end = True
                except SSEOverflow as exc:
                    progress.refuse(str(exc))
    except httpx.TimeoutException as exc:
        exception = ("timeout", f"{type(exc).__name__}: {exc}")
    except (httpx.HTTPError, OSError) as exc:
        exception = ("transport", f"{type(exc).__name__}: {exc}")
    finally:
        cutter.release(ticket)
    ended = time.perf_counter()
    cut = ticket.reason
    if bound:
        own_deadline = bound[0]
        overall = own_deadline if cutter.wave_deadline is None else min(own_deadline, cutter.wave_deadline)
    if cut is None and exception is not None and exception[0] == "timeout" and ended >= overall:
        # the guard's deadline came before the cutter's
        cut = "wave_deadline" if cutter.wave_deadline is not None and ended >= cutter.wave_deadline \
            and cutter.wave_deadline < own_deadline else "deadline"
    if bound and cut == "deadline":
        cut = "decode_bound"
    return _finish(progress, index=index, prompt_id=prompt_id, sent_at=sent_at, ended_s=ended - send_t, seed=seed,
                   max_tokens=max_tokens, salt=salt, http_status=http_status, exception=exception,
                   cut=cut, deadline_s=deadline_s, chunks_are_steps=chunks_are_steps, tokenizer=tokenizer,
                   decode_bound_s=decode_bound_s)


def _finish(p: _Progress, *, index: int, prompt_id: str, sent_at: str, ended_s: float, seed: Any, max_tokens: int,
            salt: str, http_status: int | None, exception: tuple[str, str] | None, cut: str | None,
            deadline_s: float | None, chunks_are_steps: bool = True,
            tokenizer: Callable[[str], int] | None = None, decode_bound_s: float | None = None) -> RequestRecord:
    counts, count_source = count_chunk_tokens(len(p.chunk_t), ids=p.chunk_tokens, ids_everywhere=p.ids_everywhere,
                                              usage=p.chunk_usage, texts=p.chunk_text, tokenizer=tokenizer)
    if sum(counts) > p.chunk_cap and p.error_reason is None:
        p.error_reason = (f"the server's chunks carried {sum(counts)} tokens ({count_source}), more than "
                          f"{p.chunk_cap} (2 x max_tokens + 64): refused")
        counts, count_source = (1,) * len(p.chunk_t), "one_per_chunk"
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
    elif cut == "decode_bound":
        status, reason = "bounded", f"decode bound {decode_bound_s:g} s after the first token reached {chunks}, " \
                                    f"{delivered} tokens delivered"
    elif cut in ("deadline", "wave_deadline") or (exception is not None and exception[0] == "timeout"):
        own = f"request deadline {deadline_s:g} s" + (" (to the first token)" if decode_bound_s is not None else "") \
            if deadline_s is not None else \
            f"default request deadline {DEFAULT_REQUEST_DEADLINE_S:g} s"
        which = {"deadline": own,
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
        index=index, prompt_id=prompt_id, status=status, reason=clip(reason, REASON_BYTES) if reason else reason,
        sent_at=sent_at, send_t=p.send_t,
        ended_s=ended_s, seed=seed if isinstance(seed, int) else None, max_tokens=max_tokens, cache_salt=salt,
        http_status=http_status, error=p.error, request_id=p.request_id, chunk_t=tuple(p.chunk_t),
        chunk_tokens=tuple(p.chunk_tokens) if p.ids_everywhere and p.chunk_t else None, delivered_tokens=delivered,
        tokens_source=source, usage=p.usage, finish_reason=p.finish_reason, stop_reason=p.stop_reason, done=p.done,
        early_stop=early, chunk_token_counts=counts, token_count_source=count_source,
        chunks_are_steps=chunks_are_steps, timings=p.timings,
        token_ids=tuple(p.token_ids) if p.token_ids is not None and p.ids_everywhere else None,
        chunk_kinds="".join(p.chunk_kinds) if any(k != ANSWER for k in p.chunk_kinds) else None,
        usage_reasoning_tokens=p.usage_reasoning,
    )
