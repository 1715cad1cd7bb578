"""Token-true timing (pure): how many tokens each streamed chunk carried, and per-token intervals.

A streamed chunk may carry several tokens (vLLM sends one engine step per chunk: 1 +
accepted tokens under speculative decoding) or exactly one (llama.cpp streams every
token on its own, even when a verification step accepted several). So the gaps between
chunks (vLLM's "ITL") are per-chunk figures. The tokens of each chunk are counted, in
this order of preference (the first that covers every content chunk wins):

1. ``token_ids``: the number of token ids the chunk carries (vLLM ``return_token_ids``);
2. ``usage_deltas``: the growth of ``usage.completion_tokens`` when the server streams
   usage with every chunk (vLLM ``stream_options.continuous_usage_stats``);
3. ``tokenizer``: the chunk's text counted by a tokenizer the caller declared;
4. ``one_per_chunk``: one token per content chunk, and the record says so.

Per-token ITL: chunk i > 0 arriving ``gap_i`` after chunk i-1 with ``k_i`` tokens
contributes ``k_i`` intervals of ``gap_i / k_i``; the tokens of the first chunk after its
first arrived with it and contribute intervals of 0. So a request with N counted tokens
has N - 1 per-token intervals whose sum is last chunk - first chunk (E2EL - TTFT), and
their mean is ``vllm bench serve``'s TPOT = (E2EL - TTFT) / (N - 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

from ..vocabulary import TokenCountSource

__all__ = ["count_chunk_tokens", "token_intervals_ms", "tpot_ms"]


def count_chunk_tokens(chunks: int, *, ids: Sequence[int], ids_everywhere: bool,
                       usage: Sequence[int | None], texts: Sequence[str] | None = None,
                       tokenizer: Callable[[str], int] | None = None) -> tuple[tuple[int, ...], TokenCountSource]:
    """Tokens per content chunk and how they were counted.

    ``ids`` are the token-id counts per chunk (valid when ``ids_everywhere``), ``usage``
    the cumulative ``completion_tokens`` seen with each chunk (``None`` where the chunk
    had none), ``texts`` the chunks' text for a declared ``tokenizer``.
    """
    if chunks == 0:
        return (), "none"
    if ids_everywhere and len(ids) == chunks and all(k >= 1 for k in ids):
        return tuple(ids), "token_ids"
    if len(usage) == chunks and all(u is not None for u in usage):
        marks = [int(u) for u in usage if u is not None]
        deltas = [marks[0], *(b - a for a, b in pairwise(marks))]
        if all(d >= 1 for d in deltas):
            return tuple(deltas), "usage_deltas"
    if tokenizer is not None and texts is not None and len(texts) == chunks:
        counted = [tokenizer(text) for text in texts]
        if all(isinstance(k, int) and k >= 1 for k in counted):
            return tuple(counted), "tokenizer"
    return (1,) * chunks, "one_per_chunk"


def token_intervals_ms(chunk_t: Sequence[float], counts: Sequence[int]) -> list[float]:
    """Per-token intervals in ms: ``sum(counts) - 1`` of them (see the module docstring)."""
    if not chunk_t or len(counts) != len(chunk_t):
        return []
    out = [0.0] * (counts[0] - 1)
    for i in range(1, len(chunk_t)):
        k = counts[i]
        out.extend([(chunk_t[i] - chunk_t[i - 1]) * 1000.0 / k] * k)
    return out


def tpot_ms(chunk_t: Sequence[float], output_tokens: int) -> float | None:
    """``vllm bench serve``'s TPOT: (E2EL - TTFT) / (output tokens - 1), for more than one token."""
    if not chunk_t or output_tokens <= 1:
        return None
    return (chunk_t[-1] - chunk_t[0]) / (output_tokens - 1) * 1000.0
