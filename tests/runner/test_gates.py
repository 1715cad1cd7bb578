"""Gates through the CLI: budget tables of both seeds, RNG, standard spec, chain prev-ok, admission."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.gates.admission import record_gate
from runner.gates.budget import budget_report
from runner.plan import load_plan, parse_plan
from runner.plan.register import registered
from runner.state.fold import admission_blockers, fold
from runner.state.replay import replay

from .conftest import Site, tally
from .script import EXAMPLES, Script, edit

PP, CONTROLLED, ABBA = "seed000-production-policy", "seed000-controlled", "seed003-abba"


def _register(name: str, *extra: str) -> str:
    result = tally("window", "register", EXAMPLES / f"{name}.toml", "--json", *extra)
    assert result.code == 0, result.err
    return str(json.loads(result.out)["window"])


# ---------------------------------------------------------------------- budget


def _gate_budget(window: str, *extra: str) -> tuple[int, dict]:
    result = tally("gate", "budget", window, "--json", *extra)
    return result.code, json.loads(result.out)


def _row(out: dict, label: str) -> dict:
    (row,) = [r for r in out["evidence"]["rows"] if r["label"] == label]
    return row


def test_budget_reproduces_seed_000_controlled(site: Site) -> None:
    code, out = _gate_budget(_register(CONTROLLED))
    assert code == 0 and out["verdict"] == "PASS"
    estimate, dry = _row(out, "333 s pair reserve"), _row(out, "600 s dry bound")
    assert abs(estimate["total_min"] - 80.1) <= 0.05 and abs(estimate["measurement_end_min"] - 68.1) <= 0.05
    assert (estimate["total"], estimate["measurement_end"]) == ("80.1", "68.1")
    assert abs(dry["total_min"] - 84.5) <= 0.05 and dry["total"] == "84.5" and dry["fits"] is True


def test_budget_reproduces_seed_000_production_policy(site: Site) -> None:
    window = _register(PP)
    size = site.size()
    code, out = _gate_budget(window)
    assert code == 1 and out["verdict"] == "FAIL" and site.size() == size + 1  # FAIL is recorded too
    estimate, dry = _row(out, "333 s pair reserve"), _row(out, "600 s dry bound")
    assert (estimate["total"], estimate["measurement_end"], dry["total"]) == ("80.8", "68.8", "85.2")
    assert abs(dry["total_min"] - 85.2) <= 0.05 and dry["fits"] is False
    assert abs(out["evidence"]["largest_reserve_s"] - 588) <= 6
    assert "fits while the measured pair reserve <= 588 s" in out["summary"]
    # a measured pair reserve under the bound fits; over it refuses
    code, out = _gate_budget(window, "--pair-reserve-s", "580")
    assert code == 0 and out["evidence"]["deciding_row"] == "580 s measured pair reserve"
    assert _gate_budget(window, "--pair-reserve-s", "595")[0] == 1
    assert tally("gate", "budget", window, "--pair-reserve-s", "-1").code == 2


def test_budget_reproduces_seed_003(site: Site) -> None:
    code, out = _gate_budget(_register(ABBA))
    assert code == 0
    ev = out["evidence"]
    assert abs(ev["rows"][0]["total_min"] - 69) <= 0.05 and ev["hard_ceiling_min"] == 75
    assert ev["stop_admitting_min"] == 50 and ev["restore_reserve_min"] == 12 and ev["per_block_limit_min"] == 11
    assert ev["per_block_min"] == {"A1": 11.0, "B1": 11.0, "B2": 11.0, "A2": 11.0}
    assert abs(ev["slack_min"] - 6) <= 0.05


def test_budget_refuses_a_block_over_its_limit() -> None:
    plan = load_plan(EXAMPLES / f"{ABBA}.toml")
    stages = tuple(s if s.start != "B2" else type(s)(s.name, s.kind, 12.0, s.start) for s in plan.budget.stages)
    report = budget_report(type(plan.budget)(**{**plan.budget.__dict__, "stages": stages}))
    assert report.verdict == "FAIL" and [c.name for c in report.checks if not c.ok] == ["per_block"]


# ---------------------------------------------------------------------- RNG


RNG_TESTS = tuple(load_plan(EXAMPLES / f"{PP}.toml").rng_tests)


def _receipts(tmp_path: Path, commit: str, kernel: str = "5e" * 32, verdict: str = "PASS",
              outcome: str = "passed", tests: tuple[str, ...] = RNG_TESTS) -> tuple[Path, Path]:
    rng = tmp_path / "rng.json"
    rng.write_text(json.dumps({"_type": "tally.rng-receipt/v1", "verdict": verdict, "commit": commit,
                               "kernel_sha256": kernel,
                               "tests": [{"name": name, "outcome": outcome} for name in tests]}))
    admission = tmp_path / "admission.json"
    admission.write_text(json.dumps({"_type": "tally.admission-receipt/v1", "verdict": "QUALIFIED",
                                     "commit": "85" * 20, "prepared_verifier_sha256": "5e" * 32}))
    return rng, admission


@pytest.mark.parametrize(("change", "expected"), [
    ({}, None),
    ({"verdict": "FAIL"}, "not PASS"),
    ({"outcome": "failed"}, "tests not passed"),
    ({"commit": "12" * 20}, "not HEAD"),
])
def test_rng_gate(site: Site, tmp_path: Path, change: dict, expected: str | None) -> None:
    window = _register(PP)
    reg = registered(site.book, window)
    assert reg is not None
    rng, admission = _receipts(tmp_path, **{"commit": reg.plan.commit, **change})
    result = tally("gate", "rng", window, "--receipt", rng, "--admission", admission, "--json")
    out = json.loads(result.out)
    if expected is None:
        assert result.code == 0 and out["verdict"] == "PASS"
        assert out["evidence"]["rng"]["kernel_sha256"] == out["evidence"]["admission"]["prepared_verifier_sha256"]
        assert out["evidence"]["required_tests"] == list(RNG_TESTS) and out["evidence"]["missing_tests"] == []
    else:
        assert result.code == 1 and expected in out["summary"]


def _rng(site: Site, tmp_path: Path, **change: object) -> tuple[int, dict]:
    window = _register(PP)
    reg = registered(site.book, window)
    assert reg is not None
    rng, admission = _receipts(tmp_path, **{"commit": reg.plan.commit, **change})  # type: ignore[arg-type]
    result = tally("gate", "rng", window, "--receipt", rng, "--admission", admission, "--json")
    return result.code, json.loads(result.out)


def test_seed_000_plans_register_the_ten_rng_tests() -> None:
    for name in (PP, CONTROLLED):
        tests = load_plan(EXAMPLES / f"{name}.toml").rng_tests
        assert len(tests) == 10 and sum(t.startswith("aud1_61161_") for t in tests) == 6
    assert load_plan(EXAMPLES / f"{ABBA}.toml").rng_tests == ()  # no RNG gate: the plan's digest is unchanged


def test_rng_receipt_missing_a_required_test_fails(site: Site, tmp_path: Path) -> None:
    dropped = RNG_TESTS[3], RNG_TESTS[8]
    code, out = _rng(site, tmp_path, tests=tuple(t for t in RNG_TESTS if t not in dropped))
    assert code == 1 and out["verdict"] == "FAIL"
    assert f"required tests missing from the receipt: {dropped[0]}, {dropped[1]}" in out["summary"]
    assert out["evidence"]["missing_tests"] == list(dropped)


def test_rng_receipt_with_no_tests_fails(site: Site, tmp_path: Path) -> None:
    code, out = _rng(site, tmp_path, tests=())
    assert code == 1 and "the RNG receipt lists no tests" in out["summary"]
    assert len(out["evidence"]["missing_tests"]) == 10


def test_rng_receipt_with_no_tests_fails_even_when_the_plan_registers_none() -> None:
    from runner.gates.receipts import AdmissionReceipt, RngReceipt
    from runner.gates.rng import check_rng

    admission = AdmissionReceipt("QUALIFIED", "85" * 20, "5e" * 32, None, "0" * 64, "a.json")
    empty = RngReceipt("PASS", "ab" * 20, "5e" * 32, (), "0" * 64, "r.json")
    assert check_rng(empty, admission, "ab" * 20).verdict == "FAIL"
    listed = RngReceipt("PASS", "ab" * 20, "5e" * 32, (("t", "passed"),), "0" * 64, "r.json")
    assert check_rng(listed, admission, "ab" * 20).verdict == "PASS"


def test_rng_kernel_sha_must_equal_the_admissions_prepared_verifier(site: Site, tmp_path: Path) -> None:
    code, out = _rng(site, tmp_path, kernel="77" * 32)
    assert code == 1 and "differs from the admission's prepared verifier" in out["summary"]
    assert out["evidence"]["admission"]["prepared_verifier_sha256"] == "5e" * 32
    code, out = _rng(site, tmp_path, kernel="5e" * 32)
    assert code == 0 and out["verdict"] == "PASS"


def test_plan_rng_tests_need_the_rng_gate() -> None:
    from ledger.errors import FieldError

    plan = load_plan(EXAMPLES / f"{ABBA}.toml").to_json()
    plan["gates"]["rng_tests"] = ["t1"]
    with pytest.raises(FieldError, match="rng gate is not required"):
        parse_plan(plan)


def test_rng_receipt_malformed_is_bad_input(site: Site, tmp_path: Path) -> None:
    window = _register(PP)
    rng, admission = _receipts(tmp_path, "ab" * 20)
    rng.write_text(json.dumps({"verdict": "PASS"}))
    size = site.size()
    result = tally("gate", "rng", window, "--receipt", rng, "--admission", admission)
    assert result.code == 2 and "commit: missing or malformed" in result.err and site.size() == size


# ---------------------------------------------------------------------- standard spec


def test_standard_spec(site: Site, tmp_path: Path) -> None:
    window = _register(PP)
    reg = registered(site.book, window)
    assert reg is not None
    declared = reg.plan.arm("P").speculative
    config = tmp_path / "spec.json"
    config.write_text(json.dumps(declared))
    ok = tally("gate", "standard-spec", window, "--start", "s1", "--config", f"@{config}", "--json")
    assert ok.code == 0, ok.err
    assert json.loads(ok.out)["evidence"]["config_sha256"] == reg.plan.arm("P").speculative_sha256
    typical = dict(declared, acceptance_method="typical_acceptance_sampler", posterior_threshold=0.09)
    bad = tally("gate", "standard-spec", window, "--start", "s3", "--config", json.dumps(typical), "--json")
    assert bad.code == 1 and "not standard rejection sampling" in json.loads(bad.out)["summary"]
    other = tally("gate", "standard-spec", window, "--start", "s2", "--config", json.dumps(declared), "--json")
    assert other.code == 1 and "differs from the plan's declared arm B config" in json.loads(other.out)["summary"]
    state = replay(site.book).windows[window]
    assert state.gates["standard_spec"].verdict == "FAIL"
    assert {s: g.verdict for s, g in (state.gates["standard_spec"].starts or {}).items()} == {
        "s1": "PASS", "s3": "FAIL", "s2": "FAIL"}
    size = site.size()
    assert tally("gate", "standard-spec", window, "--start", "s9", "--config", "{}").code == 2
    assert tally("gate", "standard-spec", window, "--start", "s1", "--config", "[1]").code == 2
    assert tally("gate", "standard-spec", window, "--start", "s1", "--config", "{nope").code == 2
    assert tally("gate", "standard-spec", "no-such-window", "--start", "s1", "--config", "{}").code == 2
    assert site.size() == size


# ---------------------------------------------------------------------- admission


def test_admitted_when_the_last_required_gate_passes(site: Site) -> None:
    window = _register(CONTROLLED)
    reg = registered(site.book, window)
    assert reg is not None
    refused = tally("window", "admit", window)
    assert refused.code == 1 and "qualification: no result" in refused.err and "budget: no result" in refused.err
    for gate in ("qualification", "rng", "rehearsal"):
        assert record_gate(site.book, site.signer, window, gate, "PASS", {}, commit=reg.plan.commit).admitted is None
    out = json.loads(tally("gate", "budget", window, "--json").out)
    assert out["admitted_seq"] == out["seq"] + 1
    admitted = site.book.get(out["admitted_seq"])
    assert admitted.type == "window.admitted" and set(admitted.payload["gates"]) == {
        "qualification", "rng", "rehearsal", "budget"}
    assert replay(site.book).windows[window].phase == "admitted"
    again = tally("window", "admit", window, "--json")
    assert again.code == 0 and json.loads(again.out) == {"window": window, "admitted_seq": out["admitted_seq"],
                                                         "already": True}


def test_pass_at_another_commit_does_not_admit(site: Site) -> None:
    window = _register(CONTROLLED)
    for gate in ("qualification", "rng", "rehearsal"):
        record_gate(site.book, site.signer, window, gate, "PASS", {}, commit="12" * 20)
    out = json.loads(tally("gate", "budget", window, "--json").out)
    assert out["verdict"] == "PASS" and out["admitted_seq"] is None
    refused = tally("window", "admit", window)
    assert refused.code == 1 and "not the plan's" in refused.err


def test_empty_required_gates_fail_closed() -> None:
    script = Script()
    plan = script.restoring_window()
    items = list(script.items[:1])
    plan_json = dict(items[0].payload["plan"], gates={"required": []})
    items[0] = edit(items[0], plan=plan_json)
    state = fold(None, script.materialize(items))
    assert admission_blockers(state, plan.window_id) == ["the plan requires no gate: refused (fail closed)"]


# ---------------------------------------------------------------------- chain prev-ok


def _chained_first(site: Site, *, drop_placeholder: bool = False) -> Script:
    script = Script()
    script.chain(2)
    script.items = script.items[: script.labels["chain-1:decided"] + 1]
    script.append_to(site.book, site.signer)
    if drop_placeholder:
        plan = registered(site.book, "chain-1")
        assert plan is not None
        from runner.events.catalogue import append_window_event

        append_window_event(site.book, site.signer, "chain-1", plan.plan_sha256, "placeholder.down",
                            {"host": "spark-b"})
    return script


def _prev_ok(window: str) -> tuple[int, dict]:
    result = tally("chain", "prev-ok", window, "--json")
    return result.code, json.loads(result.out)


def test_prev_ok_on_a_fresh_ledger(site: Site) -> None:
    code, out = _prev_ok(_register(PP))
    assert code == 0 and out["verdict"] == "PASS" and out["evidence"]["previous_window"] is None


def test_prev_ok_after_a_chained_close_admits_the_next_window(site: Site) -> None:
    _chained_first(site)
    window = _register(CONTROLLED, "--window-id", "chain-2")
    reg = registered(site.book, window)
    assert reg is not None
    for gate in reg.plan.required_gates:
        record_gate(site.book, site.signer, window, gate, "PASS", {}, commit=reg.plan.commit)
    state = replay(site.book)
    assert state.windows[window].admitted_seq is None  # the marker is set: chain_prev_ok is required too
    assert admission_blockers(state, window) == ["chain_prev_ok: no result"]
    code, out = _prev_ok(window)
    assert code == 0, out
    assert out["evidence"]["marker"]["window"] == "chain-1" and out["evidence"]["placeholders"] == ["spark-a",
                                                                                                    "spark-b"]
    state = replay(site.book)
    assert state.windows[window].phase == "admitted"
    assert site.book.get(state.windows[window].admitted_seq or 0).payload["under_marker"] is True


def test_prev_ok_refuses_and_aborts_the_chain(site: Site) -> None:
    _chained_first(site, drop_placeholder=True)
    window = _register(CONTROLLED, "--window-id", "chain-2")
    code, out = _prev_ok(window)
    assert code == 1 and "placeholder(s) down on spark-b" in out["summary"]
    aborted = site.book.get(out["chain_aborted_seq"])
    assert aborted.type == "chain.aborted" and aborted.payload["marker_window"] == "chain-1"
    code, again = _prev_ok(window)
    assert code == 1 and again["chain_aborted_seq"] is None  # the chain is aborted once
    assert replay(site.book).windows[window].phase == "closing"


def test_prev_ok_refuses_a_window_outside_the_chain(site: Site) -> None:
    _chained_first(site)
    window = _register(ABBA)  # chain = "none"
    code, out = _prev_ok(window)
    assert code == 1 and "is not a chain member" in out["summary"]


def test_prev_ok_without_marker_needs_a_restored_previous_window(site: Site) -> None:
    script = Script()
    script.restoring_window()
    script.append_to(site.book, site.signer)
    code, out = _prev_ok(_register(ABBA))
    assert code == 0 and out["evidence"]["previous_window"] == "pp4-win2-production-policy"
    # a previous window whose watch failed: refuse, and there is no chain to abort
    script = Script()
    plan = script.restoring_window("seed000-controlled", window_id="watch-failed")
    watch = next(i for i, item in enumerate(script.items) if item.type == "watch.result")
    script.items[watch] = edit(script.items[watch], verdict="FAIL")
    script.append_to(site.book, site.signer)
    window = _register(PP, "--window-id", "after-failed-watch")
    code, out = _prev_ok(window)
    assert code == 1 and f"window {plan.window_id} has no watch PASS" in out["summary"]
    assert out["chain_aborted_seq"] is None
