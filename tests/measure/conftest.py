"""Fixtures for the measurement tests: a simulator on a thread, families, a CLI runner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import runner.sim as sim
from runner.measure import Prompt, synthetic_family, write_family
from runner.sim import SimHandle
from tests.simhelpers import fast_config, quick_thread_switches  # noqa: F401 (autouse fixture)

MODEL = "sim/llama-3.1-8b-spec"
FIXTURES = Path(__file__).parent / "fixtures"


def prompts(n: int = 4, name: str = "opinions") -> tuple[Prompt, ...]:
    return synthetic_family(name, short=n, long=0)


@pytest.fixture
def server() -> Iterator[SimHandle]:
    with sim.start(fast_config(), seed=21) as handle:
        yield handle


@pytest.fixture
def family_file(tmp_path: Path) -> Path:
    path = tmp_path / "opinions.jsonl"
    write_family(path, synthetic_family("opinions", short=4, long=1, long_words=(300, 400)))
    return path
