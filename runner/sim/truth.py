"""Ground truth: what the simulator served, request by request and step by step.

Tests and benchmarks compare the measurement client's view against this record
(``GET /_sim/truth``): each request's arrival, the planned and the actual send time
of every chunk (``time.perf_counter()``; on Linux that is CLOCK_MONOTONIC, comparable
across processes), the tokens, drafts and accepted drafts of every engine step, and the
counter contributions the request made to ``/metrics``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RequestTruth", "TruthLog"]


@dataclass
class RequestTruth:
    """One request as the simulator saw it (mutable while the request runs)."""

    seq: int
    request_id: str
    kind: str
    stream: bool
    arrival: float                    # perf_counter at arrival
    arrival_wall: str
    start: int | None = None          # engine session (start number); None when refused before one
    arm: str | None = None
    engine: int = 0
    prompt_tokens: int = 0
    max_tokens: int = 0
    seed: int | None = None
    priority: int = 0
    cache_salt: str | None = None
    cached_tokens: int = 0              # prompt tokens the prefix cache held (their prefill skipped)
    status: str = "running"           # running | finished | aborted | rejected | failed
    http_status: int = 200
    error: dict[str, Any] | None = None
    finish_reason: str | None = None
    planned: list[float] = field(default_factory=list)   # planned send time of each token chunk
    sent: list[float] = field(default_factory=list)      # actual send time (just before the write)
    tokens: list[int] = field(default_factory=list)      # tokens per step
    drafts: list[int] = field(default_factory=list)      # draft tokens per step
    accepted: list[int] = field(default_factory=list)    # accepted drafts per step
    completion_tokens: int = 0
    reasoning_tokens: int = 0         # of the completion tokens, those sent as reasoning (delta.reasoning)
    decode_s: float = 0.0             # planned last token - planned first token (what /metrics got)
    observed: bool = False            # the request reached the request-level histograms (finished/aborted)
    fault: str | None = None
    engine_fields: dict[str, Any] | None = None  # the engine-side sampling fields it set (reasoning_effort, ...)

    def counters(self) -> dict[str, Any]:
        """This request's contribution to the spec-decode and generation counters."""
        per_pos: dict[int, int] = {}
        for acc in self.accepted:
            for position in range(acc):
                per_pos[position] = per_pos.get(position, 0) + 1
        return {
            "rounds": max(len(self.drafts) - 1, 0),        # decode steps: every step after the prefill's
            "drafts": sum(1 for d in self.drafts if d > 0),   # the steps that drafted (vLLM's num_drafts)
            "draft_tokens": sum(self.drafts),
            "accepted": sum(a for a, d in zip(self.accepted, self.drafts, strict=True) if d > 0),
            # of those, the accepted drafts emitted (vLLM counts drafts accepted past max_tokens, EOS
            # or a stop token, which the request then discards): every decode step's tokens but one
            "accepted_delivered": sum(n - 1 for n, d in zip(self.tokens, self.drafts, strict=True) if d > 0),
            "accepted_per_pos": per_pos,
            "generation_tokens": sum(self.tokens),
            "decode_s": self.decode_s,
            "requests_finished": 1 if self.observed else 0,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq, "request_id": self.request_id, "kind": self.kind, "stream": self.stream,
            "arrival": self.arrival, "arrival_wall": self.arrival_wall, "start": self.start, "arm": self.arm,
            "engine": self.engine, "prompt_tokens": self.prompt_tokens, "max_tokens": self.max_tokens,
            "seed": self.seed, "priority": self.priority, "cache_salt": self.cache_salt,
            "cached_tokens": self.cached_tokens, "status": self.status,
            "http_status": self.http_status, "error": self.error, "finish_reason": self.finish_reason,
            "completion_tokens": self.completion_tokens, "reasoning_tokens": self.reasoning_tokens,
            "decode_s": self.decode_s, "observed": self.observed,
            "fault": self.fault, "engine_fields": self.engine_fields,
            "planned": list(self.planned), "sent": list(self.sent), "tokens": list(self.tokens),
            "drafts": list(self.drafts), "accepted": list(self.accepted),
            "counters": {k: (v if k != "accepted_per_pos" else {str(p): n for p, n in v.items()})
                         for k, v in self.counters().items()},
        }


class TruthLog:
    """Every request since the simulator started, in arrival order; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestTruth] = []

    def new(self, **fields: Any) -> RequestTruth:
        with self._lock:
            record = RequestTruth(seq=len(self._records) + 1, **fields)
            self._records.append(record)
            return record

    def since(self, after: int = 0) -> list[RequestTruth]:
        with self._lock:
            return list(self._records[after:])

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def totals(self, after: int = 0) -> dict[str, Any]:
        """Summed counter contributions of the requests after ``after``."""
        total: dict[str, Any] = {"requests": 0, "rounds": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0,
                                 "accepted_delivered": 0, "generation_tokens": 0, "decode_s": 0.0,
                                 "requests_finished": 0}
        per_pos: dict[int, int] = {}
        for record in self.since(after):
            total["requests"] += 1
            counts = record.counters()
            for key in ("rounds", "drafts", "draft_tokens", "accepted", "accepted_delivered", "generation_tokens",
                        "decode_s", "requests_finished"):
                total[key] += counts[key]
            for position, n in counts["accepted_per_pos"].items():
                per_pos[position] = per_pos.get(position, 0) + n
        total["accepted_per_pos"] = [per_pos[p] for p in sorted(per_pos)]
        return total
