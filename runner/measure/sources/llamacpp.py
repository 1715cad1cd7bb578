"""The native llama.cpp server's counters (``llama-server --metrics``).

Read from ``tools/server/server-task.cpp`` (``server_task_result_metrics::to_metrics``)
and ``server-context.cpp`` (``metrics_on_prediction``) of the llama.cpp vendored by
llama-cpp-python 0.3.36. The counters move when a request *finishes* (its slot is
released), so the scrape after a wave includes every request of it once
``llamacpp:requests_processing`` reads 0 (a request the client cut, a bounded decode run,
may hold its slot a moment longer: the after-scrape is repeated until then, bounded):

- ``llamacpp:tokens_predicted_total`` adds each request's ``n_gen``: every generated
  token, the first one (sampled from the prompt's logits, "free") included;
- ``llamacpp:tokens_predicted_seconds_total`` adds ``t_gen``: from the first token to
  the last, i.e. the decoding after the first token;
- ``llamacpp:spec_decode_num_draft_tokens_total``, ``..._num_accepted_tokens_total``,
  ``..._num_drafts_total`` (verification steps; not in every build) and
  ``..._num_accepted_tokens_per_pos_total{position}`` (only once something was drafted);
- gauges ``llamacpp:requests_processing``, ``llamacpp:requests_deferred`` and, in older
  builds, ``llamacpp:kv_cache_usage_ratio``.

Each decode step emits 1 + accepted tokens, so the decode steps (rounds) of the wave are
Δtokens_predicted - Δaccepted - (the requests' first tokens). Values are printed by a
C++ stream at its default precision, **6 significant digits**: above 10^6 tokens or
10^3 seconds a counter is rounded, and the resolution of each delta is recorded.
llama.cpp streams one token per chunk even under speculative decoding: a chunk is not
an engine step.
"""

from __future__ import annotations

from typing import ClassVar

from ..metrics import CounterDeltas, DeltaReader
from .base import CounterSource

__all__ = ["LlamaCppSource"]

PREDICTED = "llamacpp:tokens_predicted_total"
PREDICTED_SECONDS = "llamacpp:tokens_predicted_seconds_total"
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
DRAFTS = "llamacpp:spec_decode_num_drafts_total"
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


class LlamaCppSource(CounterSource):
    name = "llamacpp"
    label = "llama.cpp"
    counts_rounds = True
    chunks_are_steps = False
    generation_series = PREDICTED
    decode_series = PREDICTED_SECONDS
    served_series = PREDICTED
    served_counts = "tokens"
    draft_tokens_series = DRAFT_TOKENS
    print_digits = 6
    settle_series = "llamacpp:requests_processing"  # a slot the client cut is counted once released
    gauge_series: ClassVar[dict[str, tuple[str, ...]]] = {
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
    }

    def _spec_series(self) -> tuple[str, ...]:
        return (ACCEPTED, DRAFT_TOKENS, DRAFTS, PER_POS)

    @staticmethod
    def _per_pos(reader: DeltaReader) -> tuple[int, ...] | None:
        """Δper-position acceptance; the series is printed only once a slot verified a draft."""
        before, after = reader.before, reader.after
        never = (DRAFT_TOKENS in before.values and before.values[DRAFT_TOKENS] == 0
                 and not before.has(PER_POS))   # nothing drafted before the wave: every position was 0
        if never and after.has(PER_POS) and after.values.get(DRAFT_TOKENS, 0) > 0:
            return tuple(round(n) for n in (after.by_position(PER_POS).get(i, 0.0)
                                            for i in range(max(after.by_position(PER_POS)) + 1)))
        if never and DRAFT_TOKENS in after.values and after.values[DRAFT_TOKENS] == 0:
            return ()   # nothing drafted during the wave either
        return reader.positions(PER_POS)

    def _speculative(self, reader: DeltaReader, first_tokens: int) -> CounterDeltas:
        generated = reader.count(PREDICTED)
        decode = reader.delta(PREDICTED_SECONDS)
        accepted = reader.count(ACCEPTED)
        draft_tokens = reader.count(DRAFT_TOKENS)
        drafts = reader.count(DRAFTS)
        per_pos = self._per_pos(reader)
        derived = {"accepted": f"Δ{ACCEPTED}", "draft_tokens": f"Δ{DRAFT_TOKENS}", "drafts": f"Δ{DRAFTS}",
                   "decode_s": f"Δ{PREDICTED_SECONDS}", "generation_tokens": f"Δ{PREDICTED}",
                   "accepted_per_pos": f"Δ{PER_POS} by position"}
        rounds = None
        if generated is not None and accepted is not None:
            value = generated - accepted - first_tokens
            if value >= 0:
                rounds = value
                derived["rounds"] = (f"Δ{PREDICTED} - Δ{ACCEPTED} - {first_tokens} first tokens "
                                     "(each decode step emits 1 + accepted tokens)")
            else:
                reader.problems.append(f"{PREDICTED} - {ACCEPTED} moved by {generated - accepted}, fewer than the "
                                       f"{first_tokens} requests that delivered a first token")
        return CounterDeltas(
            rounds=rounds, accepted=accepted, draft_tokens=draft_tokens, accepted_per_pos=per_pos, decode_s=decode,
            generation_tokens=generated, missing=tuple(reader.missing), problems=tuple(reader.problems),
            drafts=drafts, derived=derived)
