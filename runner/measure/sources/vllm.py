"""vLLM's counters (V1 engine, ``reference/vllm.md`` 1.1-1.2; ``vllm/v1/spec_decode/metrics.py``).

``SpecDecodingProm`` registers, only when speculative decoding is on,
``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens``
and ``..._num_accepted_tokens_per_pos`` (exposed with ``_total``). The first V1
versions (PR #15151, v0.8.x) had only the draft and accepted token counters; without
``num_drafts`` the rounds are derived from the generated tokens (below). vLLM streams
one chunk per engine step, so a chunk interval is a round time.

A draft is counted only for a decode step that proposed one: on real vLLM 0.32 with
n-gram speculation, a step whose context has no n-gram match drafts nothing (a 24-token
request: 10 decode steps, 6 drafts). The decode steps themselves are
``vllm:inter_token_latency_seconds_count``: ``IterationStats.update_from_output``
observes one inter-token latency per output of a request after its first, i.e. per
decode step, however many tokens the step emitted. Rounds are that count's delta
wherever the series is exposed; without it (an older vLLM) they are Δnum_drafts, as
before.
"""

from __future__ import annotations

from typing import ClassVar

from ..metrics import COUNTER_SERIES, CounterDeltas, DeltaReader
from .base import CounterSource

__all__ = ["VllmSource"]

DRAFTS = COUNTER_SERIES["rounds"]
ACCEPTED = COUNTER_SERIES["accepted"]
DRAFT_TOKENS = COUNTER_SERIES["draft_tokens"]
PER_POS = COUNTER_SERIES["accepted_per_pos"]
STEPS = "vllm:inter_token_latency_seconds_count"   # one sample per decode step of each request


class VllmSource(CounterSource):
    name = "vllm"
    label = "vLLM"
    counts_rounds = True
    chunks_are_steps = True
    generation_series = COUNTER_SERIES["generation_tokens"]
    decode_series = COUNTER_SERIES["decode_s"]
    served_series = "vllm:request_success_total"
    draft_tokens_series = DRAFT_TOKENS
    gauge_series: ClassVar[dict[str, tuple[str, ...]]] = {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),   # the older name second
    }

    def _spec_series(self) -> tuple[str, ...]:
        return (DRAFTS, ACCEPTED, DRAFT_TOKENS, PER_POS)

    def series(self) -> tuple[str, ...]:
        return tuple(COUNTER_SERIES.values())

    def _speculative(self, reader: DeltaReader, first_tokens: int) -> CounterDeltas:
        generated = reader.count(self.generation_series)
        decode = reader.delta(self.decode_series)
        accepted = reader.count(ACCEPTED)
        draft_tokens = reader.count(DRAFT_TOKENS)
        drafts_present = reader.present(DRAFTS)
        drafts = reader.count(DRAFTS)
        per_pos = reader.positions(PER_POS)
        derived = {"accepted": f"Δ{ACCEPTED}", "draft_tokens": f"Δ{DRAFT_TOKENS}", "decode_s": f"Δ{self.decode_series}",
                   "generation_tokens": f"Δ{self.generation_series}", "accepted_per_pos": f"Δ{PER_POS} by position",
                   "drafts": f"Δ{DRAFTS}"}
        rounds = drafts
        steps = reader.count(STEPS) if reader.present(STEPS) else None
        if steps is not None:
            rounds = steps
            derived["rounds"] = (f"Δ{STEPS} (one inter-token latency per decode step of each request; "
                                 f"{DRAFTS} counts only the steps that proposed a draft)")
        elif drafts is not None:
            derived["rounds"] = f"Δ{DRAFTS} (one draft per decode step: {STEPS} absent, an older vLLM)"
        elif not drafts_present and accepted is not None and generated is not None:
            # vLLM before num_drafts: each decode step emits 1 + accepted tokens after the request's first
            derived_rounds = generated - accepted - first_tokens
            if derived_rounds >= 0:
                rounds = derived_rounds
                derived["rounds"] = (f"Δ{self.generation_series} - Δ{ACCEPTED} - {first_tokens} first tokens "
                                     f"({DRAFTS} absent: a vLLM before num_drafts)")
            else:
                reader.problems.append(f"{self.generation_series} - {ACCEPTED} is below the {first_tokens} first "
                                       "tokens: rounds not derivable")
        return CounterDeltas(
            rounds=rounds, accepted=accepted, draft_tokens=draft_tokens, accepted_per_pos=per_pos, decode_s=decode,
            generation_tokens=generated, missing=tuple(reader.missing), problems=tuple(reader.problems),
            drafts=drafts, derived=derived)
