"""A wave's figures, accumulated one request at a time (so the requests need not be kept).

:class:`WaveTotals` is the one place the ``client`` block of ``wave.measured`` and the
figures ``tally measure`` prints are computed: counts and sums as requests finish,
percentile inputs in :class:`.spool.Samples`, each request's summary entry in
:class:`.spool.Entries`. Built from records in request order (the in-memory wave) it
gives exactly what summing over the list gives; fed as requests finish (a streamed
wave) the sums may differ in the last bits (float addition in another order) and the
percentiles are the same (order does not matter to them).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .record import RequestRecord
from .spool import Entries, Samples, Spooled

__all__ = ["MEASURED", "WaveTotals"]

MEASURED = ("ok", "censored", "bounded")  # requests whose chunks count as decode measurements

_FINISH_REASONS_KEPT = 8


class WaveTotals:
    """Counts, sums and samples of a wave's requests; ``spool``: a directory for what does not fit in memory."""

    def __init__(self, spool: Path | None = None, keep: int = 1 << 18) -> None:
        self.spool = spool
        self._owned = False
        self.counts = {status: 0 for status in ("ok", "failed", "timeout", "cancelled", "censored", "bounded")}
        self.requests = 0
        self.delivered_tokens = 0
        self.tokens_after_first = 0
        self.decode_s = 0.0
        self.chunks = 0
        self.chunk_tokens = 0
        self.early_stops = 0
        self.reasoning_requests = 0                            # requests the server streamed reasoning apart for
        self.reasoning_tokens = 0                              # of their delivered tokens: reasoning
        self.answer_tokens = 0                                 # and answer
        self.with_content = 0                                  # requests whose first token arrived (any status)
        self.token_count_sources: dict[str, int] = {}          # how chunk tokens were counted, over MEASURED
        self.early_finish_reasons: set[str] = set()
        self.more_finish_reasons = False
        self.ttft_ok = Samples(spool, "ttft", keep)          # s, ok and bounded requests (their first token came)
        self.intervals_ms = Samples(spool, "intervals", keep)  # ok and censored requests
        self.decode_tps = Samples(spool, "decode_tps", keep)   # ok and censored requests
        self.tpot_ms = Samples(spool, "tpot", keep)            # ok requests, bench's TPOT
        self.token_itl_ms = Samples(spool, "token_itl", keep)  # ok and censored requests, per-token intervals
        self.e2e_s = Samples(spool, "e2e", keep)               # ok requests, last content chunk
        self.entries = Entries(spool)

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> WaveTotals:
        totals = cls()
        for record in records:
            totals.add(record)
        return totals

    @classmethod
    def spooled(cls, keep: int = 1 << 18, parent: Path | None = None) -> WaveTotals:
        """Totals whose samples and entries spill to a fresh directory (removed by :meth:`close`).

        The directory is made in ``parent`` (default ``$TMPDIR``): on a tmpfs the spool
        would be memory again, so a caller with a directory on disk should pass it.
        """
        totals = cls(Path(tempfile.mkdtemp(prefix="tally-measure-", dir=parent)), keep)
        totals._owned = True
        return totals

    def add(self, r: RequestRecord) -> None:
        self.requests += 1
        self.counts[r.status] += 1
        self.delivered_tokens += r.delivered_tokens
        ok = r.status == "ok"
        if r.chunk_t:
            self.with_content += 1
        if r.status in MEASURED and r.chunk_t:
            self.tokens_after_first += r.tokens_after_first
            self.decode_s += r.decode_s or 0.0
            self.intervals_ms.extend(r.intervals_ms)
            self.token_itl_ms.extend(r.token_intervals_ms)
            self.token_count_sources[r.token_count_source] = self.token_count_sources.get(r.token_count_source, 0) + 1
            self.chunks += len(r.chunk_t)
            self.chunk_tokens += sum(r.chunk_tokens) if r.chunk_tokens is not None else r.delivered_tokens
            if r.decode_tps is not None:
                self.decode_tps.add(r.decode_tps)
        timed = ok or r.status == "bounded"  # a bounded run's TTFT is measured whole (its bound came after)
        if timed and r.chunk_t:
            self.ttft_ok.add(r.chunk_t[0])
        if ok and r.chunk_t:
            self.e2e_s.add(r.chunk_t[-1])
            tpot = r.tpot_ms  # vllm bench serve's TPOT (runner.measure.timing)
            if tpot is not None:
                self.tpot_ms.add(tpot)
        if r.streamed_reasoning:
            self.reasoning_requests += 1
            self.reasoning_tokens += r.reasoning_tokens or 0
            self.answer_tokens += r.answer_tokens or 0
        if r.early_stop:
            self.early_stops += 1
            if len(self.early_finish_reasons) < _FINISH_REASONS_KEPT:
                self.early_finish_reasons.add(str(r.finish_reason))
            elif str(r.finish_reason) not in self.early_finish_reasons:
                self.more_finish_reasons = True
        self.entries.add(r.index, r.summary_entry(), r.ttft_s if timed else None)

    def client(self) -> dict[str, Any]:
        """The ``client`` block of ``wave.measured`` (``docs/events.md``); ``ttft_s`` may be :class:`Spooled`."""
        bounded = {"bounded": self.counts["bounded"]} if self.counts["bounded"] else {}  # written when there are
        reasoning = {"reasoning_tokens": self.reasoning_tokens, "answer_tokens": self.answer_tokens} \
            if self.reasoning_requests else {}   # written when the server streamed reasoning apart
        return {
            **bounded,
            **reasoning,
            "requests": self.requests,
            "ok": self.counts["ok"],
            "failed": self.counts["failed"],
            "timed_out": self.counts["timeout"],
            "cancelled": self.counts["cancelled"],
            "censored": self.counts["censored"],
            "delivered_tokens": self.delivered_tokens,
            "tokens_after_first": self.tokens_after_first,
            "decode_s": self.decode_s,
            "decode_tps": self.tokens_after_first / self.decode_s if self.decode_s > 0 else None,
            "ttft_s": self.entries.ttft(),
            "chunk_interval_ms": self.intervals_ms.percentiles(),
            "tokens_per_chunk": self.chunk_tokens / self.chunks if self.chunks else None,
            "token_itl_ms": self.token_itl_ms.percentiles(),
            "tpot_ms": self.tpot_ms.percentiles(),
            "token_count_sources": dict(sorted(self.token_count_sources.items())),
        }

    def summary_entries(self) -> list[dict[str, Any]] | Spooled:
        return self.entries.entries()

    def close(self) -> None:
        """Close the spool files and remove a temporary spool directory."""
        for samples in (self.ttft_ok, self.intervals_ms, self.decode_tps, self.tpot_ms, self.e2e_s, self.token_itl_ms):
            samples.close()
        self.entries.close()
        if self.spool is not None and self._owned:
            shutil.rmtree(self.spool, ignore_errors=True)
