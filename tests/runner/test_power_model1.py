"""A power gate result recorded before the model was versioned still replays: model 1 is kept (to the last ulp: diff).

``tests/fixtures/power_gate_model1.json`` holds the evidence tally's model-1 code computed
(commit 69ea87d) for a known archive, a pilot and a pp3-v1 pilot; the same ledger is built
again here and model 1 must give the same figures, double for double.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from ledger.store import Blob
from runner.decide.compare import diff
from runner.gates.admission import record_gate
from runner.gates.power import check_power, power_gate, replay_power_gate
from runner.plan.parse import read_plan_file
from runner.plan.register import register_plan

from .conftest import Site, tally
from .script import COMMIT, EXAMPLES

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "power_gate_model1.json").read_text())
PLAN = EXAMPLES / "seed000-production-policy.toml"
CELLS = ("short-b1", "32k-b1")
CONTROL = next(a["config_digest"] for a in tomllib.loads(PLAN.read_text())["arms"] if a["role"] == "P")


def _old_archive(site: Site, windows: int, start_sd: float = 0.003, repeat_sd: float = 0.01, seed: int = 0,
                 repeats: int = 3) -> None:
    """The archive the fixture was computed on (as the model-1 tests built it: counters only, no client figures)."""
    rng = np.random.default_rng(seed)
    for w in range(windows):
        window = f"arch-{seed}-{w}"
        for cell in CELLS:
            level = rng.normal(0, 0.05, repeats)
            for start in ("s1", "s3"):
                offset = rng.normal(0, start_sd)
                for r in range(1, repeats + 1):
                    rate = 100.0 * math.exp(level[r - 1] + offset + rng.normal(0, repeat_sd))
                    for family in ("opinions", "filings"):
                        site.book.append(f"window/{window}", "wave.measured", {
                            "window": window, "start": start, "cell": cell, "repeat": r, "family": family,
                            "complete": True, "counters": {"rounds": 100, "accepted": 200, "decode_s": 300 / rate}},
                            site.signer)
                site.book.append("archive", "archive.control_start", {
                    "window": window, "plan_sha256": "0" * 64, "start": start, "role": "P", "cell": cell,
                    "max_tokens": 512, "commit": COMMIT, "clock_cap_mhz": 2300,
                    "control_config_digest": CONTROL, "figures": {"pooled_rate_tps": 100.0}}, site.signer)


def _register(site: Site) -> Any:
    source = tomllib.loads(PLAN.read_text())
    loaded = read_plan_file(PLAN, overrides={
        "commit": COMMIT, "window_id": "w", "measurement": dict(source["measurement"], repeats=4),
        "power": {"effect": 0.03, "min_power": 0.8, "windows": 4000, "seed": 7, "min_windows": 2},
        "gates": {"required": [*source["gates"]["required"], "power"]}})
    register_plan(site.book, site.signer, loaded)
    return loaded.plan


def _without_hashes(evidence: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(evidence))
    out.get("archive", {}).pop("hashes", None)
    return out


def test_model_1_still_computes_the_figures_an_old_gate_recorded_bit_for_bit(site: Site) -> None:
    _old_archive(site, 3)
    plan = _register(site)
    for case, pilot in (("archive", None), ("pilot", FIXTURE["pilot"]["pilot"])):
        again = check_power(site.book, plan, pilot=pilot, until=site.size(), model=1)
        assert again.verdict == FIXTURE[case]["verdict"]
        assert diff(FIXTURE[case]["evidence"], _without_hashes(again.evidence)) == [], case
        assert "model" not in again.evidence   # model 1's evidence has no model member, as it had none
    loaded = read_plan_file(EXAMPLES / "seed003-abba.toml", overrides={"commit": COMMIT})
    register_plan(site.book, site.signer, loaded)
    again = check_power(site.book, loaded.plan, pilot=FIXTURE["pp3"]["pilot"], effect=0.06, windows=2000,
                        until=site.size(), model=1)
    assert diff(FIXTURE["pp3"]["evidence"], _without_hashes(again.evidence)) == []
    # the current model gives other figures for the same inputs: that is why the model is versioned
    now = check_power(site.book, plan, until=site.size())
    assert now.evidence["model"] == 2 and now.evidence["figures"] != FIXTURE["archive"]["evidence"]["figures"]


def test_an_old_gate_result_without_a_model_member_replays_with_model_1(site: Site) -> None:
    _old_archive(site, 3)
    plan = _register(site)
    old = check_power(site.book, plan, until=site.size(), model=1)
    record = record_gate(site.book, site.signer, "w", "power", old.verdict, old.evidence, commit=plan.commit,
                         summary=old.summary)
    pilot_bytes = json.dumps(FIXTURE["pilot"]["pilot"]).encode()
    blob = Blob(pilot_bytes, "application/json")
    piloted = check_power(site.book, plan, pilot=FIXTURE["pilot"]["pilot"], until=site.size(), model=1)
    record_pilot = record_gate(site.book, site.signer, "w", "power", piloted.verdict,
                               dict(piloted.evidence, pilot=blob.ref()), commit=plan.commit, blobs=[blob])
    new = power_gate(site.book, site.signer, "w")   # and one the current model records
    assert new.evidence["model"] == 2
    for event in (record.event, record_pilot.event, new.record.event):
        assert replay_power_gate(site.book, event) == [], event.seq
    result = tally("replay", "power", "w", "--json")
    assert result.code == 0 and json.loads(result.out)["verdict"] == "MATCH", result.out
    # an old result whose figures were edited is still caught
    forged = dict(record.event.payload, evidence=dict(old.evidence, figures=dict(old.evidence["figures"], mde=0.01)))
    event = site.book.append("window/w", "gate.result", forged, site.signer)
    assert any("evidence.figures.mde" in d for d in replay_power_gate(site.book, event))
