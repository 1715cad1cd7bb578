"""One request as the client measured it (a line of ``records.jsonl``).

Times are the client's ``time.perf_counter()``; ``send_t`` is taken just before the
request is written, and every token chunk's arrival is kept as an offset from it
(``chunk_t``, seconds), stamped when the network read that carried it returned.

Status (``docs/events.md``): ``ok`` finished with ``[DONE]``; ``failed`` HTTP/transport
error or an error frame; ``timeout`` no content before a deadline; ``censored`` cut
by a deadline after delivering tokens (the partial is kept); ``bounded`` cut by the
plan's decode bound (seconds after its first token): a registered observation of its
delivered tokens over its decode time; ``cancelled`` stopped by the caller (interrupt,
budget) or never sent because of it.

Bounded: the strings a record keeps from the server are clipped (:func:`clip`, by their
JSON-encoded size): ``reason`` to 300 bytes, ``finish_reason`` to 40, ``request_id`` and
``stop_reason`` to 1 KiB, ``error`` to 64 KiB; usage counts outside 0..2**53-1 are
dropped. So one request's entry in ``wave.measured`` has a known worst-case size
(:func:`summary_entry_bound`).

Reasoning (a server that streams it apart, vLLM's ``delta.reasoning``): a token chunk
is reasoning, answer, or both (``chunk_kinds``, one letter per chunk, kept only when a
chunk carried reasoning). The record then splits its delivered tokens into
``reasoning_tokens`` (the server's ``usage.completion_tokens_details.reasoning_tokens``
when the delivered count is its usage, else the counted tokens of the reasoning-only
chunks) and ``answer_tokens`` (the rest), and says when the first visible answer token
came (``first_answer_s``). These are diagnostics. A reasoning chunk is a token chunk
like any other (TTFT is the first of either kind, as vLLM's benchmark counts it); before
``delta.reasoning`` was read, a reasoning-only chunk without token ids was skipped, so a
reasoning server's older figures are not comparable (``docs/events.md``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from ..vocabulary import REQUEST_STATUSES, RequestStatus, TokenCountSource
from .stats import percentile
from .timing import token_intervals_ms, tpot_ms

__all__ = ["CHUNK_KINDS", "FINISH_REASON_BYTES", "MAX_COUNT", "REASON_BYTES", "SERVER_STRING_BYTES", "STATUSES",
           "RequestRecord", "Status", "bounded_json", "clip", "summary_entry_bound"]

Status = RequestStatus
STATUSES = REQUEST_STATUSES
TokensSource = Literal["usage", "token_ids", "chunks", "none"]

REASON_BYTES = 300
FINISH_REASON_BYTES = 40
SERVER_STRING_BYTES = 1024
ERROR_BYTES = 64 << 10
MAX_COUNT = 2**53 - 1
_ELLIPSIS = "…"
# What a token chunk carried: reasoning only, answer only, or both (``RequestRecord.chunk_kinds``).
REASONING, ANSWER, BOTH = "r", "a", "m"
CHUNK_KINDS = (REASONING, ANSWER, BOTH)


def _encoded_size(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def clip(text: str, limit: int) -> str:
    """``text``, cut (ending in "…") so that its JSON encoding takes at most ``limit`` bytes."""
    if len(text) * 6 + 2 <= limit or (len(text) <= limit and _encoded_size(text) <= limit):
        return text
    text = text[:limit]              # a character takes at least one byte
    low, high = 0, len(text)         # the longest prefix that fits, with the ellipsis
    while low < high:
        mid = (low + high + 1) // 2
        if _encoded_size(text[:mid] + _ELLIPSIS) <= limit:
            low = mid
        else:
            high = mid - 1
    return text[:low] + _ELLIPSIS


def bounded_json(value: Any, limit: int = ERROR_BYTES) -> Any:
    """A JSON value from a server kept as is when its encoding is within ``limit`` bytes, else clipped text."""
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return clip(repr(value)[: limit], limit)
    if len(encoded.encode("utf-8")) <= limit:
        return value
    return clip(encoded[: limit], limit)


def summary_entry_bound(prompt_id: str, index: int) -> int:
    """The most bytes request ``index``'s ``summary_entry`` can take in an event body (plus its comma)."""
    worst_float = -2.2250738585072014e-308
    entry = {"index": index, "prompt_id": prompt_id, "status": "cancelled", "delivered_tokens": MAX_COUNT,
             "decode_s": worst_float, "ttft_s": worst_float, "round_ms_p95": worst_float,
             "finish_reason": "f" * (FINISH_REASON_BYTES - 2), "reason": "r" * (REASON_BYTES - 2),
             "chunk_ms_p95": worst_float, "token_itl_ms_p95": worst_float, "tpot_ms": worst_float,
             "token_count_source": "one_per_chunk", "reasoning_tokens": MAX_COUNT, "answer_tokens": MAX_COUNT,
             "first_answer_s": worst_float}
    return len(json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode("utf-8")) + 1


