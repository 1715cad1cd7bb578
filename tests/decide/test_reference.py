"""The rule module agrees with an independent reimplementation on 200 random inputs per rule (1e-12 relative)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from runner.decide import compute

from . import reference

N_INPUTS = 200
REL = 1e-12


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= REL * max(abs(a), abs(b)) or a == b


def close_change(a: float | None, b: float | None) -> bool:
    """Two relative changes (a ratio minus 1): their ratios agree to REL (a change near 0 has no relative precision)."""
    if a is None or b is None:
        return a is b
    return close(1 + a, 1 + b)


def close_list(a: list[float | None], b: list[float | None]) -> bool:
    return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))


def random_win2(rng: random.Random) -> dict[str, Any]:
    repeats = rng.choice([3, 3, 3, 2, 4, 5])
    params = {"bar": rng.choice([0.02, 0.0, 0.05, rng.uniform(0, 0.1)]),
              "confidence": rng.choice([0.95, 0.9, 0.99, rng.uniform(0.5, 0.999)]),
              "guard_min_repeats": rng.randint(1, repeats), "repeats": repeats}
    cells = rng.sample(["short-b1", "32k-b1", "short-b4", "150k-b1"], rng.randint(1, 3))
    families = ["filings", "opinions"] if rng.random() > 0.03 else ["opinions"]
    effect = {c: {m: rng.gauss(0, 0.06) for m in ("acc", "dec", "tok")} for c in cells}
    waves: list[dict[str, Any]] = []
    for cell in [*cells, "unused-cell"]:
        base_rounds = rng.randint(300, 3000)
        for s in ("s1", "s2", "s3"):
            for r in range(1, repeats + 1):
                for fam in families:
                    e = effect.get(cell, {"acc": 0.0, "dec": 0.0, "tok": 0.0}) if s == "s2" else \
                        {"acc": 0.0, "dec": 0.0, "tok": 0.0}
                    rounds = int(base_rounds * rng.uniform(0.9, 1.1))
                    wave: dict[str, Any] = {"start": s, "cell": cell, "repeat": r, "family": fam, "rounds": rounds,
                            "accepted": int(rounds * 2.5 * (1 + e["acc"]) * rng.uniform(0.97, 1.03)),
                            "decode_s": rounds * 0.02 * (1 + e["dec"]) * rng.uniform(0.97, 1.03),
                            "ttft_s": [rng.uniform(0.05, 0.5) for _ in range(rng.randint(1, 4))],
                            "client_tokens_after_first": int(rounds * 3.4 * (1 + e["tok"]) * rng.uniform(0.97, 1.03)),
                            "client_decode_s": rounds * 0.02 * rng.uniform(0.97, 1.03)}
                    if rng.random() < 0.004:
                        wave[rng.choice(["rounds", "accepted", "decode_s"])] = None
                    if rng.random() < 0.004:
                        continue
                    waves.append(wave)
    rng.shuffle(waves)
    cap = 2300
    caps = [cap, cap, cap]
    if rng.random() < 0.08:
        caps[rng.randrange(3)] = 2150
    if rng.random() < 0.04:
        caps = [2150, 2150, 2150]
    archive = [{"cell": rng.choice(cells), "pooled_rate_tps": rng.uniform(100, 200)} for _ in range(rng.randint(0, 6))]
    return {"rule": "win2-v1", "params": params, "decision_cells": cells, "production_clock_cap_mhz": cap,
            "starts": {s: {"role": role, "clock_cap_mhz": c} for s, role, c in zip(("s1", "s2", "s3"), "ABA", caps,
                                                                                  strict=True)},
            "thermal_dialbacks_in_hold": 1 if rng.random() < 0.04 else 0, "waves": waves, "archive": archive}


def random_pp3(rng: random.Random) -> dict[str, Any]:
    families = [f"fam{i}" for i in rng.sample(range(9), rng.choice([1, 2, 2, 2, 3, 4]))]
    contexts = rng.sample(["short", "32k", "150k", "8k"], rng.randint(1, 3))
    params = {"min_gain": rng.choice([0.05, 0.0, 0.02]), "bootstrap": rng.choice([2000, 500, 1999, 37]),
              "seed": rng.choice([4103, 0, rng.randrange(2**40)]), "interval": rng.choice([0.90, 0.95, 0.8]),
              "max_regression": rng.choice([0.05, 0.1])}
    gain = {f: rng.gauss(0.06, 0.05) for f in families}
    prompts = rng.choice([1, 1, 2, 3])  # prompts per (family, context): a pair holds them all
    requests = []
    for block in ("A1", "B1", "B2", "A2"):
        for f in families:
            for c, n in ((c, n) for c in contexts for n in range(prompts)):
                decode = rng.uniform(5, 30)
                rate = 90 * (1 + gain[f] if block[0] == "B" else 1) * rng.uniform(0.97, 1.03)
                status = "ok"
                roll = rng.random()
                if roll < 0.01:
                    status = "lost"
                elif roll < 0.025:
                    status = rng.choice(["censored", "failed", "timeout", "cancelled"])
                elif roll < 0.3:
                    status = "bounded"  # a bounded decode run: observed like an ok one
                if rng.random() < 0.005:
                    continue
                requests.append({"block": block, "arm": block[0], "family": f, "context": c, "status": status,
                                 "prompt_id": f"{f}-{c}-{n}", "delivered_tokens": int(rate * decode), "decode_s": decode,
                                 "ttft_s": rng.uniform(0.3, 0.5) if rng.random() > 0.003 else None,
                                 "round_ms_p95": rng.uniform(28, 32)})
    rng.shuffle(requests)
    failures = [rng.choice(["grammar", "stop"])] if rng.random() < 0.03 else []
    data = {"rule": "pp3-v1", "params": params, "gates_passed": rng.random() > 0.03, "failures": failures,
            "requests": requests}
    if rng.random() < 0.5:  # input builder 3: the blocks' clock caps and the dial-backs inside the HOLD
        production = rng.choice([2300, 2300, 2300, None])
        caps = {b: production for b in ("A1", "B1", "B2", "A2")}
        if rng.random() < 0.1:
            caps[rng.choice(list(caps))] = rng.choice([2150, None])
        data["clocks"] = {"production_clock_cap_mhz": production, "blocks": caps,
                          "thermal_dialbacks_in_hold": 1 if rng.random() < 0.05 else 0}
    return data


def test_win2_agrees_with_the_reference() -> None:
    rng = random.Random(20261027)
    outcomes: dict[str, int] = {}
    for i in range(N_INPUTS):
        data = random_win2(rng)
        got = compute(data)
        want = reference.win2(data)
        where = f"input {i}"
        assert got["decision"] == want["decision"], where
        assert got["checklist_literal"]["decision"] == want["literal_decision"], where
        assert got["checklist_literal"]["cells"] == want["literal"], where
        for cell, w in want["cells"].items():
            g = got["cells"][cell]
            assert g["verdict"] == w["verdict"], (where, cell)
            for name, wm in w["metrics"].items():
                gm = g["metrics"][name]
                for s in ("s1", "s2", "s3"):
                    assert close_list(gm["per_repeat"][s], wm["per_repeat"][s]), (where, cell, name, s)
                assert close_list(gm["d"], wm["d"]), (where, cell, name)
                for key in ("point", "low", "high"):
                    assert close(gm[key], wm[key]), (where, cell, name, key, gm[key], wm[key])
                expected = wm["guard"] if gm["role"] == "guard" else wm["effect"]
                assert gm["verdict"] == expected, (where, cell, name)
            gs, ws = got["spread"][cell], want["spread"][cell]
            assert close_list(gs["in_window_off_off"], ws["in_window_off_off"]), (where, cell)
            assert close(gs["archive_day_to_day"], ws["archive_day_to_day"]), (where, cell)
        outcomes[got["decision"]] = outcomes.get(got["decision"], 0) + 1
    # the random inputs reach every outcome, so agreement covers each branch
    assert set(outcomes) == {"WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE"}, outcomes


def with_primaries(data: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``data`` with a random valid registration of several primaries (docs/rules.md 2.7)."""
    names = ["pooled_rate_tps", "accepted_per_round", "decode_tps", "ms_per_round", "ttft_s"]
    primaries = rng.sample(names, rng.choice([1, 2, 2, 3]))
    decide = rng.choice(["all", "any"])
    correction = rng.choice(["holm", "bonferroni"] if decide == "any" and len(primaries) > 1
                            else ["holm", "bonferroni", "none"])
    return {**data, "params": {**data["params"], "primaries": primaries, "decide": decide, "correction": correction}}


