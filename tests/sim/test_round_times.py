"""Round times under load: a stream whose thread wakes late is never written in a burst (``docs/sim.md``).

The simulator sleeps to absolute planned send times. A thread woken late (a busy machine, a
CPU-bound neighbour holding the GIL) used to find every later step already due and wrote them
back to back; the client read them in one socket read, one arrival time, and a request's p95
round time came out exactly 0. Here the lateness is injected (one sleep that oversleeps, as a
descheduled thread does), at the default time scale 0.02.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import runner.sim as sim
from runner.measure import measure_wave, synthetic_family
from runner.sim.server import CATCH_UP

from .conftest import fast_config

OVERSLEEP_S = 0.03   # one wake-up this late: tens of steps at time scale 0.02


@pytest.fixture
def late_server() -> Iterator[sim.SimHandle]:
    """A simulator (time scale 0.02) whose stream threads oversleep once, at their third chunk."""
    config = fast_config(time_scale=0.02, cold_ttft_extra_ms=0.0)
    with sim.start(config, seed=3) as handle:
        server: Any = handle.server
        plain = server.sleep_until
        calls = threading.local()

        def oversleeping(when: float, engine: Any = None) -> bool:
            calls.n = getattr(calls, "n", 0) + 1
            if calls.n % 40 == 3:   # the third chunk of each (40-chunk) stream
                time.sleep(OVERSLEEP_S)
            return bool(plain(when, engine))

        server.sleep_until = oversleeping
        yield handle


def _burn(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(2000))


def test_a_late_stream_catches_up_without_a_burst_and_its_round_times_are_never_zero(
        late_server: sim.SimHandle) -> None:
    stop = threading.Event()
    burner = threading.Thread(target=_burn, args=(stop,), daemon=True)   # and a CPU-bound neighbour
    burner.start()
    try:
        wave = measure_wave(late_server.url, late_server.metrics_url, synthetic_family("opinions", short=4, long=0),
                            model=late_server.server.config.model, max_tokens=39, seed=5, concurrency=1,
                            family="opinions")
    finally:
        stop.set()
        burner.join(5)
    records = [r for r in wave.requests if r.status == "ok"]
    assert len(records) == 4
    for record in records:
        assert record.round_ms_p95 is not None and record.round_ms_p95 > 0, record.intervals_ms
    truth = late_server.truth()["requests"]
    for request in truth:
        sent = request["sent"]
        gaps = [b - a for a, b in itertools.pairwise(sent)]
        step_s = min(b - a for a, b in itertools.pairwise(request["planned"]))
        # no two chunks written back to back: each at least CATCH_UP of a step after the one before
        assert min(gaps) >= CATCH_UP * step_s * 0.9, (min(gaps), step_s)
