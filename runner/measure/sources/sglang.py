"""SGLang's counters (``--enable-metrics``; ``python/sglang/srt/metrics/collector.py``).

``TokenizerMetricsCollector`` counts ``sglang:generation_tokens_total`` per finished
request (every generated token) and ``sglang:num_requests_total``; its
``observe_inter_token_latency`` adds each output's interval since the previous one to
``sglang:inter_token_latency_seconds_sum``, so the histogram's sum is the decoding time
after each request's first token, summed over requests. ``SchedulerMetricsCollector``
has the gauges ``sglang:num_running_reqs``, ``sglang:num_queue_reqs`` and
``sglang:token_usage`` (KV pool usage, 0..1).

Speculative decoding is exported only as the gauges ``sglang:spec_accept_length`` and
``sglang:spec_accept_rate``, averages over the scheduler's last logging interval: no
counter to take a wave's delta of. So a speculative arm's rounds and accepted tokens are
not counted on SGLang (``counts_rounds`` false); a spec-off arm's rounds are. SGLang
streams every ``--stream-interval`` decode steps (1 by default), which a client cannot
see: a chunk is not claimed to be an engine step.
"""

from __future__ import annotations

from typing import ClassVar

from ..metrics import CounterDeltas, DeltaReader
from .base import CounterSource

__all__ = ["SglangSource"]

GENERATED = "sglang:generation_tokens_total"
ITL_SUM = "sglang:inter_token_latency_seconds_sum"
NOT_COUNTED = ("not counted: SGLang exports speculative decoding only as windowed gauges "
               "(sglang:spec_accept_length, sglang:spec_accept_rate), no counters")


class SglangSource(CounterSource):
    name = "sglang"
    label = "SGLang"
    counts_rounds = False
    chunks_are_steps = False
    generation_series = GENERATED
    decode_series = ITL_SUM
    served_series = "sglang:num_requests_total"
    gauge_series: ClassVar[dict[str, tuple[str, ...]]] = {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
    }

    def _spec_series(self) -> tuple[str, ...]:
        return ()

    def _speculative(self, reader: DeltaReader, first_tokens: int) -> CounterDeltas:
        generated = reader.count(GENERATED)
        decode = reader.delta(ITL_SUM)
        derived = {"generation_tokens": f"Δ{GENERATED}", "decode_s": f"Δ{ITL_SUM}",
                   **{key: NOT_COUNTED for key in ("rounds", "accepted", "draft_tokens", "drafts", "accepted_per_pos")}}
        return CounterDeltas(
            rounds=None, accepted=None, draft_tokens=None, accepted_per_pos=None, decode_s=decode,
            generation_tokens=generated, missing=tuple(reader.missing), problems=tuple(reader.problems),
            derived=derived, notes=(f"SGLang: rounds and accepted tokens {NOT_COUNTED}",))
