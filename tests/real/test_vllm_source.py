"""The ``vllm`` counter source against the real vLLM 0.32 ``/metrics`` (plain and n-gram engines).

Every series tally reads must be on the real server with the type and labels tally
expects (a renamed or dropped series fails here, not in a window), and a wave measured by
tally's own client must give counters that agree with what the client saw: generated
tokens = the usage's completion tokens, at least one decode step per streamed chunk after
the first (exactly one unless the stream fell behind), drafts at most the steps, accepted
at most the draft tokens, per-position counts non-increasing.
"""

from __future__ import annotations

import dataclasses
import itertools

import httpx
from prometheus_client.parser import text_string_to_metric_families

from runner.measure import parse_metrics
from runner.measure.family import Prompt
from runner.measure.sources import counter_source
from runner.measure.sources.vllm import STEPS
from runner.measure.wave import WaveResult, measure_wave
from tests.runner.script import example_plan

from .vllmpair import MODEL_NAME, VllmSite

# family -> (type, label names): what tally's vllm source reads (runner/measure/sources/vllm.py)
READ = {
    "vllm:generation_tokens": ("counter", {"engine", "model_name"}),
    "vllm:request_decode_time_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:inter_token_latency_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:num_requests_running": ("gauge", {"engine", "model_name"}),
    "vllm:num_requests_waiting": ("gauge", {"engine", "model_name"}),
    "vllm:kv_cache_usage_perc": ("gauge", {"engine", "model_name"}),
}
SPEC = {
    "vllm:spec_decode_num_drafts": ("counter", {"engine", "model_name"}),
    "vllm:spec_decode_num_draft_tokens": ("counter", {"engine", "model_name"}),
    "vllm:spec_decode_num_accepted_tokens": ("counter", {"engine", "model_name"}),
    "vllm:spec_decode_num_accepted_tokens_per_pos": ("counter", {"engine", "model_name", "position"}),
}
REPEAT = " ".join(["red green blue"] * 5) + " red"   # n-gram speculation finds drafts in it


def families(text: str) -> dict[str, tuple[str, set[str]]]:
    out = {}
    for family in text_string_to_metric_families(text):
        labels = set().union(*(set(s.labels) - {"le", "quantile"} for s in family.samples)) if family.samples else set()
        out[family.name] = (family.type, labels)
    return out


def test_every_series_tally_reads_is_on_the_real_server(vllm_pair: VllmSite) -> None:
    for arm in ("plain", "ngram"):
        text = httpx.get(vllm_pair.url(arm) + "/metrics", timeout=30).text
        seen = families(text)
        want = {**READ, **SPEC} if arm == "ngram" else READ
        for name, shape in want.items():
            assert seen.get(name) == shape, (arm, name, seen.get(name))
        snapshot = parse_metrics(text)
        check = counter_source("vllm").check(snapshot)
        assert check.spec_off_rounds and snapshot.has(STEPS), (arm, check)
        if arm == "ngram":   # every series present, the four draft positions from the first scrape
            assert check.absent == () and check.speculative_rounds and check.reasons == (), check
            assert sorted(snapshot.per_pos) == [0, 1, 2, 3]
        else:                # a server without speculative decoding exports no spec series at all
            assert not any(name in seen for name in SPEC) and not snapshot.has_spec_series()
            assert not check.speculative_rounds and "vllm:spec_decode_num_accepted_tokens_total" in check.reasons[0]
            assert check.reasons[0].endswith("missing"), check.reasons


def _wave(site: VllmSite, arm: str, speculative: bool, max_tokens: int = 16) -> WaveResult:
    url = site.url(arm)
    prompts = (Prompt("rgb-1", REPEAT), Prompt("rgb-2", REPEAT.replace("red", "cyan")))
    return measure_wave(url, url + "/metrics", prompts, model=MODEL_NAME, max_tokens=max_tokens, seed=7,
                        temperature=0.0, speculative=speculative, wave_deadline_s=300.0)


def test_accepted_past_max_tokens_is_counted_and_capped_on_the_real_pair(vllm_pair: VllmSite) -> None:
    """vLLM counts every draft a step accepted, also those past max_tokens that the request discards
    (17 counted against 13 delivered seen here): ``accepted_delivered`` caps it at what was delivered."""
    discarded = 0
    for max_tokens in (7, 8, 9):   # a 4-deep step past the first token lands beyond these lengths
        wave = _wave(vllm_pair, "ngram", True, max_tokens)
        assert wave.complete, wave.incomplete_reasons
        c = wave.counters
        assert c.generation_tokens == 2 * max_tokens and c.rounds is not None and c.accepted is not None
        # every decode step delivers one token plus its accepted drafts, the first token comes from the prefill
        assert c.accepted_delivered == c.generation_tokens - 2 - c.rounds <= c.accepted, c
        assert wave.summary()["counters"]["accepted_delivered"] == c.accepted_delivered
        discarded += c.accepted - c.accepted_delivered
    assert discarded > 0   # some accepted drafts ran past max_tokens: counted by vLLM, not delivered


