"""Each counter source reads its server's /metrics into the same counters; spec-off arms; the capability check.

The fixtures are whole scrapes as each server prints them (vLLM V1: 0.32 as the real
server on this machine printed it with n-gram speculation, and as of v0.8 without
``num_drafts``/``per_pos``; the native llama.cpp server; SGLang). The
scrape after a wave is the same text with one wave added to its counters; every source
must then give the same counters for that one wave.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from ledger.errors import FormatError
from runner.measure import parse_metrics
from runner.measure.metrics import CounterDeltas
from runner.measure.sources import COUNTER_SOURCES, counter_source

from .conftest import FIXTURES

TEXTS = {name: (FIXTURES / f"{name}_metrics.txt").read_text()
         for name in ("vllm_1_4", "vllm_0_32", "vllm_v08", "llamacpp", "sglang")}

# One wave of 2 requests, 64 tokens each: every decode step drafted 3 tokens (42 steps), 84 accepted.
WAVE = {"generated": 128, "accepted": 84, "draft_tokens": 126, "drafts": 42, "per_pos": (34, 28, 22),
        "decode_s": 1.234, "requests": 2, "steps": 42}
SERIES = {
    "vllm": {"generated": "vllm:generation_tokens_total", "accepted": "vllm:spec_decode_num_accepted_tokens_total",
             "draft_tokens": "vllm:spec_decode_num_draft_tokens_total", "drafts": "vllm:spec_decode_num_drafts_total",
             "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
             "decode_s": "vllm:request_decode_time_seconds_sum", "steps": "vllm:inter_token_latency_seconds_count"},
    "llamacpp": {"generated": "llamacpp:tokens_predicted_total",
                 "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
                 "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
                 "drafts": "llamacpp:spec_decode_num_drafts_total",
                 "per_pos": "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
                 "decode_s": "llamacpp:tokens_predicted_seconds_total"},
    "sglang": {"generated": "sglang:generation_tokens_total", "decode_s": "sglang:inter_token_latency_seconds_sum"},
}


def _number(value: float, text_style: str) -> str:
    return format(value, ".6g") if text_style == "llamacpp" else repr(float(value))


def bump(text: str, style: str, wave: Mapping[str, object]) -> str:
    """``text`` with one wave added to every counter the server has (its first sample line of each)."""
    series = SERIES["vllm" if style.startswith("vllm") else style]
    lines = text.splitlines()
    for key, name in series.items():
        per_pos = key == "per_pos"
        deltas = wave[key] if per_pos else (wave[key],)
        for position, delta in enumerate(deltas):  # type: ignore[arg-type]
            for i, line in enumerate(lines):
                if line.startswith("#") or not line.startswith(name):
                    continue
                sample, value = line.rsplit(" ", 1)
                if sample.split("{")[0] != name or (per_pos and f'position="{position}"' not in sample):
                    continue
                lines[i] = f"{sample} {_number(float(value) + float(delta), style)}"  # type: ignore[arg-type]
                break
    return "\n".join(lines) + "\n"


def without_spec(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "spec_decode" not in line) + "\n"


def counters(source: str, before: str, after: str, *, speculative: bool | None = True) -> CounterDeltas:
    return counter_source(source).deltas(parse_metrics(before), parse_metrics(after), speculative=speculative,
                                         first_tokens=WAVE["requests"])  # type: ignore[arg-type]


@pytest.mark.parametrize(("source", "fixture"), [("vllm", "vllm_1_4"), ("vllm", "vllm_0_32"), ("vllm", "vllm_v08"),
                                                 ("llamacpp", "llamacpp")])
def test_speculative_arm_same_counters_from_every_source(source: str, fixture: str) -> None:
    text = TEXTS[fixture]
    c = counters(source, text, bump(text, fixture, WAVE))
    assert c.rounds == 42 and c.accepted == 84 and c.draft_tokens == 126 and c.generation_tokens == 128
    assert c.decode_s == pytest.approx(1.234, abs=1e-9)
    assert c.problems == ()
    if fixture == "vllm_v08":
        # no num_drafts, no per_pos: rounds derived from generated - accepted - first tokens; the rest named missing
        assert c.drafts is None and c.accepted_per_pos is None
        assert c.missing == ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total")
        assert "- 2 first tokens" in c.derived["rounds"] and "num_drafts" in c.derived["rounds"]
    else:
        per_pos = c.accepted_per_pos or ()
        assert c.drafts == 42 and per_pos[:3] == (34, 28, 22) and not any(per_pos[3:]) and c.missing == ()


def test_sglang_counts_no_speculative_rounds_and_says_why() -> None:
    text = TEXTS["sglang"]
    c = counters("sglang", text, bump(text, "sglang", WAVE))
    assert c.generation_tokens == 128 and c.decode_s == pytest.approx(1.234)
    assert c.rounds is None and c.accepted is None and c.draft_tokens is None and c.accepted_per_pos is None
    assert "windowed gauges" in c.derived["rounds"] and any("sglang:spec_accept_length" in n for n in c.notes)
    assert not counter_source("sglang").counts_rounds


@pytest.mark.parametrize(("source", "fixture"), [("vllm", "vllm_1_4"), ("vllm", "vllm_v08"),
                                                 ("llamacpp", "llamacpp"), ("sglang", "sglang")])
def test_spec_off_arm_rounds_are_generated_tokens_after_the_first(source: str, fixture: str) -> None:
    """A spec-off server has no spec series (vLLM) or leaves them at 0 (llama.cpp); none is needed."""
    text = without_spec(TEXTS[fixture]) if source == "vllm" else TEXTS[fixture]
    plain = {**WAVE, "accepted": 0, "draft_tokens": 0, "drafts": 0, "per_pos": (0, 0, 0)}
    c = counters(source, text, bump(text, fixture, plain), speculative=False)
    assert (c.rounds, c.accepted, c.draft_tokens, c.drafts, c.accepted_per_pos) == (126, 0, 0, 0, ())
    assert c.generation_tokens == 128 and c.decode_s == pytest.approx(1.234)
    assert c.missing == () and c.problems == ()
    assert "2 first tokens" in c.derived["rounds"] and "no speculative decoding" in c.derived["accepted"]


@pytest.mark.parametrize(("source", "fixture"), [("vllm", "vllm_1_4"), ("llamacpp", "llamacpp")])
def test_spec_off_arm_whose_server_drafts_is_a_problem(source: str, fixture: str) -> None:
    text = TEXTS[fixture]
    c = counters(source, text, bump(text, fixture, WAVE), speculative=False)
    assert any("yet" in p and "126 draft tokens" in p for p in c.problems)


def test_llamacpp_six_significant_digits_are_a_recorded_resolution() -> None:
    big = TEXTS["llamacpp"].replace("llamacpp:tokens_predicted_total 33512", "llamacpp:tokens_predicted_total 4.21337e+06")
    big = big.replace("llamacpp:tokens_predicted_seconds_total 241.7", "llamacpp:tokens_predicted_seconds_total 31845.2")
    c = counters("llamacpp", big, bump(big, "llamacpp", WAVE))
    # 4.21337e+06 + 128 prints as 4.2135e+06: the delta is known to +-10 tokens, the seconds to +-0.1 s
    assert c.resolution == {"generation_tokens": pytest.approx(10.0), "decode_s": pytest.approx(0.1)}
    assert c.generation_tokens == 130 and c.decode_s == pytest.approx(1.2, abs=1e-6)
    assert any("6 significant digits" in n for n in c.notes)


def test_llamacpp_fresh_server_without_per_position_series() -> None:
    """The per-position counter appears only once something was drafted: a fresh server's first scrape lacks it."""
    zeros = re.sub(r"^(llamacpp:[^ ]+) [^ ]+$", r"\1 0", TEXTS["llamacpp"], flags=re.M)
    fresh = "\n".join(line for line in zeros.splitlines() if "per_pos" not in line) + "\n"
    c = counters("llamacpp", fresh, bump(zeros, "llamacpp", WAVE))
    assert c.accepted_per_pos == (34, 28, 22) and c.rounds == 42 and c.missing == ()
    idle = counters("llamacpp", fresh, fresh, speculative=None)
    assert idle.accepted_per_pos == () and idle.missing == ()   # nothing drafted yet: zero, not missing


