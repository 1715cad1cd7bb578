"""`tally demo --plan PLAN --sim CALIBRATED.toml`: the operator's plan rehearsed on the calibrated twin."""

from __future__ import annotations

from pathlib import Path

import pytest

import runner.sim as sim
from ledger.store import Ledger
from runner.demo.pair import prepare_plan_demo
from runner.demo.scenarios import run_demo
from runner.sim import Acceptance, StepCosts

from .twinruns import measured

PLAN = Path(__file__).resolve().parents[2] / "examples" / "site-llamacpp" / "pp3-llamacpp.toml"   # plain, lookup


def test_demo_plan_rehearses_on_the_calibrated_twin(tmp_path: Path) -> None:
    costs = StepCosts(12.0, 0.8, prefill_fixed_ms=30.0, per_prefill_token_ms=0.05)
    runs = []
    for arm, k in (("plain", 0), ("lookup", 4)):
        for c in (1, 2):
            path = measured(tmp_path / f"{arm}{c}", k=k, costs=costs, acceptance=Acceptance(0.7), concurrency=c,
                            prompts=[40, 60, 80, 50], max_tokens=32, family="counts", seed=c)
            runs.append(sim.read_run(arm, path))
    fit = sim.calibrate(runs)
    twin = tmp_path / "twin.toml"
    twin.write_text(sim.config_toml(fit.table))
    prepared = prepare_plan_demo(PLAN, twin, time_scale=0.01)
    assert prepared.config["step_model"] == "batch"
    assert prepared.config["arms"]["lookup"]["step_base_ms"] == pytest.approx(fit.arms["lookup"].costs.fixed_ms)
    assert prepared.config["arms"]["lookup"]["k"] == 4            # the twin's, not the plan's declared 8
    assert prepared.time_scale == 0.01                            # the twin leaves the demo's own settings
    assert any(note.startswith(f"the pair is a twin: {twin}") for note in prepared.notes)
    summary = run_demo(tmp_path / "d", plan=prepared, quiet=True)
    assert summary["ok"], summary
    book = Ledger.open(summary["db"])
    try:
        waves = [e.payload for e in book.events(types=["wave.measured"])]
        began = [e.payload["start"] for e in book.events(types=["start.began"])]
    finally:
        book.close()
    assert summary["windows"][0]["ending"] == "restored" and any(s.startswith("B") for s in began)
    # the candidate's engine is the twin's (k = 4), in every wave it measured (a loaded machine may cut waves
    # short by the plan's budget, never change what they count)
    candidate = [w["counters"] for w in waves if w["start"].startswith("B")]
    assert all(len(c["accepted_per_pos"]) == 4 for c in candidate)