def test_the_counter_deltas_agree_with_the_client_on_the_real_pair(vllm_pair: VllmSite) -> None:
    for arm, speculative in (("ngram", True), ("plain", False)):
        wave = _wave(vllm_pair, arm, speculative)
        assert wave.complete, (arm, wave.incomplete_reasons)
        c = wave.counters
        records = wave.requests
        assert all(r.status == "ok" and r.usage for r in records), records
        assert c.generation_tokens == sum((r.usage or {})["completion_tokens"] for r in records) == 32
        # one streamed chunk per engine step, unless the stream fell behind: vLLM then merges the steps it has
        # not sent yet into one chunk (seen here on a busy machine: 16 one-token steps in 15 chunks), and the
        # wave says so in a note
        streamed = sum(len(r.chunk_t) - 1 for r in records)
        assert c.rounds is not None and c.rounds >= streamed, (arm, c, [len(r.chunk_t) for r in records])
        assert (c.rounds > streamed) == any("reached the client merged" in n for n in wave.notes), wave.notes
        assert c.decode_s is not None and c.decode_s > 0
        if speculative:
            assert c.drafts is not None and 0 < c.drafts <= c.rounds
            assert c.accepted is not None and c.draft_tokens is not None and 0 < c.accepted <= c.draft_tokens
            per_pos = c.accepted_per_pos
            assert per_pos is not None and len(per_pos) == 4 and sum(per_pos) == c.accepted
            assert all(a >= b for a, b in itertools.pairwise(per_pos)), per_pos
            assert "inter_token_latency_seconds_count" in c.derived["rounds"]
            # chunks carry up to 1 + k tokens: here some carried more than one
            assert max(n for r in records for n in r.chunk_token_counts) > 1
        else:
            assert (c.accepted, c.draft_tokens, c.drafts) == (0, 0, 0)
            assert c.rounds == c.generation_tokens - 2   # one token per decode step after each first


def test_the_gauges_pressure_limits_read_are_on_the_real_server_and_a_quiet_wave_crosses_none(
        vllm_pair: VllmSite) -> None:
    """A plan's [pressure] limits read vLLM's waiting and KV-cache gauges around each wave: both are read on the
    real pair (the fit check passes), a wave on an otherwise idle engine crosses no limit, and a limit tighter
    than what the engine really holds is crossed, named with the value read."""
    from ledger.store import Blob
    from runner.execution.fit import probe_refusals
    from runner.execution.pressure import crossings
    from runner.execution.starts import wave_payload
    from runner.plan import Pressure

    for arm, speculative in (("plain", False), ("ngram", True)):
        measured = _wave(vllm_pair, arm, speculative, max_tokens=4)
        payload = wave_payload("s1", "short-b1", 1, 1, measured, Blob(measured.records_jsonl(), "application/x-ndjson"))
        gauges = payload.gauges
        assert gauges is not None and gauges.before is not None and gauges.after is not None, arm
        assert gauges.series["waiting"] == "vllm:num_requests_waiting"
        assert gauges.series["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
        assert gauges.before.waiting == 0 and gauges.after.waiting == 0, gauges
        assert crossings(Pressure(max_waiting=0, max_kv_cache_usage=0.99, max_failed_share=0.0), payload) == []
        used = max(gauges.before.kv_cache_usage or 0.0, gauges.after.kv_cache_usage or 0.0)
        if used > 0:   # a limit below what the engine holds is crossed, with the value as read
            assert any(line.startswith("kv_cache_usage ") and "over the limit" in line
                       for line in crossings(Pressure(max_kv_cache_usage=used / 2), payload))

    class Site:   # the fit check's view of the real pair's production engine
        serving_url = vllm_pair.url("plain")
        metrics_urls = (vllm_pair.url("plain") + "/metrics",)
        counter_source = "vllm"

    plan, _, _ = example_plan("seed000-controlled")
    limited = dataclasses.replace(plan, pressure=Pressure(max_waiting=8, max_kv_cache_usage=0.95))
    assert not [r for r in probe_refusals(limited, Site()) if "[pressure]" in r]   # type: ignore[arg-type]
