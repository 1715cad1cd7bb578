"""`tally window power --spread-from twin --twin TWIN.toml`: the calibrated twin as the power's noise source."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Site, tally
from .test_power_gate import _register

TWIN = """
step_model = "batch"
start_jitter = 0.004
step_jitter = 0.03

[arms.production]
k = 4
acceptance = [0.6, 0.6, 0.6, 0.6]
acceptance_rate = 0.6
acceptance_concentration = 12.0
step_base_ms = 12.0
step_per_token_ms = 0.8
ttft_base_ms = 30.0
ttft_per_1k_tokens_ms = 50.0
step_per_kv_token_us = 2.0
"""


def test_window_power_takes_the_twin_as_its_noise_source_and_says_so(site: Site, tmp_path: Path) -> None:
    _register(site, "w", 3)
    twin = tmp_path / "twin.toml"
    twin.write_text(TWIN)
    size = site.size()
    text = tally("window", "power", "w", "--spread-from", "twin", "--twin", str(twin), "--windows", "300")
    assert text.code == 0, text.err
    first = text.out.splitlines()[0]
    assert first.startswith(f"noise from the twin {twin} (arm production, step model simulated: 6 windows")
    assert "spread short-b1: start-to-start" in text.out and "(pilot:" in text.out
    out = json.loads(tally("window", "power", "w", "--spread-from", "twin", "--twin", str(twin), "--windows",
                           "300", "--json").out)
    assert out["noise_source"] == first and out["figures"]["effect"] > 0
    # a twin whose starts differ more in speed gives a larger start-to-start spread
    noisy = tmp_path / "noisy.toml"
    noisy.write_text(TWIN.replace("start_jitter = 0.004", "start_jitter = 0.2"))
    loud = json.loads(tally("window", "power", "w", "--spread-from", "twin", "--twin", str(noisy), "--windows",
                            "300", "--json").out)
    assert loud["figures"]["spread"]["short-b1"]["start_sd"] > 5 * out["figures"]["spread"]["short-b1"]["start_sd"]
    assert site.size() == size
    missing = tally("window", "power", "w", "--spread-from", "twin")
    assert missing.code == 2 and "--twin TWIN.toml" in missing.err and len(missing.err.strip().splitlines()) == 1