@pytest.mark.parametrize(("source", "fixture", "gauges"), [
    ("vllm", "vllm_v08", {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0}),
    ("llamacpp", "llamacpp", {"running": 0.0, "waiting": 0.0, "kv_cache_usage": None}),
    ("sglang", "sglang", {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0}),
])
def test_gauges_read_per_source(source: str, fixture: str, gauges: dict[str, float | None]) -> None:
    reading = counter_source(source).gauges(parse_metrics(TEXTS[fixture]))
    assert reading.to_json() == gauges
    busy = TEXTS[fixture].replace("vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.0",
                                  "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.25")
    busy = busy.replace("llamacpp:requests_processing 0", "llamacpp:requests_processing 1")
    busy += "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.5\n" if source == "llamacpp" else ""
    got = counter_source(source).gauges(parse_metrics(busy)).to_json()
    if source == "vllm":
        assert got["kv_cache_usage"] == 0.25   # the older gpu_cache_usage_perc name
    if source == "llamacpp":
        assert got["running"] == 1.0 and got["kv_cache_usage"] == 0.5   # the gauge of older builds, where present


def test_kv_usage_is_the_largest_engine_not_the_sum() -> None:
    two = "\n".join([
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5',
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
        'vllm:num_requests_running{engine="1",model_name="m"} 3.0', ""])
    got = counter_source("vllm").gauges(parse_metrics(two)).to_json()
    assert got == {"running": 5.0, "waiting": None, "kv_cache_usage": 0.75}