def test_win2_with_primaries_agrees_with_the_reference() -> None:
    rng = random.Random(20261028)
    outcomes: dict[str, int] = {}
    for i in range(N_INPUTS):
        data = with_primaries(random_win2(rng), rng)
        got = compute(data)
        want = reference.win2(data)
        where = f"input {i}: {data['params']}"
        assert got["decision"] == want["decision"], where
        assert got["checklist_literal"]["cells"] == want["literal"], where
        for cell, w in want["cells"].items():
            g = got["cells"][cell]
            assert g["verdict"] == w["verdict"], (where, cell)
            for name in data["params"]["primaries"]:
                gm, wm = g["metrics"][name], w["metrics"][name]
                assert gm["role"] == "primary", (where, name)
                if "p" in wm:
                    assert close(gm["test"]["p"], wm["p"]) or abs(gm["test"]["p"] - wm["p"]) < 1e-15, (where, name)
                    assert gm["test"].get("passed", True) == wm["passed"], (where, cell, name)
        outcomes[got["decision"]] = outcomes.get(got["decision"], 0) + 1
    assert set(outcomes) == {"WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE"}, outcomes


def test_pp3_agrees_with_the_reference() -> None:
    rng = random.Random(4103)
    outcomes: dict[str, int] = {}
    for i in range(N_INPUTS):
        data = random_pp3(rng)
        got = compute(data)
        want = reference.pp3(data)
        where = f"input {i}"
        assert got["decision"] == want["decision"], where
        assert close(got["point_gain"], want["point"]), (where, got["point_gain"], want["point"])
        assert close(got["lower_bound"], want["lower"]), (where, got["lower_bound"], want["lower"])
        assert got["distinct_resamples"] == want["distinct"], where
        assert {f: v["gain"] for f, v in got["per_family"].items()} == pytest.approx(want["per_family"], rel=REL)
        assert set(got["per_pair"]) == set(want["per_pair"]), where
        for pair, w in want["per_pair"].items():
            for key, value in w.items():
                assert close_change(got["per_pair"][pair][key], value), (where, pair, key)
        outcomes[got["decision"]] = outcomes.get(got["decision"], 0) + 1
    assert set(outcomes) == {"CANDIDATE", "NO_PROMOTION", "REJECT"}, outcomes
