"""Every way a request or a wave can go wrong is recorded, never dropped, never silently zero."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

import runner.sim as sim
from ledger.errors import FormatError
from runner.measure import RequestRecord, WaveResult, measure_wave
from runner.sim import SimHandle

from .conftest import MODEL, fast_config, prompts


def wave(host: SimHandle, n: int = 3, **kwargs: object) -> WaveResult:
    options = {"model": MODEL, "max_tokens": 64, "seed": 42, **kwargs}
    return measure_wave(host.url, host.metrics_url, prompts(n), **options)  # type: ignore[arg-type]


def test_logit_bias_non_streaming_gets_400_body(server: SimHandle) -> None:
    response = httpx.post(f"{server.url}/v1/completions", json={"model": MODEL, "prompt": "p", "max_tokens": 4,
                                                                 "logit_bias": {"1": 100}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400


def test_error_frame_inside_200_stream_is_failed(server: SimHandle) -> None:
    result = wave(server, n=2, extra_body={"logit_bias": {"1": 100}})
    for record in result.requests:
        assert record.status == "failed" and record.http_status == 200
        assert record.error["error"]["code"] == 400
        assert record.reason is not None and record.reason.startswith("error frame: The min_p and logit_bias")
        assert record.done  # vLLM still ends the stream with [DONE]
    assert not result.complete and "2 requests failed" in result.incomplete_reasons


def test_http_5xx_recorded_failed_with_body(server: SimHandle) -> None:
    server.set_faults(http_5xx={"count": 1, "status": 503})
    result = wave(server, n=3)
    first = result.requests[0]
    assert first.status == "failed" and first.http_status == 503
    assert first.error["error"]["type"] == "InternalServerError" and (first.reason or "").startswith("HTTP 503")
    assert [r.status for r in result.requests[1:]] == ["ok", "ok"]
    assert result.incomplete_reasons == ("1 request failed",)


def test_stall_past_request_deadline_is_censored_with_partial_tokens(server: SimHandle) -> None:
    server.set_faults(stall={"after_chunks": 5, "seconds": 3.0})
    start = time.perf_counter()
    result = wave(server, n=2, max_tokens=200, deadline_s=0.5)
    assert time.perf_counter() - start < 2.5  # the deadline cut the stall; it did not wait it out
    cut, fine = result.requests
    assert cut.status == "censored" and len(cut.chunk_t) == 5
    assert cut.delivered_tokens == sum(cut.chunk_tokens or ()) > 0 and cut.tokens_source == "token_ids"
    assert cut.reason is not None and "request deadline 0.5 s passed after 5 chunks" in cut.reason
    assert 0.45 < cut.ended_s < 1.0
    assert fine.status == "ok"
    assert result.summary()["client"]["censored"] == 1


def test_no_first_token_before_deadline_is_timeout(server: SimHandle) -> None:
    server.set_faults(slow_ttft={"seconds": 2.0})
    result = wave(server, n=1, deadline_s=0.3)
    (record,) = result.requests
    assert record.status == "timeout" and record.delivered_tokens == 0 and record.chunk_t == ()
    assert "(no content)" in (record.reason or "")
    assert "1 request timed out" in result.incomplete_reasons


def test_dropped_connection_recorded_with_partial_tokens(server: SimHandle) -> None:
    server.set_faults(drop={"after_chunks": 7})
    result = wave(server, n=2, max_tokens=100)
    dropped = result.requests[0]
    assert dropped.status == "failed" and len(dropped.chunk_t) == 7 and dropped.delivered_tokens > 0
    assert dropped.reason is not None and dropped.reason.startswith("connection lost after 7 chunks")
    assert result.requests[1].status == "ok"
    assert result.summary()["client"]["failed"] == 1


def test_error_frame_mid_stream_keeps_partial(server: SimHandle) -> None:
    server.set_faults(error_frame={"after_chunks": 3, "message": "engine dead"})
    (record,) = wave(server, n=1).requests
    assert record.status == "failed" and len(record.chunk_t) == 3 and record.reason == "error frame: engine dead"


def test_metrics_down_marks_wave_incomplete_not_zero(server: SimHandle) -> None:
    server.set_faults(metrics_down=True)
    result = wave(server, n=2)
    summary = result.summary()
    assert all(v is None for v in summary["counters"].values())
    assert len(summary["counters_missing"]) == 6
    assert not summary["complete"]
    assert summary["incomplete_reasons"] == [f"metrics at {server.metrics_url} answered HTTP 503 (before and after the wave)"]
    assert summary["client"]["ok"] == 2  # the client side was still measured


def test_server_restart_during_wave_is_a_counter_reset(server: SimHandle) -> None:
    server.control("drain")
    server.control("snapshot")
    server.control("start_arm", arm="A", role="A")

    def restart(record: RequestRecord) -> None:
        if record.index == 0:
            server.control("stop_arm")
            server.control("start_arm", arm="A", role="A")

    result = wave(server, n=2, on_request=restart)
    assert not result.complete
    assert result.summary()["counters"]["rounds"] is None
    assert any("counter reset" in r for r in result.incomplete_reasons)


def test_arm_without_spec_decode_reports_missing(server: SimHandle) -> None:
    server.control("drain")
    server.control("snapshot")
    server.control("start_arm", arm="off", role="A")
    result = wave(server, n=1)
    summary = result.summary()
    assert summary["counters"]["accepted_per_pos"] is None and summary["counters"]["accepted"] is None
    assert summary["counters"]["generation_tokens"] == 64
    # the decode steps are still counted: one inter-token latency per step (63 after the first token)
    assert summary["counters"]["rounds"] == 63
    assert "vllm:spec_decode_num_drafts_total" in summary["counters_missing"]
    assert summary["complete"]  # the server answered; it just has no such series
    assert any("no speculative-decoding series" in n for n in result.notes)


def test_wave_deadline_cancels_unsent_and_cuts_in_flight() -> None:
    slow = fast_config(time_scale=0.5)
    with sim.start(slow) as host:
        result = measure_wave(host.url, host.metrics_url, prompts(4), model=MODEL, max_tokens=400, seed=1,
                              wave_deadline_s=0.6)
    statuses = [r.status for r in result.requests]
    assert statuses[0] == "censored" and statuses[1:] == ["cancelled"] * 3
    assert result.requests[1].reason == "not sent: wave deadline passed"
    assert "wave deadline passed" in (result.requests[0].reason or "")
    assert len(result.requests) == 4


def test_cancel_event_stops_at_once_and_keeps_everything() -> None:
    cancel = threading.Event()
    threading.Timer(0.4, cancel.set).start()
    slow = fast_config(time_scale=0.5)
    with sim.start(slow) as host:
        start = time.perf_counter()
        result = measure_wave(host.url, host.metrics_url, prompts(3), model=MODEL, max_tokens=400, seed=1,
                              cancel=cancel)
    assert time.perf_counter() - start < 1.5
    assert [r.status for r in result.requests] == ["cancelled"] * 3
    assert result.requests[0].delivered_tokens > 0  # the partial is kept
    assert result.cancelled and "wave cancelled" in result.incomplete_reasons


def test_unreachable_server_every_request_failed() -> None:
    with sim.start(fast_config()) as host:
        url = host.url
    result = measure_wave(url, f"{url}/metrics", prompts(2), model=MODEL, max_tokens=8, seed=1)
    assert [r.status for r in result.requests] == ["failed", "failed"]
    assert all("connection lost after 0 chunks: ConnectError" in (r.reason or "") for r in result.requests)
    assert any("metrics unreachable" in r for r in result.incomplete_reasons)


def test_early_stop_flagged_when_server_ignores_ignore_eos() -> None:
    config = fast_config(ignore_fields=["ignore_eos"], eos_probability=0.05)
    with sim.start(config, seed=2) as host:
        result = measure_wave(host.url, host.metrics_url, prompts(4), model=MODEL, max_tokens=200, seed=5)
    early = [r for r in result.requests if r.early_stop]
    assert early and all(r.status == "ok" and r.finish_reason == "stop" and r.delivered_tokens < 200 for r in early)
    assert any("may ignore ignore_eos" in n for n in result.notes)


def test_bad_arguments_refused() -> None:
    for kwargs in ({"concurrency": 0}, {"max_tokens": 0}, {"deadline_s": -1.0}):
        with pytest.raises(FormatError):
            measure_wave("http://127.0.0.1:9", None, prompts(1), model=MODEL, seed=1,
                         **{"max_tokens": 4, **kwargs})  # type: ignore[arg-type]
    with pytest.raises(FormatError):
        measure_wave("http://127.0.0.1:9", None, (), model=MODEL, max_tokens=4, seed=1)
