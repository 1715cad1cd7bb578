"""The power gate and `tally window power`: FAIL closed on a thin archive, PASS with more repeats, replayable."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ledger.errors import FormatError
from runner.decide.compare import diff
from runner.gates.power import archive_spreads, check_power, comparable, power_gate, replay_power_gate
from runner.plan.parse import read_plan_file
from runner.plan.register import register_plan
from runner.state.replay import replay

from .conftest import Site, tally
from .script import COMMIT, EXAMPLES

PLAN = EXAMPLES / "seed000-production-policy.toml"
CELLS = ("short-b1", "32k-b1")
CONTROL = next(a["config_digest"] for a in tomllib.loads(PLAN.read_text())["arms"] if a["role"] == "P")


def _register(site: Site, window: str, repeats: int, *, effect: float = 0.03, min_windows: int = 2,
              power: bool = True) -> Any:
    source = tomllib.loads(PLAN.read_text())
    overrides: dict[str, Any] = {"commit": COMMIT, "window_id": window,
                                 "measurement": dict(source["measurement"], repeats=repeats)}
    if power:
        overrides["power"] = {"effect": effect, "min_power": 0.8, "windows": 4000, "seed": 7,
                              "min_windows": min_windows}
        overrides["gates"] = {"required": [*source["gates"]["required"], "power"]}
    loaded = read_plan_file(PLAN, overrides=overrides)
    register_plan(site.book, site.signer, loaded)
    return loaded.plan


def _archive(site: Site, windows: int, *, start_sd: float = 0.003, repeat_sd: float = 0.01, seed: int = 0,
             max_tokens: int = 512, cap: int | None = 2300, repeats: int = 3, cell_correlation: float = 0.0,
             decode_sd: float | None = 0.002, accepted_sd: float = 0.0) -> None:
    """Other windows' control starts: their waves (per repeat, two families) and their archive entries.

    A start's offset is shared by its cells as ``cell_correlation`` says; the client decode
    rate is the server rate times its own noise (``decode_sd``; None: no client figures),
    accepted per round 2 times its own noise (``accepted_sd``).
    """
    rng = np.random.default_rng(seed)
    for w in range(windows):
        window = f"arch-{seed}-{w}"
        shared = {start: rng.normal() for start in ("s1", "s3")}
        for cell in CELLS:
            level = rng.normal(0, 0.05, repeats)  # each repeat's own level: shared by both starts
            for start in ("s1", "s3"):
                offset = start_sd * (math.sqrt(cell_correlation) * shared[start]
                                     + math.sqrt(1 - cell_correlation) * rng.normal())
                for r in range(1, repeats + 1):
                    rate = 100.0 * math.exp(level[r - 1] + offset + rng.normal(0, repeat_sd))
                    accepted = round(200 * math.exp(rng.normal(0, accepted_sd))) if accepted_sd else 200
                    client = None if decode_sd is None else rate * math.exp(rng.normal(0, decode_sd))
                    for family in ("opinions", "filings"):
                        payload: dict[str, Any] = {
                            "window": window, "start": start, "cell": cell, "repeat": r, "family": family,
                            "complete": True,
                            "counters": {"rounds": 100, "accepted": accepted, "decode_s": (100 + accepted) / rate}}
                        if client is not None:
                            payload["client"] = {"tokens_after_first": 1000, "decode_s": 1000 / client}
                        site.book.append(f"window/{window}", "wave.measured", payload, site.signer)
                site.book.append("archive", "archive.control_start", {
                    "window": window, "plan_sha256": "0" * 64, "start": start, "role": "P", "cell": cell,
                    "max_tokens": max_tokens, "commit": COMMIT, "clock_cap_mhz": cap,
                    "control_config_digest": CONTROL, "figures": {"pooled_rate_tps": 100.0}}, site.signer)


def test_only_same_cell_max_tokens_and_clock_cap_entries_of_other_windows_are_comparable(site: Site) -> None:
    plan = _register(site, "w", 3)
    base = {"window": "other", "cell": "short-b1", "max_tokens": 512, "clock_cap_mhz": 2300,
            "control_config_digest": CONTROL}
    assert comparable(plan, base)
    for change in ({"window": "w"}, {"cell": "32k-b4"}, {"max_tokens": 256}, {"clock_cap_mhz": 2150},
                   {"control_config_digest": "f" * 64}, {"control_config_digest": None}, {"dial_back": True}):
        assert not comparable(plan, base | change), change


def test_the_gate_fails_closed_with_too_few_archive_entries_and_says_how_many_are_needed(site: Site) -> None:
    _register(site, "w", 3)
    _archive(site, 1)
    _archive(site, 3, max_tokens=256, seed=1)  # not comparable: other max_tokens
    out = power_gate(site.book, site.signer, "w")
    assert out.verdict == "FAIL"
    assert "too thin" in out.summary and "2 archived windows with both control starts" in out.summary
    assert "(4 entries) are needed" in out.summary and "short-b1: 2 comparable entries, 1 window(s)" in out.summary
    assert out.evidence["needed_entries"] == 4 and "figures" not in out.evidence
    assert replay(site.book).windows["w"].gates["power"].verdict == "FAIL"


def test_the_gate_fails_with_three_repeats_and_passes_when_repeats_are_raised(site: Site) -> None:
    _archive(site, 6, start_sd=0.002, repeat_sd=0.012, cell_correlation=0.5)
    _register(site, "w3", 3, effect=0.035)
    few = power_gate(site.book, site.signer, "w3")
    figures = few.evidence["figures"]
    assert few.verdict == "FAIL" and figures["power"] < 0.8
    needed = figures["needed"]["repeats"]
    assert needed is not None and needed > 3
    assert f"{needed} repeats bring it to 3.50%" in few.summary
    assert figures["entries"] == 12 and few.evidence["archive"]["windows"] == {"short-b1": 6, "32k-b1": 6}
    assert few.evidence["model"] == 2 and figures["conservative"]["thin"] == []  # 6 windows: every correlation
    assert figures["correlations"]["decode_tps"]["value"] > 0.8  # the client decode rate moves with the rate
    _register(site, "wn", needed, effect=0.035)
    enough = power_gate(site.book, site.signer, "wn")
    assert enough.verdict == "PASS" and enough.evidence["figures"]["power"] >= 0.8
    assert replay(site.book).windows["wn"].gates["power"].verdict == "PASS"


def test_the_gate_is_reproducible_bit_for_bit_and_replays_from_the_ledger(site: Site) -> None:
    _archive(site, 3)
    _register(site, "w", 4)
    first = power_gate(site.book, site.signer, "w")
    _archive(site, 2, seed=5)  # archived later: the replay reads the archive as it was at the gate
    again = power_gate(site.book, site.signer, "w")
    assert again.evidence["figures"]["entries"] > first.evidence["figures"]["entries"]
    assert replay_power_gate(site.book, first.record.event) == []
    assert replay_power_gate(site.book, again.record.event) == []
    recorded = site.book.get(first.record.event.seq).payload["evidence"]
    plan = _register(site, "w", 4)
    same = check_power(site.book, plan, until=recorded["until_seq"])
    assert diff(recorded, same.evidence) == []  # every figure the same double (JSON keeps them exactly)
    assert same.evidence["figures"]["power"] == recorded["figures"]["power"]


def test_a_pilot_file_is_kept_as_a_blob_and_replays(site: Site, tmp_path: Path) -> None:
    _register(site, "w", 3)
    pilot = json.dumps({"spread": {"start_sd": 0.002, "repeat_sd": 0.004, "windows": 3, "guards": {
        "accepted_per_round": {"start_sd": 0.0, "repeat_sd": 0.0}, "decode_tps": {"start_sd": 0.002, "repeat_sd": 0.004}}},
        "correlation": {"cells": 0.6, "decode_tps": 0.95}}).encode()
    out = power_gate(site.book, site.signer, "w", pilot=pilot)
    assert out.evidence["spread_from"] == "pilot" and out.evidence["pilot"]["blob"].startswith("sha256:")
    assert out.verdict == "PASS"
    assert replay_power_gate(site.book, out.record.event) == []


def test_the_archive_spread_estimate_uses_the_archived_windows_per_repeat_rates(site: Site) -> None:
    plan = _register(site, "w", 3)
    _archive(site, 25, start_sd=0.01, repeat_sd=0.02)
    got = archive_spreads(site.book, plan)
    for cell in CELLS:
        spread = got.spreads[cell]
        assert spread is not None and got.windows[cell] == 25 and got.entries[cell] == 50
        assert spread.repeat_sd == pytest.approx(0.02, rel=0.25)


def test_a_plan_declaring_power_must_require_the_gate_and_the_reverse() -> None:
    source = tomllib.loads(PLAN.read_text())
    with pytest.raises(FormatError, match=r"plan.power: declared but the power gate is not in gates.required"):
        read_plan_file(PLAN, overrides={"power": {"effect": 0.03}})
    with pytest.raises(FormatError, match=r"plan.power: the power gate is required"):
        read_plan_file(PLAN, overrides={"gates": {"required": [*source["gates"]["required"], "power"]}})
    plain = read_plan_file(PLAN).plan
    assert "power" not in plain.to_json()  # plans without it keep their digest


def test_window_power_prints_the_figures_and_appends_nothing(site: Site) -> None:
    _archive(site, 3)
    _register(site, "w", 3)
    size = site.size()
    result = tally("window", "power", "w", "--effect", "0.05", "--windows", "2000", "--json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    f = out["figures"]
    assert f["effect"] == 0.05 and set(f["outcomes"]["at_zero"]) == {"WIN", "NO_CHANGE", "LOSS"}
    assert "analytic" in f and "start-to-start" in f["noise_model"] and f["entries"] == 6
    text = tally("window", "power", "w", "--windows", "2000")
    assert text.code == 0 and "MDE at 80% power" in text.out and "spread short-b1: start-to-start" in text.out
    # three archived windows cannot estimate a correlation: the output says so and what was assumed instead
    assert ("correlation the rate across cells: too thin to estimate (3 window(s) < 6); assumed the conservative value: 0 for "
            "the power, the false-LOSS rate, the MDE; 1 for the false-WIN rate") in text.out
    assert "false-LOSS rate" in text.out and "guards short-b1: accepted_per_round" in text.out
    assert site.size() == size
    thin = tally("window", "power", "w", "--spread-from", "archive", "--effect", "0.05")
    assert thin.code == 0
    bad = tally("window", "power", "w", "--spread-from", "pilot")
    assert bad.code == 2 and "--pilot FILE" in bad.err


def test_window_power_exits_1_when_the_archive_is_too_thin(site: Site) -> None:
    _register(site, "w", 3, power=False)
    result = tally("window", "power", "w")
    assert result.code == 1 and "too thin" in result.out


def test_a_bad_pilot_file_is_one_line_exit_2_and_nothing_appended(site: Site, tmp_path: Path) -> None:
    _register(site, "w", 3)
    size = site.size()
    for name, text in (("dup.json", '{"spread": {"start_sd": 0.1, "start_sd": 0.2, "repeat_sd": 0.1}}'),
                       ("neg.json", '{"spread": {"start_sd": -0.1, "repeat_sd": 0.1}}'),
                       ("deep.json", "[" * 100 + "]" * 100),
                       ("short.json", '{"spread": {"windows": [{"first": [1, 2], "second": [1]}]}}')):
        path = tmp_path / name
        path.write_text(text)
        result = tally("gate", "power", "w", "--pilot", path)
        assert result.code == 2 and len(result.err.strip().splitlines()) == 1, (name, result.err)
        assert "Traceback" not in result.err
    assert site.size() == size


def test_replay_power_says_match_and_catches_an_edited_figure(site: Site) -> None:
    _archive(site, 2)
    _register(site, "w", 3)
    event = power_gate(site.book, site.signer, "w").record.event
    result = tally("replay", "power", "w", "--json")
    assert result.code == 0 and json.loads(result.out)["verdict"] == "MATCH", result.out
    forged = dict(event.payload, evidence=dict(event.payload["evidence"],
                                               figures=dict(event.payload["evidence"]["figures"], power=0.99)))
    site.book.append("window/w", "gate.result", forged, site.signer)  # a result whose figures were not computed
    result = tally("replay", "power", "w")
    assert result.code == 1 and "MISMATCH" in result.out and "evidence.figures.power" in result.out


def test_a_pp3_plan_fails_closed_without_a_pilot_and_is_figured_with_one(site: Site) -> None:
    loaded = read_plan_file(EXAMPLES / "seed003-abba.toml", overrides={"commit": COMMIT})
    register_plan(site.book, site.signer, loaded)
    window = loaded.plan.window_id
    closed = check_power(site.book, loaded.plan, until=site.size())
    assert closed.verdict == "FAIL" and "pp3-v1 windows write no control archive" in closed.summary
    pilot = {"spread": {"start_sd": 0.005, "repeat_sd": 0.03, "windows": 3}}
    figured = check_power(site.book, loaded.plan, pilot=pilot, effect=0.06, windows=2000, until=site.size())
    f = figured.evidence["figures"]
    assert f["rule"] == "pp3-v1" and f["design"]["pairs"] == 6 and f["design"]["bootstrap"] == 2000
    assert set(f["outcomes"]["at_effect"]) == {"CANDIDATE", "NO_PROMOTION"} and f["needed"]["pairs"] is not None
    assert "P(CANDIDATE)" in figured.summary and window == "pp3-abba"


def test_a_thin_archive_says_which_correlations_it_assumes_and_claims_the_least_power(site: Site) -> None:
    from dataclasses import replace as copy

    from runner.decide.noise import Correlation
    from runner.decide.power import design_of, power_figures
    from runner.gates.power import archive_noise

    _archive(site, 3, start_sd=0.01, cell_correlation=0.8)
    plan = _register(site, "w", 3)
    out = power_gate(site.book, site.signer, "w")
    figures = out.evidence["figures"]
    assert out.evidence["model"] == 2 and figures["conservative"]["corners"] == 2
    assert "cells" in figures["conservative"]["thin"] and "decode_tps" in figures["conservative"]["thin"]
    assert "correlations assumed (the rate across cells: too thin to estimate (3 window(s) < 6)" in out.summary
    assert "the conservative value for each figure" in out.summary
    noise = archive_noise(site.book, plan, out.evidence["until_seq"]).noise
    assert noise is not None

    def at(value: float) -> dict[str, Any]:
        def fix(c: Correlation) -> Correlation:
            return Correlation(value, c.windows, "pilot") if c.thin else c

        fixed = copy(noise, cell_correlation=fix(noise.cell_correlation),
                     guard_correlation=tuple(fix(c) for c in noise.guard_correlation),
                     guard_cell_correlation=tuple(fix(c) for c in noise.guard_cell_correlation))
        return power_figures(design_of(plan), fixed, effect=0.03, target=0.8, windows=4000, seed=7, search=False)

    low, high = at(0.0), at(1.0)
    assert figures["power"] == min(low["power"], high["power"])
    assert figures["false_positive_rate"] == max(low["false_positive_rate"], high["false_positive_rate"])
    assert figures["false_loss_rate"] == max(low["false_loss_rate"], high["false_loss_rate"])
    assert replay_power_gate(site.book, out.record.event) == []
