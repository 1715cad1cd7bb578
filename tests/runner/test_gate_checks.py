"""Checks that only check: `gate power --check` and `chain prev-ok --check` append nothing."""

from __future__ import annotations

import json
import tomllib
from typing import Any

from runner.plan.parse import read_plan_file
from runner.plan.register import register_plan

from .conftest import Site, tally
from .script import COMMIT, EXAMPLES, Script, example_plan

PLAN = EXAMPLES / "seed000-production-policy.toml"


def _register_with_power(site: Site, window: str = "w") -> None:
    source = tomllib.loads(PLAN.read_text())
    overrides: dict[str, Any] = {
        "commit": COMMIT, "window_id": window, "chain": "none",
        "power": {"effect": 0.03, "min_power": 0.8, "windows": 2000, "seed": 7, "min_windows": 2},
        "gates": {"required": [*source["gates"]["required"], "power"]}}
    register_plan(site.book, site.signer, read_plan_file(PLAN, overrides=overrides))


def test_gate_power_check_prints_the_gate_and_appends_nothing(site: Site) -> None:
    _register_with_power(site)
    size = site.size()
    checked = tally("gate", "power", "w", "--check", "--json")
    assert checked.code == 1, checked.err   # a thin archive: FAIL, as the recorded gate would say
    out = json.loads(checked.out)
    assert out["verdict"] == "FAIL" and out["seq"] is None and out["recorded"] is False and "too thin" in out["summary"]
    text = tally("gate", "power", "w", "--check")
    assert text.code == 1 and "checked only (--check): nothing recorded" in text.out
    assert site.size() == size
    recorded = tally("gate", "power", "w", "--json")
    assert recorded.code == 1 and site.size() == size + 1
    assert json.loads(recorded.out)["summary"] == out["summary"] and "recorded" not in json.loads(recorded.out)


def _chained_then(site: Site, window: str, chain: str) -> None:
    script = Script()
    first, fam1, src1 = example_plan("seed000-production-policy", window_id="chain-1", chain="chained")
    script.register(first, fam1, src1)
    script.admit(first)
    script.open_hold(first)
    script.measure(first)
    script.chained_close(first)   # the marker is set, production left down
    script.decide(first)
    plan, families, source = example_plan("seed000-controlled", window_id=window, chain=chain)
    script.register(plan, families, source)
    script.append_to(site.book, site.signer)


def test_chain_prev_ok_check_neither_records_nor_aborts_the_chain(site: Site) -> None:
    _chained_then(site, "outsider", "none")   # not a chain member while the marker is set: FAIL
    size = site.size()
    checked = tally("chain", "prev-ok", "outsider", "--check", "--json")
    assert checked.code == 1, checked.err
    out = json.loads(checked.out)
    assert out["verdict"] == "FAIL" and out["recorded"] is False and out["chain_aborted_seq"] is None
    assert site.size() == size   # no gate result, no chain.aborted
    recorded = json.loads(tally("chain", "prev-ok", "outsider", "--json").out)
    assert recorded["chain_aborted_seq"] is not None and site.size() == size + 2
    assert recorded["summary"] == out["summary"]


def test_chain_prev_ok_check_passes_the_chain_s_next_window(site: Site) -> None:
    _chained_then(site, "chain-2", "last")
    size = site.size()
    checked = tally("chain", "prev-ok", "chain-2", "--check")
    assert checked.code == 0, checked.out + checked.err
    assert "PASS" in checked.out and "nothing recorded" in checked.out and site.size() == size
