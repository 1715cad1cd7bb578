"""/metrics: vLLM's series and exposition, consistent with what was served."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

import runner.sim as sim
from runner.sim import SimHandle

from .conftest import MODEL, fast_config


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, lab), v in values.items() if n == name and all((k, v2) in lab for k, v2 in labels.items()))


def run_requests(http: httpx.Client, url: str, n: int, max_tokens: int = 50) -> int:
    delivered = 0
    for i in range(n):
        body = http.post(f"{url}/v1/completions", json={"prompt": f"prompt {i} words here", "max_tokens": max_tokens,
                                                         "ignore_eos": True, "seed": i}).json()
        delivered += body["usage"]["completion_tokens"]
    return delivered


def test_exposition_format(server: SimHandle, http: httpx.Client) -> None:
    response = http.get(f"{server.url}/metrics")
    assert response.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"   # as vLLM 0.32
    text = response.text
    assert "# TYPE vllm:spec_decode_num_drafts_total counter" in text
    assert "# TYPE vllm:spec_decode_num_drafts_created gauge" in text
    assert f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{MODEL}",position="4"}}' in text
    assert "# TYPE vllm:request_decode_time_seconds histogram" in text
    assert f'vllm:request_decode_time_seconds_bucket{{engine="0",le="+Inf",model_name="{MODEL}"}}' in text
    assert "vllm:time_to_first_token_seconds_count" in text


def test_counters_consistent_with_what_was_served(server: SimHandle, http: httpx.Client) -> None:
    delivered = run_requests(http, server.url, 5)
    values = samples(http.get(f"{server.url}/metrics").text)
    truth = server.truth()["totals"]
    assert total(values, "vllm:generation_tokens_total") == delivered == truth["generation_tokens"]
    drafts = total(values, "vllm:spec_decode_num_drafts_total")
    accepted = total(values, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts == truth["drafts"] and accepted == truth["accepted"]
    assert total(values, "vllm:spec_decode_num_draft_tokens_total") == truth["draft_tokens"]
    # every engine step emits one token plus its accepted drafts (one ITL or TTFT sample per step)
    steps = total(values, "vllm:inter_token_latency_seconds_count") + total(values,
                                                                            "vllm:time_to_first_token_seconds_count")
    # ... but drafts accepted past max_tokens are counted and discarded, as vLLM counts them
    assert delivered == steps + truth["accepted_delivered"] and truth["accepted_delivered"] <= accepted
    assert drafts == steps - 5  # every decode step drafts (full depth, to the end); the prefills do not
    per_pos = [total(values, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) for p in range(5)]
    assert per_pos == sorted(per_pos, reverse=True) and sum(per_pos) == accepted
    assert total(values, "vllm:request_success_total", finished_reason="length") == 5
    assert total(values, "vllm:request_decode_time_seconds_count") == 5
    assert abs(total(values, "vllm:request_decode_time_seconds_sum") - truth["decode_s"]) < 1e-9


def test_two_engines_label_and_split(http: httpx.Client) -> None:
    with sim.start(fast_config(engines=2)) as two:
        run_requests(http, two.url, 4, max_tokens=20)
        values = samples(http.get(f"{two.url}/metrics").text)
        per_engine = [total(values, "vllm:generation_tokens_total", engine=str(e)) for e in (0, 1)]
        assert per_engine == [40.0, 40.0]


def test_spec_series_absent_without_spec_decode(http: httpx.Client) -> None:
    with sim.start(fast_config(production_arm="off")) as off:
        run_requests(http, off.url, 1)
        text = http.get(f"{off.url}/metrics").text
        assert "spec_decode" not in text and "vllm:generation_tokens_total" in text


def test_old_vllm_without_drafts_and_per_pos(http: httpx.Client) -> None:
    with sim.start(fast_config(spec_metrics=["draft_tokens", "accepted"])) as old:
        text = http.get(f"{old.url}/metrics").text
        assert "num_drafts" not in text and "per_pos" not in text
        assert "vllm:spec_decode_num_accepted_tokens_total" in text


def test_restart_resets_counters(server: SimHandle, http: httpx.Client) -> None:
    run_requests(http, server.url, 2)
    created_before = total(samples(http.get(f"{server.url}/metrics").text), "vllm:generation_tokens_created")
    assert server.control("drain")["ok"] and server.control("snapshot")["ok"]
    assert server.control("start_arm", arm="A", role="A")["ok"]
    values = samples(http.get(f"{server.url}/metrics").text)
    assert total(values, "vllm:generation_tokens_total") == 0
    assert total(values, "vllm:generation_tokens_created") >= created_before
