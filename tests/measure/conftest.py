"""Fixtures for the measurement tests: a simulator on a thread, families, a CLI runner."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import runner.sim as sim
from runner.measure import Prompt, synthetic_family, write_family
from runner.sim import SimConfig, SimHandle

MODEL = "sim/llama-3.1-8b-spec"
FIXTURES = Path(__file__).parent / "fixtures"


def fast_config(**changes: object) -> SimConfig:
    """Defaults at time scale 0.05 (a 20 ms model step is 1 ms), no jitter, instant starts."""
    base = {"time_scale": 0.05, "step_jitter": 0.0, "start_jitter": 0.0, "start_s": 0.0}
    return sim.default_config().with_(**{**base, **changes})


def prompts(n: int = 4, name: str = "opinions") -> tuple[Prompt, ...]:
    return synthetic_family(name, short=n, long=0)


@pytest.fixture(autouse=True)
def _quick_thread_switches() -> Iterator[None]:
    """Server and client threads share this process: hand the GIL over quickly."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(old)


@pytest.fixture
def server() -> Iterator[SimHandle]:
    with sim.start(fast_config(), seed=21) as handle:
        yield handle


@pytest.fixture
def family_file(tmp_path: Path) -> Path:
    path = tmp_path / "opinions.jsonl"
    write_family(path, synthetic_family("opinions", short=4, long=1, long_words=(300, 400)))
    return path
