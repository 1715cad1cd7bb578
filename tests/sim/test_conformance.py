"""The simulator held to real vLLM 0.32: the conformance probes (tests/sim/conformance.py) against the
simulator, set up as the real pair is, compared with what the real server answered (recorded in
tests/sim/fixtures/vllm-0.32-observations.json; tests/real/test_vllm_conformance.py checks the recording
against the live server wherever vLLM is installed). Every difference is a deviation documented in
docs/sim.md; a deviation that disappears, or a new difference, fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import runner.sim as sim
from tests.simhelpers import quick_thread_switches  # noqa: F401 (autouse fixture)

from . import conformance


@pytest.fixture(scope="module")
def observed() -> Iterator[conformance.Features]:
    plain, spec = conformance.sim_configs()
    with sim.start(plain, seed=3) as a, sim.start(spec, seed=3) as b:
        yield conformance.observe({"plain": a.url, "spec": b.url})


def test_the_simulator_differs_from_vllm_only_where_docs_sim_md_says(observed: conformance.Features) -> None:
    deviations = conformance.documented_deviations()
    diffs = conformance.differences(observed, conformance.recorded())
    uncovered, unused = conformance.unexplained(diffs, deviations)
    assert not uncovered, f"the simulator differs from vLLM 0.32 on {sorted(uncovered)}: fix it or document it"
    assert not unused, f"documented deviations that no longer hold: {sorted(unused)} (remove them from docs/sim.md)"


def test_the_probes_cover_what_the_issue_names(observed: conformance.Features) -> None:
    """/metrics families with types and labels, spec series by config, errors, finish reasons, usage,
    token ids and chunking are all observed (on both servers where it matters)."""
    keys = set(observed)
    assert {"metrics.plain.vllm:generation_tokens_total", "metrics.spec.vllm:spec_decode_num_drafts_total",
            "metrics.spec.vllm:inter_token_latency_seconds"} <= keys
    assert "metrics.plain.vllm:spec_decode_num_drafts_total" not in keys   # no spec series without speculation
    assert observed["metrics.spec.positions"] == ["0", "1", "2", "3"]
    assert {"errors.logit_bias_spec.message", "finish.stop_string", "fields.completion.usage_keys",
            "fields.completion.token_ids", "streams.spec.completion.tokens_per_chunk"} <= keys


def test_a_new_difference_or_a_vanished_deviation_is_caught() -> None:
    """The check itself: a difference nobody documented, and a documented one that is gone, both show."""
    real = {"a.x": 1, "metrics.plain.http_requests_total": "counter [handler]", "b.y": 2}
    sim_side = {"a.x": 1, "b.y": 3}
    diffs = conformance.differences(sim_side, real)
    uncovered, unused = conformance.unexplained(diffs, {"metrics.*.http_*": "", "c.*": ""})
    assert uncovered == {"b.y"} and unused == {"c.*"}


def test_the_deviation_table_is_read_from_docs() -> None:
    text = "## Deviations from vLLM 0.32\n\n| key | what |\n|---|---|\n| `errors.n_two.*` | n > 1 |\n\n## Next\n| `x` | y |"
    assert conformance.documented_deviations(text) == {"errors.n_two.*": "n > 1"}
