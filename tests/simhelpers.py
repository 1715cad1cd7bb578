"""What the simulator and measurement tests share: a fast simulator config, quick GIL hand-over."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

import runner.sim as sim
from runner.sim import SimConfig


def fast_config(**changes: object) -> SimConfig:
    """Defaults at time scale 0.05 (a 20 ms model step is 1 ms), no jitter, instant starts."""
    base = {"time_scale": 0.05, "step_jitter": 0.0, "start_jitter": 0.0, "start_s": 0.0}
    return sim.default_config().with_(**{**base, **changes})


@pytest.fixture(autouse=True)
def quick_thread_switches() -> Iterator[None]:
    """Server and client threads share this process: hand the GIL over quickly."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(old)
