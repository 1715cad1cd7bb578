"""The client figures of a wave: the ``client`` block of ``wave.measured`` (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .record import RequestRecord
from .stats import percentiles

__all__ = ["MEASURED", "client_figures"]

MEASURED = ("ok", "censored")  # requests whose chunks count as decode measurements


def client_figures(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The ``client`` block of ``wave.measured`` (``docs/events.md``).

    ``delivered_tokens`` counts every request (partials included); decode figures,
    chunk intervals and tokens per chunk pool the ``ok`` and ``censored`` requests
    (a censored request's chunks were measured like any other); ``ttft_s`` lists the
    ``ok`` requests in request order.
    """
    counts = {status: sum(1 for r in records if r.status == status) for status in
              ("ok", "failed", "timeout", "cancelled", "censored")}
    measured = [r for r in records if r.status in MEASURED and r.chunk_t]
    tokens_after_first = sum(r.tokens_after_first for r in measured)
    decode_s = sum(r.decode_s or 0.0 for r in measured)
    intervals = [gap for r in measured for gap in r.intervals_ms]
    chunks = sum(len(r.chunk_t) for r in measured)
    chunk_tokens = sum(sum(r.chunk_tokens) if r.chunk_tokens is not None else r.delivered_tokens for r in measured)
    return {
        "requests": len(records),
        "ok": counts["ok"],
        "failed": counts["failed"],
        "timed_out": counts["timeout"],
        "cancelled": counts["cancelled"],
        "censored": counts["censored"],
        "delivered_tokens": sum(r.delivered_tokens for r in records),
        "tokens_after_first": tokens_after_first,
        "decode_s": decode_s,
        "decode_tps": tokens_after_first / decode_s if decode_s > 0 else None,
        "ttft_s": [r.ttft_s for r in records if r.status == "ok" and r.ttft_s is not None],
        "chunk_interval_ms": percentiles(intervals),
        "tokens_per_chunk": chunk_tokens / chunks if chunks else None,
    }
