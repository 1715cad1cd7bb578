"""llama.cpp counts a request when it releases its slot: the after-scrape waits for requests_processing 0."""

from __future__ import annotations

import time
from typing import ClassVar

from runner.measure import measure_wave

from .conftest import MODEL, prompts
from .hostile import Handler, serve


class Releasing(Handler):
    """A llama.cpp /metrics whose slots are released ``busy`` scrapes after the before-scrape.

    Until then ``requests_processing`` is 1 and the counters lack the held request's tokens.
    """

    scrapes: ClassVar[list[int]] = []
    busy: ClassVar[int] = 2

    def get_metrics(self) -> None:
        n = len(self.scrapes)
        self.scrapes.append(n)
        processing = 1 if 0 < n <= self.busy else 0
        predicted = 1000 if n == 0 else 1300 if processing else 1500
        text = ("# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {predicted}\n"
                f"llamacpp:tokens_predicted_seconds_total {10 + (predicted - 1000) / 100:g}\n"
                "llamacpp:spec_decode_num_draft_tokens_total 0\n"
                "llamacpp:spec_decode_num_accepted_tokens_total 0\n"
                f"llamacpp:requests_processing {processing}\n"
                "llamacpp:requests_deferred 0\n")
        self.send_body(200, text.encode(), "text/plain")


def test_the_after_scrape_waits_until_llamacpp_released_every_slot(server) -> None:  # type: ignore[no-untyped-def]
    Releasing.scrapes, Releasing.busy = [], 2
    with serve(Releasing) as metrics:
        wave = measure_wave(server.url, f"{metrics.url}/metrics", prompts(2), model=MODEL, max_tokens=8, seed=5,
                            counter_source="llamacpp", speculative=False)
    assert len(Releasing.scrapes) == 4  # before, two while a slot was held, the one after its release
    assert wave.counters.generation_tokens == 500  # the released request's tokens are in the delta
    assert wave.summary()["gauges"]["after"]["running"] == 0
    assert not any("requests_processing" in r for r in wave.incomplete_reasons)


def test_a_slot_never_released_is_waited_for_a_bounded_time_and_recorded(server) -> None:  # type: ignore[no-untyped-def]
    Releasing.scrapes, Releasing.busy = [], 10**9
    with serve(Releasing) as metrics:
        t0 = time.perf_counter()
        wave = measure_wave(server.url, f"{metrics.url}/metrics", prompts(2), model=MODEL, max_tokens=8, seed=5,
                            counter_source="llamacpp", speculative=False, settle_s=0.3)
        spent = time.perf_counter() - t0
    assert spent < 5.0 and len(Releasing.scrapes) >= 3
    assert not wave.complete
    assert any(r.startswith("llamacpp:requests_processing still 1 0.3 s after the wave")
               for r in wave.incomplete_reasons), wave.incomplete_reasons
    assert wave.summary()["gauges"]["after"]["running"] == 1


def test_a_vllm_wave_scrapes_once_after(server) -> None:  # type: ignore[no-untyped-def]
    # vLLM counts tokens as they are generated: its source does not settle, even with requests running
    Releasing.scrapes, Releasing.busy = [], 10**9
    with serve(Releasing) as metrics:
        measure_wave(server.url, f"{metrics.url}/metrics", prompts(2), model=MODEL, max_tokens=8, seed=5,
                     counter_source="vllm")
    assert len(Releasing.scrapes) == 2