@dataclass(frozen=True)
class RequestRecord:
    """Everything measured about one request, kept whatever its outcome."""

    index: int
    prompt_id: str
    status: Status
    reason: str | None
    sent_at: str                          # UTC wall clock at send
    send_t: float                         # perf_counter at send
    ended_s: float                        # seconds from send to the end of the request
    seed: int | None
    max_tokens: int
    cache_salt: str
    http_status: int | None = None
    error: Any = None                     # the server's error body (HTTP error or error frame)
    request_id: str | None = None         # the server's id (cmpl-...)
    chunk_t: tuple[float, ...] = ()       # arrival of each token chunk, seconds after send
    chunk_tokens: tuple[int, ...] | None = None   # tokens per token chunk (None: server sent no token_ids)
    delivered_tokens: int = 0
    tokens_source: TokensSource = "none"
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    stop_reason: Any = None
    done: bool = False                    # saw data: [DONE]
    early_stop: bool = False              # ok, but fewer than max_tokens delivered
    chunk_token_counts: tuple[int, ...] = ()      # tokens counted in each content chunk (token_count_source)
    token_count_source: TokenCountSource = "none"
    chunks_are_steps: bool = True         # the counter source says one chunk is one engine step
    timings: dict[str, float] | None = None       # the server's own per-request timings (llama.cpp)
    token_ids: tuple[int, ...] | None = None      # the emitted token ids (kept only when the plan asks)
    chunk_kinds: str | None = None        # per token chunk: r reasoning, a answer, m both (None: no reasoning)
    usage_reasoning_tokens: int | None = None     # the server's usage.completion_tokens_details.reasoning_tokens

    @property
    def streamed_reasoning(self) -> bool:
        """The server sent reasoning apart from the answer (a reasoning chunk, or reasoning tokens in its usage)."""
        return self.chunk_kinds is not None or bool(self.usage_reasoning_tokens)

    @property
    def reasoning_tokens(self) -> int | None:
        """Delivered tokens that were reasoning (``None`` when the server streamed none apart)."""
        if not self.streamed_reasoning:
            return None
        told = self.usage_reasoning_tokens
        if told is not None and self.tokens_source == "usage" and 0 <= told <= self.delivered_tokens:
            return told
        kinds = self.chunk_kinds or ""
        counts = self.chunk_token_counts if len(self.chunk_token_counts) == len(kinds) else (1,) * len(kinds)
        return min(self.delivered_tokens, sum(k for kind, k in zip(kinds, counts, strict=True) if kind == REASONING))

    @property
    def answer_tokens(self) -> int | None:
        """Delivered tokens that were the answer: the rest (``None`` when the server streamed no reasoning apart)."""
        reasoning = self.reasoning_tokens
        return None if reasoning is None else max(0, self.delivered_tokens - reasoning)

    @property
    def first_answer_s(self) -> float | None:
        """Time from send to the first chunk with answer text (``None`` without one; TTFT when no reasoning)."""
        if self.chunk_kinds is None:
            return self.ttft_s
        at = next((i for i, kind in enumerate(self.chunk_kinds) if kind != REASONING), None)
        return None if at is None or at >= len(self.chunk_t) else self.chunk_t[at]

    @property
    def ttft_s(self) -> float | None:
        """Time to the first chunk with content (``None`` without one)."""
        return self.chunk_t[0] if self.chunk_t else None

    @property
    def first_chunk_tokens(self) -> int:
        """Tokens in the first content chunk (as counted: 1, the prefill token, when nothing says more)."""
        if not self.chunk_t:
            return 0
        if self.chunk_token_counts:
            return self.chunk_token_counts[0]
        return self.chunk_tokens[0] if self.chunk_tokens else 1

    @property
    def tokens_after_first(self) -> int:
        return max(0, self.delivered_tokens - self.first_chunk_tokens) if self.chunk_t else 0

    @property
    def decode_s(self) -> float | None:
        """Last content chunk - first content chunk (``None`` without content)."""
        return self.chunk_t[-1] - self.chunk_t[0] if self.chunk_t else None

    @property
    def intervals_ms(self) -> list[float]:
        """Gaps between consecutive content chunks (vLLM's ITL): one engine step each when chunks are steps."""
        t = self.chunk_t
        return [(t[i] - t[i - 1]) * 1000.0 for i in range(1, len(t))]

    @property
    def chunk_ms_p95(self) -> float | None:
        """p95 of the per-chunk intervals, whatever a chunk is."""
        gaps = self.intervals_ms
        return percentile(gaps, 95) if gaps else None

    @property
    def round_ms_p95(self) -> float | None:
        """p95 of the round times: the chunk intervals when chunks are engine steps, else unknown (``None``)."""
        return self.chunk_ms_p95 if self.chunks_are_steps else None

    @property
    def token_intervals_ms(self) -> list[float]:
        """Per-token intervals (:func:`.timing.token_intervals_ms`): counted tokens - 1 of them."""
        return token_intervals_ms(self.chunk_t, self.chunk_token_counts)

    @property
    def token_itl_ms_p95(self) -> float | None:
        gaps = self.token_intervals_ms
        return percentile(gaps, 95) if gaps else None

    @property
    def tpot_ms(self) -> float | None:
        """``vllm bench serve``'s TPOT of this request: (E2EL - TTFT) / (delivered tokens - 1)."""
        return tpot_ms(self.chunk_t, self.delivered_tokens)

    @property
    def decode_tps(self) -> float | None:
        decode = self.decode_s
        return self.tokens_after_first / decode if decode else None

    def summary_entry(self) -> dict[str, Any]:
        """The request's entry in ``wave.measured`` ``requests`` (``docs/events.md``)."""
        return {
            "index": self.index, "prompt_id": self.prompt_id, "status": self.status,
            "delivered_tokens": self.delivered_tokens, "decode_s": self.decode_s, "ttft_s": self.ttft_s,
            "round_ms_p95": self.round_ms_p95, "finish_reason": self.finish_reason, "reason": self.reason,
            "chunk_ms_p95": self.chunk_ms_p95, "token_itl_ms_p95": self.token_itl_ms_p95, "tpot_ms": self.tpot_ms,
            "token_count_source": self.token_count_source,
        } | self._reasoning_entry()

    def _reasoning_entry(self) -> dict[str, Any]:
        """The reasoning members of the summary entry: written only when the server streamed reasoning apart."""
        if not self.streamed_reasoning:
            return {}
        return {"reasoning_tokens": self.reasoning_tokens, "answer_tokens": self.answer_tokens,
                "first_answer_s": self.first_answer_s}

    def to_json(self) -> dict[str, Any]:
        """The full record (one line of ``records.jsonl``)."""
        return {
            **self.summary_entry(),
            "sent_at": self.sent_at, "send_t": self.send_t, "ended_s": self.ended_s, "seed": self.seed,
            "max_tokens": self.max_tokens, "cache_salt": self.cache_salt, "http_status": self.http_status,
            "error": self.error, "request_id": self.request_id, "tokens_after_first": self.tokens_after_first,
            "decode_tps": self.decode_tps, "chunk_t": list(self.chunk_t),
            "chunk_tokens": list(self.chunk_tokens) if self.chunk_tokens is not None else None,
            "tokens_source": self.tokens_source, "usage": self.usage, "stop_reason": self.stop_reason,
            "done": self.done, "early_stop": self.early_stop,
            "chunk_token_counts": list(self.chunk_token_counts), "chunks_are_steps": self.chunks_are_steps,
            "timings": self.timings,
        } | ({"token_ids": list(self.token_ids)} if self.token_ids is not None else {}) \
          | ({"chunk_kinds": self.chunk_kinds} if self.chunk_kinds is not None else {}) \
          | ({"usage_reasoning_tokens": self.usage_reasoning_tokens} if self.usage_reasoning_tokens is not None
             else {})

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RequestRecord:
        """A record from its line of ``records.jsonl`` (:meth:`to_json`); members a line lacks (older
        records) take their defaults, and the derived members it carries are recomputed, not read."""
        given = {f.name for f in fields(cls)}
        data = {k: v for k, v in obj.items() if k in given}
        for name in ("chunk_t", "chunk_token_counts"):
            data[name] = tuple(data.get(name) or ())
        for name in ("chunk_tokens", "token_ids"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return cls(**data)

    def json_line(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8") + b"\n"
