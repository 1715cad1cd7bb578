"""chain prev-ok asks the hosts too: a placeholder the ledger says is up but the host does not prove."""

from __future__ import annotations

from pathlib import Path

from runner.gates.chain import check_prev_ok, run_prev_ok

from .worlds import close, gate_all, run, state, window, world


def test_prev_ok_probes_a_placeholder_that_is_down(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="chained")])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        w.sim.control("placeholder_down", host="sim-worker")   # behind the ledger's back
        assert check_prev_ok(state(w.book), "chain-b").verdict == "PASS"   # the ledger alone cannot see it
        record = run_prev_ok(w.book, w.root, "chain-b", w.driver)
        result = record.result
        assert result.verdict == "FAIL"
        assert any("placeholder on sim-worker is not up" in f for f in result.failures), result.failures
        assert not any("sim-head" in f for f in result.failures)
        probes = result.evidence["hosts"]["probes"]
        assert probes["placeholder_proof sim-head"]["ok"] and not probes["placeholder_proof sim-worker"]["ok"]
        assert record.aborted_event is not None   # the chain is aborted: the window must restore
        gate = state(w.book).windows["chain-b"].gates["chain_prev_ok"]
        assert gate["verdict"] == "FAIL"
    finally:
        close(w)


def test_prev_ok_with_the_hosts_as_the_ledger_says_passes(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="chained")])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        record = run_prev_ok(w.book, w.root, "chain-b", w.driver)
        assert record.result.verdict == "PASS", record.result.failures
        assert set(record.result.evidence["hosts"]["probes"]) == {
            "preflight", "placeholder_proof sim-head", "placeholder_proof sim-worker"}
        assert run(w, "chain-b").ending == "chained"
    finally:
        close(w)
