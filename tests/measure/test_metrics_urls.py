"""Several metrics URLs (engines, hosts): counters summed, each URL's own delta kept, one URL down named."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import ClassVar

from ledger.store import Blob
from runner.events.catalogue import validate_payload
from runner.events.schema import to_wire
from runner.execution.starts import wave_payload
from runner.measure import measure_wave

from .conftest import MODEL, prompts
from .hostile import Handler, serve


class SecondEngine(Handler):
    """Another engine's /metrics: each scrape its counters have moved by one step."""

    scrapes: ClassVar[list[int]] = []

    def get_metrics(self) -> None:
        n = len(self.scrapes)
        self.scrapes.append(n)
        text = (f"vllm:generation_tokens_total {1000 + 40 * n}\n"
                f"vllm:request_decode_time_seconds_sum {10.0 + 0.5 * n}\n"
                f"vllm:spec_decode_num_drafts_total {200 + 10 * n}\n"
                f"vllm:inter_token_latency_seconds_count {210 + 10 * n}\n"
                f"vllm:spec_decode_num_accepted_tokens_total {300 + 25 * n}\n"
                f"vllm:spec_decode_num_draft_tokens_total {500 + 50 * n}\n")
        self.send_body(200, text.encode(), "text/plain")


def test_counters_summed_over_two_metrics_urls(server) -> None:  # type: ignore[no-untyped-def]
    SecondEngine.scrapes = []
    after = server.truth()["next"]
    with serve(SecondEngine) as other:
        wave = measure_wave(server.url, [server.metrics_url, f"{other.url}/metrics"], prompts(3), model=MODEL,
                            max_tokens=24, seed=5, family="opinions")
    truth = server.truth(after)["totals"]
    counters = wave.summary()["counters"]
    assert wave.complete, wave.incomplete_reasons
    assert counters["generation_tokens"] == truth["generation_tokens"] + 40
    assert counters["rounds"] == truth["rounds"] + 10
    # the summed counters count 10 more decode steps than this client's chunks: said in a note
    assert any("10 steps reached the client merged" in note for note in wave.notes), wave.notes
    assert counters["accepted"] == truth["accepted"] + 25
    assert counters["draft_tokens"] == truth["draft_tokens"] + 50
    assert counters["decode_s"] == truth["decode_s"] + 0.5
    own = {u.url: u.series for u in wave.per_url}
    assert own[server.metrics_url]["vllm:generation_tokens_total"] == truth["generation_tokens"]
    assert own[f"{other.url}/metrics"]["vllm:generation_tokens_total"] == 40
    assert own[f"{other.url}/metrics"]["vllm:spec_decode_num_drafts_total"] == 10
    # the wave.measured event carries each URL's share beside the sum
    records = Blob(wave.records_jsonl(), "application/x-ndjson")
    event = to_wire(wave_payload("s1", "c1", 1, 1, wave, records))
    event.update(window="w", plan_sha256="0" * 64)
    validate_payload("wave.measured", event)
    assert [u["url"] for u in event["counters_by_url"]] == [server.metrics_url, f"{other.url}/metrics"]


def test_one_metrics_url_down_makes_the_wave_incomplete_and_names_it(server) -> None:  # type: ignore[no-untyped-def]
    with serve(SecondEngine) as gone:
        down = f"{gone.url}/metrics"
    wave = measure_wave(server.url, [server.metrics_url, down], prompts(2), model=MODEL, max_tokens=8, seed=5,
                        metrics_timeout_s=2.0)
    assert not wave.complete
    assert wave.summary()["counters"]["generation_tokens"] is None   # a sum without one URL is no sum
    assert any(down in reason and "unreachable" in reason for reason in wave.incomplete_reasons)
    assert not any(server.metrics_url in reason for reason in wave.incomplete_reasons)


class SlowEngine(Handler):
    """An engine whose /metrics takes 0.2 s; counts the scrapes in flight at once (over every instance)."""

    in_flight: ClassVar[list[int]] = [0]
    most: ClassVar[list[int]] = [0]
    moved: ClassVar[dict[int, int]] = {}

    def get_metrics(self) -> None:
        port = self.server.server_address[1]
        with _LOCK:
            self.in_flight[0] += 1
            self.most[0] = max(self.most[0], self.in_flight[0])
            n = self.moved[port] = self.moved.get(port, -1) + 1
        time.sleep(0.2)
        with _LOCK:
            self.in_flight[0] -= 1
        text = (f"vllm:generation_tokens_total {1000 + port % 7 * n}\n"
                f"vllm:request_decode_time_seconds_sum {10.0 + n}\n")
        self.send_body(200, text.encode(), "text/plain")


_LOCK = threading.Lock()


def test_metrics_urls_are_scraped_at_once_and_each_keeps_its_own_delta(server) -> None:  # type: ignore[no-untyped-def]
    SlowEngine.in_flight, SlowEngine.most, SlowEngine.moved = [0], [0], {}
    with contextlib.ExitStack() as stack:
        engines = [stack.enter_context(serve(SlowEngine)) for _ in range(4)]
        urls = [f"{e.url}/metrics" for e in engines]
        wave = measure_wave(server.url, urls, prompts(1), model=MODEL, max_tokens=4, seed=5, family="opinions")
    assert SlowEngine.most[0] >= 2, "the metrics URLs were scraped one after another"
    assert [u.url for u in wave.per_url] == urls  # in URL order
    for u in wave.per_url:
        port = int(u.url.rsplit(":", 1)[1].split("/")[0])
        assert u.series["vllm:generation_tokens_total"] == port % 7  # its own before -> after
    assert wave.counters.generation_tokens == sum(int(u.url.rsplit(":", 1)[1].split("/")[0]) % 7
                                                  for u in wave.per_url)


def test_the_scrapes_of_a_wave_are_merged_once_each(server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from runner.measure import wave as wave_module

    merges: list[int] = []
    merge = wave_module.merge_snapshots

    def counted(snapshots):  # type: ignore[no-untyped-def]
        merges.append(len(snapshots))
        return merge(snapshots)

    monkeypatch.setattr(wave_module, "merge_snapshots", counted)
    SecondEngine.scrapes = []
    with serve(SecondEngine) as other:
        wave = measure_wave(server.url, [server.metrics_url, f"{other.url}/metrics"], prompts(1), model=MODEL,
                            max_tokens=4, seed=5, family="opinions")
    assert merges == [2, 2]  # before and after, the gauges read from the same sums
    assert wave.gauges_after is not None and wave.complete
