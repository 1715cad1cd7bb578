"""Token-true timing: tokens counted per chunk, per-token ITL and TPOT beside the per-chunk intervals.

Against the simulator streaming one engine step per chunk (several tokens a chunk, as
vLLM under speculative decoding) and one token per chunk (as llama.cpp), with the
simulator's own record of what it sent (``/_sim/truth``) as the reference.
"""

from __future__ import annotations

import json
from typing import Any

import numpy
import pytest

import runner.sim as sim
from runner.measure import RequestRecord, measure_wave
from runner.measure.timing import count_chunk_tokens, token_intervals_ms, tpot_ms
from runner.sim import SimHandle

from .conftest import MODEL, fast_config, prompts
from .hostile import Handler, serve


def truth_steps(host: SimHandle) -> dict[str, list[int]]:
    """Tokens per engine step of each request, as the simulator generated them."""
    return {r["request_id"]: r["tokens"] for r in host.truth()["requests"]}


def check_per_token(record: RequestRecord) -> None:
    """The invariants of per-token intervals against the per-chunk ones and bench's TPOT."""
    tokens = sum(record.chunk_token_counts)
    per_token, per_chunk = record.token_intervals_ms, record.intervals_ms
    assert len(per_token) == tokens - 1
    assert len(per_chunk) == len(record.chunk_t) - 1
    e2el_minus_ttft_ms = (record.chunk_t[-1] - record.chunk_t[0]) * 1000.0
    assert sum(per_token) == pytest.approx(e2el_minus_ttft_ms, rel=1e-9)
    assert sum(per_chunk) == pytest.approx(e2el_minus_ttft_ms, rel=1e-9)
    assert record.tpot_ms == pytest.approx(e2el_minus_ttft_ms / (record.delivered_tokens - 1), rel=1e-9)
    assert numpy.mean(per_token) == pytest.approx(record.tpot_ms, rel=1e-9)   # counted tokens = delivered ones


def test_chunks_of_several_tokens_split_into_per_token_intervals() -> None:
    with sim.start(fast_config(time_scale=0.1), seed=11) as host:
        wave = measure_wave(host.url, host.metrics_url, prompts(3), model=MODEL, max_tokens=64, seed=5,
                            speculative=True)
        steps = truth_steps(host)
    several = 0
    for record in wave.requests:
        assert record.status == "ok" and record.token_count_source == "token_ids"
        assert list(record.chunk_token_counts) == steps[record.request_id]   # one chunk per engine step
        assert sum(record.chunk_token_counts) == record.delivered_tokens == 64
        check_per_token(record)
        several += sum(1 for k in record.chunk_token_counts if k > 1)
        assert len(record.token_intervals_ms) > len(record.intervals_ms)   # fewer chunks than tokens
        # vLLM's chunks are engine steps: the chunk p95 is the round p95
        assert record.round_ms_p95 == record.chunk_ms_p95 is not None
        # a chunk of k tokens contributes k equal intervals of its gap / k
        gaps = iter(record.intervals_ms)
        rest = list(record.token_intervals_ms[record.chunk_token_counts[0] - 1:])
        for k in record.chunk_token_counts[1:]:
            gap = next(gaps)
            assert rest[:k] == pytest.approx([gap / k] * k)
            rest = rest[k:]
    assert several > 10
    client = wave.summary()["client"]
    assert client["tokens_per_chunk"] > 1.5
    assert client["token_itl_ms"]["p50"] < client["chunk_interval_ms"]["p50"]   # a chunk gap spans several tokens
    assert client["token_count_sources"] == {"token_ids": 3}
    assert client["tpot_ms"]["p50"] == pytest.approx(numpy.median([r.tpot_ms for r in wave.requests]))
    entry = wave.summary()["requests"][0]
    record = wave.requests[0]
    assert (entry["chunk_ms_p95"], entry["token_itl_ms_p95"], entry["tpot_ms"], entry["token_count_source"]) == (
        record.chunk_ms_p95, record.token_itl_ms_p95, record.tpot_ms, "token_ids")
    assert entry["token_itl_ms_p95"] < entry["chunk_ms_p95"]


def test_one_token_per_chunk_is_not_a_round() -> None:
    """llama.cpp streams every token on its own, even under speculative decoding."""
    with sim.start(fast_config(time_scale=0.1, stream_mode="token", metrics_format="llamacpp"), seed=11) as host:
        wave = measure_wave(host.url, host.metrics_url, prompts(2), model=MODEL, max_tokens=48, seed=5,
                            counter_source="llamacpp", speculative=True)
        steps = truth_steps(host)
    for record in wave.requests:
        assert record.status == "ok" and set(record.chunk_token_counts) == {1}
        assert len(record.chunk_t) == record.delivered_tokens == 48
        check_per_token(record)
        assert record.token_intervals_ms == pytest.approx(record.intervals_ms)
        assert record.round_ms_p95 is None   # a chunk is not an engine step here
        assert record.chunk_ms_p95 == pytest.approx(record.token_itl_ms_p95)
        assert len(steps[record.request_id]) < len(record.chunk_t)   # fewer engine steps than chunks
        line = json.loads(record.json_line())
        assert line["chunks_are_steps"] is False and line["round_ms_p95"] is None
    summary = wave.summary()
    assert summary["counter_source"]["chunks_are_steps"] is False
    assert summary["client"]["tokens_per_chunk"] == 1.0
    assert all(r["round_ms_p95"] is None and r["chunk_ms_p95"] is not None for r in summary["requests"])


