"""The event catalogue: every type documented with a valid example; bad payloads refused before append."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FormatError, PayloadError
from ledger.store import Blob
from runner.events import payloads
from runner.events.catalogue import CATALOGUE, WindowLog, append_window_event, validate_payload, window_event
from runner.plan.parse import read_plan_file
from runner.plan.register import register_plan, window_log

from .conftest import Site
from .script import EXAMPLES, example_plan, wave_payload

DOCS = Path(__file__).resolve().parents[2] / "docs" / "events.md"
SHA = "ab" * 32


def _doc_examples() -> dict[str, dict[str, Any]]:
    text = DOCS.read_text()
    found = {}
    for match in re.finditer(r"### `([a-z_.]+)`\n(?:.*?\n)*?```json\n(.*?)```", text, re.S):
        found[match.group(1)] = json.loads(match.group(2))
    return found


def test_every_type_has_a_valid_documented_example() -> None:
    examples = _doc_examples()
    assert set(examples) == set(CATALOGUE), set(CATALOGUE) ^ set(examples)
    for type_, payload in examples.items():
        validate_payload(type_, payload)


def test_wave_measured_has_exactly_the_contract_keys() -> None:
    """docs/events.md fixes these names; a rename breaks the runner and the rules."""
    names = [f.name for f in dataclasses.fields(payloads.WaveMeasured)]
    assert names == ["window", "plan_sha256", "start", "cell", "repeat", "wave", "family", "seed", "max_tokens",
                     "concurrency", "started_at", "ended_at", "counters", "counters_missing", "complete",
                     "incomplete_reasons", "client", "requests", "records", "engine",
                     # added with counter sources and token-true timing (optional, after the first ones)
                     "counter_source", "gauges", "host_load",
                     # added with several metrics URLs (optional)
                     "counters_by_url"]
    assert [f.name for f in dataclasses.fields(payloads.Counters)] == [
        "rounds", "accepted", "draft_tokens", "accepted_per_pos", "decode_s", "generation_tokens", "drafts",
        "accepted_delivered"]  # added with the accepted cap (optional: accepted at most what was delivered)
    assert [f.name for f in dataclasses.fields(payloads.ClientFigures)] == [
        "requests", "ok", "failed", "timed_out", "cancelled", "censored", "delivered_tokens", "tokens_after_first",
        "decode_s", "decode_tps", "ttft_s", "chunk_interval_ms", "tokens_per_chunk",
        "token_itl_ms", "tpot_ms", "token_count_sources",
        "bounded",  # added with bounded decode runs (optional, written when > 0)
        "reasoning_tokens", "answer_tokens"]  # added with reasoning apart (optional, written when streamed)
    assert [f.name for f in dataclasses.fields(payloads.RequestSummary)] == [
        "index", "prompt_id", "status", "delivered_tokens", "decode_s", "ttft_s", "round_ms_p95", "finish_reason",
        "reason", "chunk_ms_p95", "token_itl_ms_p95", "tpot_ms", "token_count_source",
        "reasoning_tokens", "answer_tokens", "first_answer_s"]  # added with reasoning apart (optional, as above)
    assert [f.name for f in dataclasses.fields(payloads.CounterSourceInfo)] == [
        "name", "speculative", "counts_rounds", "chunks_are_steps", "derived", "resolution", "first_tokens", "absent"]
    assert [f.name for f in dataclasses.fields(payloads.WaveGauges)] == ["before", "after", "series"]
    assert [f.name for f in dataclasses.fields(payloads.ServerGauges)] == ["running", "waiting", "kv_cache_usage"]
    assert [f.name for f in dataclasses.fields(payloads.HostLoad)] == ["before", "after", "cpus"]


def _wave() -> tuple[dict[str, Any], Blob]:
    plan, _, _ = example_plan("seed000-production-policy")
    payload, blob = wave_payload(plan, 0, "2026-11-02T06:00:00.000000Z", "2026-11-02T06:00:20.000000Z")
    return dict(payload, window=plan.window_id, plan_sha256=plan.sha256), blob


def _refused(type_: str, payload: dict[str, Any], where: str) -> None:
    with pytest.raises(FormatError) as info:
        validate_payload(type_, payload)
    assert where in str(info.value), str(info.value)


def test_unknown_type_is_refused() -> None:
    _refused("window.teleported", {"window": "w", "plan_sha256": SHA}, "is not a window event type")


def test_payload_rules_name_the_member() -> None:
    wave, _ = _wave()
    _refused("wave.measured", {k: v for k, v in wave.items() if k != "seed"}, "payload.seed: required")
    _refused("wave.measured", dict(wave, colour="blue"), "payload.colour: unknown member")
    _refused("wave.measured", dict(wave, seed="43"), "payload.seed: expected an integer")
    _refused("wave.measured", dict(wave, started_at="yesterday"), "payload.started_at:")
    _refused("wave.measured", dict(wave, counters=dict(wave["counters"], rounds=1.5)),
             "payload.counters.rounds: expected an integer")
    _refused("wave.measured", dict(wave, requests=[dict(wave["requests"][0], status="lost"), *wave["requests"][1:]]),
             "payload.requests[0].status: expected one of ok, failed, timeout, cancelled, censored")
    _refused("wave.measured", dict(wave, requests=wave["requests"][1:]), "payload.client.requests:")
    _refused("wave.measured", dict(wave, plan_sha256="abc"), "payload.plan_sha256:")
    _refused("gate.result", {"window": "w", "plan_sha256": SHA, "gate": "vibes", "verdict": "PASS", "evidence": {}},
             "payload.gate: expected one of")
    _refused("host.action", {"window": "w", "plan_sha256": SHA, "host": "h", "action": "drain", "phase": "finished",
                             "action_id": "1", "duration_s": 1.0}, "payload.ok: required when phase is finished")
    _refused("host.action", {"window": "w", "plan_sha256": SHA, "host": "h", "action": "drain", "phase": "started",
                             "action_id": "1", "exit_code": 0}, "payload.exit_code: belongs to the finished half")
    _refused("window.closed", {"window": "w", "plan_sha256": SHA, "ending": "vanished"}, "payload.ending:")


def test_missing_counter_is_null_not_zero_and_integral_floats_pass() -> None:
    wave, _ = _wave()
    counters = dict(wave["counters"], rounds=None, accepted_per_pos=None, decode_s=20)  # JCS: 20.0 -> 20
    validate_payload("wave.measured", dict(wave, counters=counters, counters_missing=["rounds"], complete=False,
                                           incomplete_reasons=["vllm:spec_decode_num_drafts_total missing"]))


def _registered(site: Site) -> WindowLog:
    loaded = read_plan_file(EXAMPLES / "seed000-production-policy.toml")
    register_plan(site.book, site.signer, loaded)
    return window_log(site.book, site.signer, loaded.plan.window_id)


def test_append_adds_window_keys_and_stream(site: Site) -> None:
    log = _registered(site)
    event = log.append("host.action", {"host": "spark-a", "action": "preflight", "phase": "started",
                                       "action_id": "x1"})
    assert event.stream == f"window/{log.window}" and event.type == "host.action"
    assert event.payload["window"] == log.window and event.payload["plan_sha256"] == log.plan_sha256
    archived = log.append("archive.control_start", {"start": "s1", "role": "P", "cell": "short-b1",
                                                    "max_tokens": 512, "commit": "3f" * 20, "clock_cap_mhz": 2300,
                                                    "figures": {"pooled_rate_tps": 170.0}})
    assert archived.stream == "archive" and archived.payload["window"] == log.window


def test_refused_payload_appends_nothing(site: Site) -> None:
    log = _registered(site)
    size = site.size()
    with pytest.raises(FormatError):
        log.append("window.teleported", {})
    with pytest.raises(PayloadError):
        log.append("start.began", {"start": "s1", "role": "P"})
    with pytest.raises(PayloadError, match="differs from the event's window"):
        log.append("hold.opened", {"window": "someone-else", "owner": "someone-else"})
    assert site.size() == size


def test_blob_references_must_be_attached_or_stored(site: Site) -> None:
    log = _registered(site)
    wave, blob = _wave()
    wave = dict(wave, window=log.window, plan_sha256=log.plan_sha256)
    size = site.size()
    with pytest.raises(PayloadError, match="neither attached nor stored"):
        log.append("wave.measured", wave)
    with pytest.raises(PayloadError, match="attached blob has"):
        log.append("wave.measured", dict(wave, records=dict(wave["records"], size=1)), [blob])
    assert site.size() == size
    first = log.append("wave.measured", wave, [blob])
    stored = site.book.blob(first.payload["records"]["blob"])
    assert stored is not None and stored.data == blob.data
    # once stored, a later event may refer to the same blob without attaching it
    append_window_event(site.book, site.signer, log.window, log.plan_sha256, "wave.measured", wave)


def test_window_event_builds_batches(site: Site) -> None:
    log = _registered(site)
    items = [window_event(log.window, log.plan_sha256, "placeholder.up", {"host": h}) for h in ("a", "b")]
    events = site.book.append_many(items, site.signer)
    assert [e.payload["host"] for e in events] == ["a", "b"]


def test_parse_payload_gives_typed_values() -> None:
    from runner.events.catalogue import parse_payload

    wave, _ = _wave()
    typed = parse_payload("wave.measured", wave)
    assert isinstance(typed, payloads.WaveMeasured)
    assert isinstance(typed.client, payloads.ClientFigures) and isinstance(typed.requests[0], payloads.RequestSummary)
    assert typed.counters.rounds == wave["counters"]["rounds"] and typed.records.blob == wave["records"]["blob"]
