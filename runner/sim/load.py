"""The HTTP simulator's batch under ``step_model = "batch"``: what an engine serves at once.

Each request streams from its own thread, so there is no global engine step; instead every
request's next step is timed by the arm's step model (:class:`.batch.StepCosts`) applied to
the batch as it stands when the step starts: every active request's decode tokens
(``1 + drafts``), the prefill tokens in flight and the context all of them read. ``n``
requests decoding together therefore each take ``fixed + n x (k + 1) x per_token`` (+ KV)
per step, as one engine step of the whole batch would. At most ``max_num_seqs`` requests
are served at once; the rest wait for a seat (their TTFT includes the wait). The exact
scheduler (token budget, chunked prefill, preemption) is :func:`.batch.simulate`, which
the twin's predictions use; this is its streaming counterpart.
"""

from __future__ import annotations

import threading

from .batch import BLOCK_SIZE, StepCosts
from .config import ArmConfig

__all__ = ["BatchLoad"]


class BatchLoad:
    """The active requests of one engine session and what their next step costs."""

    def __init__(self, arm: ArmConfig) -> None:
        self.costs = StepCosts(arm.step_base_ms, arm.step_per_token_ms, prefill_fixed_ms=arm.ttft_base_ms,
                               per_prefill_token_ms=arm.ttft_per_1k_tokens_ms / 1000.0,
                               per_kv_token_us=arm.step_per_kv_token_us)
        self.kv_blocks = arm.kv_cache_blocks
        self.seats = threading.BoundedSemaphore(arm.max_num_seqs)
        self._lock = threading.Lock()
        self._active: dict[int, tuple[int, int, int]] = {}   # key -> (decode tokens, prefill tokens, context)

    def set(self, key: int, decode: int, prefill: int, context: int) -> None:
        with self._lock:
            self._active[key] = (decode, prefill, context)

    def leave(self, key: int) -> None:
        with self._lock:
            self._active.pop(key, None)

    def step(self) -> tuple[float, int]:
        """The model ms of a step of the batch as it stands, and the tokens it schedules."""
        with self._lock:
            decode = sum(d for d, _p, _c in self._active.values())
            prefill = sum(p for _d, p, _c in self._active.values())
            context = sum(c + d + p for d, p, c in self._active.values())
        return self.costs.step_ms(decode, prefill, context), decode + prefill

    def kv_usage(self) -> float:
        """The share of the KV cache the batch holds (0 when it is unbounded)."""
        if not self.kv_blocks:
            return 0.0
        with self._lock:
            blocks = sum(-(-(c + d + p) // BLOCK_SIZE) for d, p, c in self._active.values())
        return min(1.0, blocks / self.kv_blocks)