def test_usage_deltas_count_tokens_without_token_ids(server: SimHandle) -> None:
    wave = measure_wave(server.url, server.metrics_url, prompts(2), model=MODEL, max_tokens=40, seed=5,
                        return_token_ids=False, continuous_usage=True)
    steps = truth_steps(server)
    for record in wave.requests:
        assert record.token_count_source == "usage_deltas" and record.chunk_tokens is None
        assert list(record.chunk_token_counts) == steps[record.request_id]
        check_per_token(record)


def test_without_ids_or_usage_one_token_per_chunk_and_it_says_so(server: SimHandle) -> None:
    wave = measure_wave(server.url, server.metrics_url, prompts(1), model=MODEL, max_tokens=40, seed=5,
                        return_token_ids=False)
    (record,) = wave.requests
    assert record.token_count_source == "one_per_chunk" and set(record.chunk_token_counts) == {1}
    assert record.delivered_tokens == 40 > len(record.chunk_t)   # usage says more tokens than chunks
    assert len(record.token_intervals_ms) == len(record.chunk_t) - 1   # so only chunk-many intervals
    assert wave.summary()["client"]["token_count_sources"] == {"one_per_chunk": 1}
    assert wave.summary()["requests"][0]["token_count_source"] == "one_per_chunk"


def test_a_declared_tokenizer_counts_the_text(server: SimHandle) -> None:
    wave = measure_wave(server.url, server.metrics_url, prompts(1), model=MODEL, max_tokens=40, seed=5,
                        return_token_ids=False, tokenizer=lambda text: len(text.split()))
    (record,) = wave.requests
    assert record.token_count_source == "tokenizer"
    assert list(record.chunk_token_counts) == truth_steps(server)[record.request_id]   # the sim: a token is a word
    check_per_token(record)


def test_counting_rules() -> None:
    assert count_chunk_tokens(0, ids=[], ids_everywhere=True, usage=[]) == ((), "none")
    assert count_chunk_tokens(2, ids=[3, 1], ids_everywhere=True, usage=[None, None]) == ((3, 1), "token_ids")
    # ids missing on one chunk: the cumulative usage gives the counts
    assert count_chunk_tokens(3, ids=[3, 1, 1], ids_everywhere=False, usage=[1, 4, 6]) == ((1, 3, 2), "usage_deltas")
    # usage that does not grow with every chunk is not a count
    assert count_chunk_tokens(2, ids=[1, 1], ids_everywhere=False, usage=[2, 2]) == ((1, 1), "one_per_chunk")
    assert count_chunk_tokens(2, ids=[1, 1], ids_everywhere=False, usage=[2, None]) == ((1, 1), "one_per_chunk")
    assert count_chunk_tokens(2, ids=[1, 1], ids_everywhere=False, usage=[None, None], texts=["a b", "c"],
                              tokenizer=lambda t: len(t.split())) == ((2, 1), "tokenizer")
    # the first chunk's later tokens arrived with it: intervals of 0; later chunks split their gap
    assert token_intervals_ms([0.010, 0.040, 0.041], [2, 3, 1]) == pytest.approx([0.0, 10.0, 10.0, 10.0, 1.0])
    assert tpot_ms([0.010, 0.040, 0.041], 6) == pytest.approx(31.0 / 5)
    assert tpot_ms([0.010], 1) is None


class Inflating(Handler):
    """Claims far more tokens than asked for: 1,000 token ids a chunk, or usage growing to 2**53 - 1."""

    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        frames = []
        for i in range(3):
            choice: dict[str, Any] = {"index": 0, "text": f" w{i}", "finish_reason": "length" if i == 2 else None}
            frame: dict[str, Any] = {"id": "cmpl-1", "object": "text_completion", "model": "tiny",
                                     "choices": [choice]}
            if body.get("mode") == "ids":
                choice["token_ids"] = list(range(1000))
            else:
                frame["usage"] = {"completion_tokens": (1, 2**53 - 2, 2**53 - 1)[i]}
            frame["timings"] = {"predicted_n": 3, "predicted_ms": 12.5, "bad": float("nan") if i else "x",
                                "nested": {"deep": 1}}
            frames.append(b"data: " + json.dumps(frame).encode() + b"\n\n")
        self.wfile.write(b"".join(frames) + b"data: [DONE]\n\n")


@pytest.mark.parametrize("mode", ["ids", "usage"])
def test_token_counts_beyond_the_chunk_bound_fail_the_request(mode: str) -> None:
    with serve(Inflating) as server:
        wave = measure_wave(server.url, None, prompts(1), model="tiny", max_tokens=8, seed=1,
                            extra_body={"mode": mode})
    (record,) = wave.requests
    assert record.status == "failed" and record.reason is not None
    assert "more than 80 (2 x max_tokens + 64): refused" in record.reason
    assert record.token_count_source == "one_per_chunk" and len(record.token_intervals_ms) == 2
    assert record.timings == {"predicted_n": 3, "predicted_ms": 12.5}   # numbers only, from the last frame
