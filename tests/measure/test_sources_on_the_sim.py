"""Counter sources against the simulator: no /metrics, llama.cpp's series, spec-off arms, gauges and host load."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import httpx
import pytest

import runner.sim as sim
from ledger.store import Blob
from runner.events.catalogue import validate_payload
from runner.events.schema import to_wire
from runner.execution.starts import wave_payload
from runner.measure import measure_wave
from runner.sim import SimHandle

from .conftest import MODEL, fast_config, prompts
from .hostile import Handler, chunk, serve


def spec_off(host: SimHandle) -> None:
    host.control("drain")
    host.control("snapshot")
    host.control("start_arm", arm="off", role="A")


def test_no_metrics_endpoint_with_source_none_is_complete_on_client_figures() -> None:
    with sim.start(fast_config(metrics_format="none"), seed=2) as host:
        assert httpx.get(host.metrics_url).status_code == 404
        wave = measure_wave(host.url, host.metrics_url, prompts(2), model=MODEL, max_tokens=24, seed=1,
                            counter_source="none", speculative=True)
        vllm = measure_wave(host.url, host.metrics_url, prompts(2), model=MODEL, max_tokens=24, seed=1,
                            counter_source="vllm", speculative=True)
    summary = wave.summary()
    assert summary["complete"] and summary["incomplete_reasons"] == []
    assert all(v is None for v in summary["counters"].values())
    assert summary["counters_missing"] == []   # absent by declaration, not missing
    assert summary["counter_source"]["name"] == "none"
    assert "declares no server counters" in summary["counter_source"]["absent"]
    assert wave.counters_note == summary["counter_source"]["absent"]
    assert summary["gauges"] == {"before": None, "after": None, "series": {}}
    assert summary["client"]["ok"] == 2 and summary["client"]["token_itl_ms"] is not None
    assert not any("metrics" in n for n in wave.notes)
    # the same server read as vLLM: the existing behaviour, incomplete with the reason
    assert not vllm.complete
    assert vllm.incomplete_reasons == (f"no metrics endpoint at {vllm.metrics_url} (HTTP 404) (before and after the "
                                       "wave)",)
    assert len(vllm.summary()["counters_missing"]) == 6


class Plain(Handler):
    """Two content chunks and [DONE]; /metrics is the base handler's 404."""

    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        self.wfile.write(chunk(0) + chunk(1, last=True) + b"data: [DONE]\n\n")


@pytest.mark.parametrize(("source", "scrapes"), [("none", 0), ("vllm", 2)])
def test_source_none_reads_no_metrics(source: str, scrapes: int) -> None:
    with serve(Plain) as server:
        wave = measure_wave(server.url, f"{server.url}/metrics", prompts(1), model="tiny", max_tokens=2, seed=1,
                            counter_source=source)
    assert [path for _m, path, _h in server.seen].count("/metrics") == scrapes
    assert wave.complete is (source == "none")


def test_llamacpp_series_against_the_simulators_truth() -> None:
    with sim.start(fast_config(metrics_format="llamacpp", stream_mode="token"), seed=6) as host:
        wave = measure_wave(host.url, host.metrics_url, prompts(3), model=MODEL, max_tokens=50, seed=4,
                            counter_source="llamacpp", speculative=True, concurrency=2)
        truth = host.truth()
    totals = truth["totals"]
    steps = sum(len(r["tokens"]) - 1 for r in truth["requests"])   # decode steps after each first token
    c = wave.summary()["counters"]
    assert wave.complete and wave.summary()["counters_missing"] == []
    assert c["rounds"] == steps and c["accepted"] == totals["accepted"]
    # llama.cpp's verification steps: the steps that drafted (a step with one token left proposes nothing)
    assert c["drafts"] == totals["drafts"] and totals["drafts"] < totals["rounds"]
    assert c["draft_tokens"] == totals["draft_tokens"] and c["accepted_per_pos"] == totals["accepted_per_pos"]
    assert c["generation_tokens"] == totals["generation_tokens"] == 150
    resolution = wave.summary()["counter_source"]["resolution"]["decode_s"]
    assert c["decode_s"] == pytest.approx(totals["decode_s"], abs=resolution * 1.001)
    assert c["rounds"] + c["accepted"] == c["generation_tokens"] - 3   # every token after each request's first
    assert wave.summary()["counter_source"]["first_tokens"] == 3


