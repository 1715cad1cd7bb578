"""docs/rules.md is enough to get identical numbers: its reference code and formulas, run against numpy and the rules."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runner.decide import compute
from runner.decide.pp3 import family_sums, parse

from .test_pp3_cases import candidate_input
from .test_reference import random_pp3, random_win2
from .test_win2_cases import _win_input

DOC = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


@pytest.fixture(scope="module")
def ref() -> dict[str, Any]:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- reference:bootstrap -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/rules.md lost its reference block"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(DOC), "exec"), namespace)
    return namespace


def test_documented_correction_step_is_the_rule() -> None:
    """docs/rules.md 2.7's Holm / Bonferroni block, run against ``step_tests`` on random p-values (ties too)."""
    from runner.decide.paired import step_tests

    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- reference:holm -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/rules.md lost its correction block"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(DOC), "exec"), namespace)
    rng = random.Random(5)
    for _ in range(500):
        m = rng.randint(1, 5)
        p = [rng.choice([rng.random() * 0.06, 0.01, 0.025]) for _ in range(m)]
        alpha = rng.choice([1 - 0.95, 1 - 0.9, 0.01])
        for correction in ("holm", "bonferroni"):
            want = [(s.rank, s.threshold, s.passed) for s in step_tests(p, alpha, correction)]
            assert namespace["corrected"](p, alpha, correction) == want, (p, alpha, correction)


def _json_blocks() -> list[Any]:
    text = DOC.read_text(encoding="utf-8")
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]


@pytest.mark.parametrize("seed", [0, 1, 4103, 2**32 - 1, 2**32, 12345678901234, 2**53 - 1])
def test_seed_sequence_matches_numpy(ref: dict[str, Any], seed: int) -> None:
    assert ref["seed_sequence_words"](seed, 8) == np.random.SeedSequence(seed).generate_state(8).tolist()


@pytest.mark.parametrize(("seed", "k", "n"), [(4103, 2, 2000), (4103, 3, 400), (0, 7, 300), (99, 1, 5),
                                              (2**40 + 5, 5, 500), (2**53 - 1, 13, 60)])
def test_bootstrap_indexes_match_numpy(ref: dict[str, Any], seed: int, k: int, n: int) -> None:
    assert ref["bootstrap_indexes"](seed, n, k) == np.random.default_rng(seed).integers(0, k, size=(n, k)).tolist()


def test_documented_first_rows(ref: dict[str, Any]) -> None:
    rows = [[0, 1], [0, 0], [0, 0], [1, 0], [0, 1], [1, 1], [1, 0], [1, 0]]
    assert ref["bootstrap_indexes"](4103, 8, 2) == rows
    assert "`[0, 1], [0, 0], [0, 0], [1, 0], [0, 1], [1, 1], [1, 0], [1, 0]`" in DOC.read_text(encoding="utf-8")


def test_linear_quantile_matches_numpy_bit_for_bit(ref: dict[str, Any]) -> None:
    rng = random.Random(7)
    for _ in range(300):
        values = [rng.uniform(-1, 1) for _ in range(rng.randint(1, 3000))]
        q = rng.choice([(1 - 0.90) / 2, 0.05, 0.025, rng.random(), 0.0, 1.0])
        assert ref["linear_quantile"](values, q) == float(np.quantile(values, q))


def test_rounding_matches_numpy(ref: dict[str, Any]) -> None:
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(0, 0.1, 5000), np.array([0.5e-12, 1.5e-12, 2.5e-12, -0.5e-12])])
    assert [round(v * 1e12) / 1e12 for v in values.tolist()] == np.round(values, 12).tolist()


def test_reference_lower_bound_is_bit_identical_to_the_rule(ref: dict[str, Any]) -> None:
    checked = 0
    for seed in range(60):
        data = random_pp3(random.Random(seed))
        result = compute(data)
        if result["lower_bound"] is None:
            continue
        sums = family_sums(parse(data).requests)
        p = result["params"]
        lower, distinct = ref["lower_bound_and_distinct"](sums.tokens_b, sums.decode_b, sums.tokens_a, sums.decode_a,
                                                          seed=p["seed"], resamples=p["bootstrap"],
                                                          interval=p["interval"])
        assert lower == result["lower_bound"], seed
        assert distinct == result["distinct_resamples"], seed
        checked += 1
    assert checked > 30


def _fsum_interval(d: list[float], t: float) -> tuple[float, float, float]:
    n = len(d)
    point = math.fsum(d) / n
    sd = math.sqrt(math.fsum((x - point) * (x - point) for x in d) / (n - 1))
    half = t * sd / math.sqrt(n)
    return point, point - half, point + half


def test_win2_formulas_as_documented_give_identical_numbers() -> None:
    """Pooling, d, point and interval computed exactly as section 2 says equal the rule's bits."""
    t_table = {0.95: 4.302652729749462}
    checked = 0
    for seed in range(200):
        data = random_win2(random.Random(seed))
        if data["params"]["repeats"] != 3 or data["params"]["confidence"] != 0.95:
            continue
        result = compute(data)
        families = sorted({w["family"] for w in data["waves"] if w["cell"] in data["decision_cells"]})
        for cell, cell_result in result["cells"].items():
            if cell_result["verdict"] is None:
                continue
            rates: dict[str, list[float]] = {}
            for s in ("s1", "s2", "s3"):
                rates[s] = []
                for r in (1, 2, 3):
                    waves = sorted((w for w in data["waves"] if (w["start"], w["cell"], w["repeat"]) == (s, cell, r)),
                                   key=lambda w: families.index(w["family"]))
                    rounds = sum(w["rounds"] for w in waves)
                    accepted = sum(w["accepted"] for w in waves)
                    rates[s].append((rounds + accepted) / math.fsum(w["decode_s"] for w in waves))
            primary = cell_result["metrics"]["pooled_rate_tps"]
            assert primary["per_repeat"] == rates
            d = [rates["s2"][i] / ((rates["s1"][i] + rates["s3"][i]) / 2) - 1 for i in range(3)]
            assert primary["d"] == d
            assert (primary["point"], primary["low"], primary["high"]) == _fsum_interval(d, t_table[0.95])
            checked += 1
    assert checked > 20


def test_documented_examples_are_what_the_rules_output() -> None:
    blocks = _json_blocks()
    win2_out = next(b for b in blocks if b.get("rule") == "win2-v1" and "decision" in b)
    pp3_out = next(b for b in blocks if b.get("rule") == "pp3-v1" and "decision" in b)
    win = compute(_win_input())
    documented = win2_out["cells"]["short-b1"]["metrics"]["pooled_rate_tps"]
    assert win["cells"]["short-b1"]["metrics"]["pooled_rate_tps"] == documented
    assert win["checklist_literal"] == win2_out["checklist_literal"]
    assert win["spread"] == win2_out["spread"] and win["params"] == win2_out["params"]
    cand = compute(candidate_input())
    for key in ("decision", "reasons", "point_gain", "lower_bound", "distinct_resamples", "resamples", "per_family",
                "params"):
        assert cand[key] == pp3_out[key], key
    assert cand["per_pair"]["f1/short"] == pp3_out["per_pair"]["f1/short"]
    # the documented inputs are valid inputs (the win2 one decides INCONCLUSIVE: it has one wave)
    inputs = [b for b in blocks if "rule" in b and "decision" not in b]
    assert [compute(b)["decision"] for b in inputs] == ["INCONCLUSIVE", "NO_PROMOTION"]