def test_check_says_what_one_scrape_allows() -> None:
    new = counter_source("vllm").check(parse_metrics(TEXTS["vllm_1_4"]))
    assert new.speculative_rounds and new.spec_off_rounds and new.reasons == ()
    plain = counter_source("vllm").check(parse_metrics(without_spec(TEXTS["vllm_1_4"])))
    assert not plain.speculative_rounds and plain.spec_off_rounds
    assert "vllm:spec_decode_num_accepted_tokens_total" in plain.absent and plain.reasons
    assert counter_source("llamacpp").check(parse_metrics(TEXTS["llamacpp"])).speculative_rounds
    sglang = counter_source("sglang").check(parse_metrics(TEXTS["sglang"]))
    assert not sglang.speculative_rounds and sglang.spec_off_rounds and "windowed gauges" in sglang.reasons[0]
    none = counter_source("none").check(parse_metrics(""))
    assert not none.speculative_rounds and not none.spec_off_rounds
    assert sorted(s.source for s in (new, sglang, none)) == ["none", "sglang", "vllm"]


def test_capabilities_by_name() -> None:
    assert [(n, counter_source(n).counts_rounds, counter_source(n).chunks_are_steps) for n in COUNTER_SOURCES] == [
        ("vllm", True, True), ("llamacpp", True, False), ("sglang", False, False), ("none", False, False)]
    with pytest.raises(FormatError, match="unknown counter source 'tgi'"):
        counter_source("tgi")


def test_vllm_rounds_are_decode_steps_where_some_steps_drafted_nothing() -> None:
    """Real vLLM 0.32, n-gram speculation: a step without an n-gram match proposes no draft, so
    num_drafts undercounts the decode steps; one inter-token latency is observed per step."""
    text = TEXTS["vllm_0_32"]
    # the 24-token request measured on the real server: 10 decode steps, 6 of them drafted, 17 accepted
    wave = {"generated": 24, "accepted": 17, "draft_tokens": 24, "drafts": 6, "per_pos": (6, 5, 3, 3),
            "decode_s": 0.66, "requests": 1, "steps": 10}
    c = counter_source("vllm").deltas(parse_metrics(text), parse_metrics(bump(text, "vllm_0_32", wave)),
                                      speculative=True, first_tokens=1)
    assert (c.rounds, c.drafts, c.accepted) == (10, 6, 17)
    assert "inter_token_latency_seconds_count" in c.derived["rounds"]
    older = text.replace("vllm:inter_token_latency_seconds_count", "vllm:no_such_series")   # a vLLM without it
    c = counter_source("vllm").deltas(parse_metrics(older), parse_metrics(bump(older, "vllm_0_32", wave)),
                                      speculative=True, first_tokens=1)
    assert c.rounds == c.drafts == 6 and "older vLLM" in c.derived["rounds"]