def test_spec_off_arm_counts_rounds_without_spec_series(server: SimHandle) -> None:
    spec_off(server)
    wave = measure_wave(server.url, server.metrics_url, prompts(2), model=MODEL, max_tokens=32, seed=1,
                        speculative=False)
    summary = wave.summary()
    c = summary["counters"]
    assert summary["complete"] and summary["counters_missing"] == []
    assert (c["rounds"], c["accepted"], c["draft_tokens"], c["drafts"], c["accepted_per_pos"]) == (62, 0, 0, 0, [])
    assert c["generation_tokens"] == 64 and c["decode_s"] > 0
    assert summary["counter_source"]["speculative"] is False and summary["counter_source"]["first_tokens"] == 2
    assert not any("no speculative-decoding series" in n for n in wave.notes)
    # the same arm, nothing said of it: spec series missing, the decode steps still counted (one
    # inter-token latency per step: 7 after the first of 8 tokens)
    unknown = measure_wave(server.url, server.metrics_url, prompts(1), model=MODEL, max_tokens=8, seed=1)
    assert unknown.counters.rounds == 7 and "vllm:spec_decode_num_drafts_total" in unknown.counters.missing


def test_a_speculating_server_measured_as_spec_off_is_incomplete(server: SimHandle) -> None:
    wave = measure_wave(server.url, server.metrics_url, prompts(1), model=MODEL, max_tokens=32, seed=1,
                        speculative=False)
    assert not wave.complete
    assert any("runs no speculative decoding, yet vllm:spec_decode_num_draft_tokens_total counted" in r
               for r in wave.incomplete_reasons)


def test_gauges_and_load_average_before_and_after_in_wave_measured() -> None:
    """Another client's request in flight shows as running = 1 on both sides: contention is evidence."""
    with sim.start(fast_config(time_scale=0.5), seed=3) as host:
        quiet = measure_wave(host.url, host.metrics_url, prompts(1), model=MODEL, max_tokens=8, seed=1)
        body = {"model": MODEL, "prompt": "other traffic", "max_tokens": 4000, "ignore_eos": True, "stream": True}
        started, done = threading.Event(), threading.Event()

        def other() -> None:
            with contextlib.suppress(httpx.HTTPError), \
                    httpx.stream("POST", f"{host.url}/v1/completions", json=body, timeout=60) as reply:
                for _ in reply.iter_raw():
                    started.set()
                    if done.is_set():
                        return   # hang up: the simulator aborts the request

        thread = threading.Thread(target=other, daemon=True)
        thread.start()
        assert started.wait(10)
        busy = measure_wave(host.url, host.metrics_url, prompts(1), model=MODEL, max_tokens=8, seed=1,
                            family="opinions")
        done.set()
        thread.join(10)
    assert quiet.summary()["gauges"]["before"] == {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0}
    gauges = busy.summary()["gauges"]
    assert gauges["before"]["running"] == 1.0 and gauges["after"]["running"] == 1.0
    assert gauges["series"] == {"kv_cache_usage": "vllm:kv_cache_usage_perc", "running": "vllm:num_requests_running",
                                "waiting": "vllm:num_requests_waiting"}
    load = busy.summary()["host_load"]
    assert len(load["before"]) == len(load["after"]) == 3 and all(v >= 0 for v in load["before"] + load["after"])
    assert load["cpus"] >= 1
    # the members travel in the window's event, checked by its validator
    records = Blob(busy.records_jsonl(), "application/x-ndjson")
    payload = wave_payload("s1", "short-b1", 1, 1, busy, records)
    wire = {**to_wire(payload), "window": "w1", "plan_sha256": "0" * 64}
    validate_payload("wave.measured", wire)
    assert wire["gauges"]["before"]["running"] == 1.0 and wire["host_load"]["before"] == load["before"]
    assert wire["counter_source"]["name"] == "vllm" and wire["counter_source"]["chunks_are_steps"] is True
    assert {"chunk_ms_p95", "token_itl_ms_p95", "tpot_ms", "token_count_source"} <= set(wire["requests"][0])
