"""Fixtures for the simulator tests: a simulator serving from a thread, stopped after the test."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import runner.sim as sim
from runner.sim import SimHandle
from tests.simhelpers import fast_config, quick_thread_switches  # noqa: F401 (autouse fixture)

MODEL = "sim/llama-3.1-8b-spec"


@pytest.fixture
def server() -> Iterator[SimHandle]:
    with sim.start(fast_config(), seed=11) as handle:
        yield handle


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client
