"""The /metrics parser on the literal exposition of reference/vllm.md 1.4 (fixture) and variations.

The fixture is the excerpt of 1.4 with its two ``(… …)`` lines removed (the reference's
own abbreviations of bucket lines, not exposition).
"""

from __future__ import annotations

import re

import pytest

from ledger.errors import FormatError
from runner.measure import COUNTER_SERIES, counter_deltas, parse_metrics

from .conftest import FIXTURES

TEXT = (FIXTURES / "vllm_1_4_metrics.txt").read_text()


def second_engine(text: str, factor: float) -> str:
    """The sample lines again for engine "1", values times ``factor`` (HELP/TYPE once)."""
    extra = []
    for line in text.splitlines():
        if line.startswith("vllm:") and 'engine="0"' in line:
            name, value = line.rsplit(" ", 1)
            extra.append(f'{name.replace(chr(34) + "0" + chr(34), chr(34) + "1" + chr(34), 1)} {float(value) * factor}')
    return text + "\n".join(extra) + "\n"


def test_reference_excerpt_parses() -> None:
    snap = parse_metrics(TEXT)
    assert snap.values["vllm:spec_decode_num_drafts_total"] == 12000
    assert snap.values["vllm:spec_decode_num_draft_tokens_total"] == 36000
    assert snap.values["vllm:spec_decode_num_accepted_tokens_total"] == 21000
    assert dict(snap.per_pos) == {0: 9600, 1: 6600, 2: 4800}
    assert snap.values["vllm:request_decode_time_seconds_sum"] == pytest.approx(241.7)
    assert snap.values["vllm:generation_tokens_total"] == 33512


def test_created_series_ignored() -> None:
    snap = parse_metrics(TEXT)
    assert "vllm:spec_decode_num_drafts_created" not in snap.values
    assert snap.created["vllm:spec_decode_num_drafts"] == pytest.approx(1.7672256e9)
    # a _created sample for per-pos must not count as a position either (MiaAI-Lab PR #91)
    text = TEXT + ('# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_created gauge\n'
                   'vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="m",position="0"} '
                   '1.7672256e+09\n')
    assert parse_metrics(text).per_pos[0] == 9600


def test_two_engines_summed() -> None:
    before = parse_metrics(second_engine(TEXT, 1.0))
    assert before.values["vllm:spec_decode_num_drafts_total"] == 24000
    assert before.per_pos[2] == 9600
    after = parse_metrics(second_engine(TEXT.replace("12000.0", "12010.0"), 1.0))
    deltas = counter_deltas(before, after)
    assert deltas.rounds == 10 + 10  # both engines moved; the histogram count lines moved too but are not read


def test_missing_num_drafts_reported_missing_not_zero() -> None:
    without = "\n".join(line for line in TEXT.splitlines() if "num_drafts" not in line) + "\n"
    snap = parse_metrics(without)
    deltas = counter_deltas(snap, snap)
    assert deltas.rounds is None
    assert deltas.missing == ("vllm:spec_decode_num_drafts_total",)
    assert deltas.accepted == 0 and deltas.draft_tokens == 0 and deltas.accepted_per_pos == (0, 0, 0)
    assert deltas.to_json()["rounds"] is None


def test_no_spec_series_all_missing() -> None:
    plain = "\n".join(line for line in TEXT.splitlines() if "spec_decode" not in line) + "\n"
    snap = parse_metrics(plain)
    assert not snap.has_spec_series()
    deltas = counter_deltas(snap, snap)
    assert set(deltas.missing) == {COUNTER_SERIES[k] for k in ("rounds", "accepted", "draft_tokens",
                                                                "accepted_per_pos")}
    assert deltas.generation_tokens == 0 and deltas.decode_s == 0.0


def test_deltas_from_two_scrapes() -> None:
    after_text = (TEXT.replace("} 12000.0", "} 12100.0").replace("} 36000.0", "} 36300.0")
                  .replace("} 21000.0", "} 21150.0").replace("} 9600.0", "} 9680.0")
                  .replace("} 241.7", "} 245.2").replace("} 33512.0", "} 33762.0"))
    deltas = counter_deltas(parse_metrics(TEXT), parse_metrics(after_text))
    assert deltas.to_json() == {"rounds": 100, "accepted": 150, "draft_tokens": 300, "accepted_per_pos": [80, 0, 0],
                                "decode_s": pytest.approx(3.5), "generation_tokens": 250, "drafts": 100,
                                "accepted_delivered": None}   # a source's deltas cap it (first tokens known there)
    assert deltas.missing == () and deltas.problems == ()


def test_counter_reset_detected() -> None:
    restarted = re.sub(r"(vllm:spec_decode_num_drafts_total\{[^}]*\}) 12000.0", r"\1 50.0", TEXT)
    deltas = counter_deltas(parse_metrics(TEXT), parse_metrics(restarted))
    assert deltas.rounds is None and "vllm:spec_decode_num_drafts_total" in deltas.missing
    assert deltas.problems and "reset" in deltas.problems[0]
    recreated = TEXT.replace("1.7672256e+09", "1.7672300e+09")  # same count, new _created: a restart
    assert counter_deltas(parse_metrics(TEXT), parse_metrics(recreated)).rounds is None


def test_not_exposition_is_format_error() -> None:
    with pytest.raises(FormatError):
        parse_metrics("<html>gateway timeout</html>\n{")


def test_an_integer_past_any_float_is_format_error_not_a_crash() -> None:
    """A hostile server's 400-digit counter: prometheus_client reads it as an int no float can hold."""
    import httpx

    from runner.measure.wave import scrape_metrics

    huge = "vllm:generation_tokens_total 1" + "0" * 400 + "\n"
    with pytest.raises(FormatError, match="not Prometheus exposition: int too large"):
        parse_metrics(huge)
    with httpx.Client(transport=httpx.MockTransport(
            lambda _r: httpx.Response(200, stream=httpx.ByteStream(huge.encode())))) as http:
        scrape = scrape_metrics(http, "http://127.0.0.1:9/metrics")
    assert scrape.snapshot is None and scrape.problem is not None and "unreadable" in scrape.problem
