"""Bounded decode runs: cut a decode bound after the first token, so a long prefill does not eat the bound."""

from __future__ import annotations

from typing import Any

from runner.measure import measure_wave
from runner.measure.record import RequestRecord
from runner.measure.wave import WaveResult
from runner.sim import SimHandle

from .conftest import MODEL, prompts

PREFILL_S = 0.5   # a slow first token (the simulator's slow_ttft fault), real seconds
BOUND_S = 0.2


def _one(server: SimHandle, **kwargs: Any) -> tuple[WaveResult, RequestRecord]:
    server.set_faults(slow_ttft={"count": 1, "seconds": PREFILL_S})
    wave = measure_wave(server.url, server.metrics_url, prompts(1), model=MODEL, max_tokens=4096, seed=3, **kwargs)
    return wave, wave.requests[0]


def test_the_bound_counts_from_the_first_token_not_the_send(server: SimHandle) -> None:
    wave, record = _one(server, deadline_s=2.0, decode_bound_s=BOUND_S)
    assert record.status == "bounded", record.reason
    assert record.ttft_s is not None and record.ttft_s >= PREFILL_S  # the prefill is reported apart
    assert record.decode_s is not None and BOUND_S * 0.85 <= record.decode_s <= BOUND_S * 1.2
    assert record.delivered_tokens > 50 and record.reason and "decode bound 0.2 s after the first token" in record.reason
    client = wave.summary()["client"]
    assert client["bounded"] == 1 and client["censored"] == 0 and wave.complete
    assert client["ttft_s"] == [record.ttft_s]  # its TTFT is measured whole, apart from its decode
    assert wave.figures()["requests"]["bounded"] == 1


def test_a_deadline_from_the_send_is_eaten_by_the_prefill_and_censors(server: SimHandle) -> None:
    _, record = _one(server, deadline_s=PREFILL_S + BOUND_S / 2)  # the same request, its deadline from the send
    assert record.status == "censored"
    assert record.decode_s is not None and record.decode_s < BOUND_S * 0.8


def test_no_first_token_before_the_deadline_is_a_timeout(server: SimHandle) -> None:
    _, record = _one(server, deadline_s=0.2, decode_bound_s=1.0)
    assert record.status == "timeout" and record.reason and "(to the first token)" in record.reason


def test_a_run_that_finishes_inside_its_bound_is_ok(server: SimHandle) -> None:
    wave = measure_wave(server.url, server.metrics_url, prompts(1), model=MODEL, max_tokens=16, seed=3,
                        deadline_s=2.0, decode_bound_s=5.0)
    assert wave.requests[0].status == "ok" and "bounded" not in wave.summary()["client"]
