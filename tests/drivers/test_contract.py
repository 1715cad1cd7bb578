"""The host-driver contract: one test class, run against the command-template driver and the simulator driver.

Each test gets a fresh site (a state directory with statehost.sh, or a simulator on
127.0.0.1 stopped after the test) and checks what a window runner relies on: the facts
each action establishes, refusals, failures, timeouts and re-probing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.errors import FormatError
from runner.drivers import ACTIONS, PER_HOST_ACTIONS, ActionResult, HostDriver
from runner.drivers.base import CLOSE_ACTIONS

from .rigs import ARM_B_CAP, PRODUCTION_CAP, CommandsRig, SimRig

HEX64 = re.compile(r"[0-9a-f]{64}")
Rig = CommandsRig | SimRig


@pytest.fixture(params=["commands", "sim"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    made: Rig = CommandsRig(tmp_path) if request.param == "commands" else SimRig(tmp_path)
    try:
        yield made
    finally:
        made.close()


def ok(driver: HostDriver, action: str, host: str | None = None, **params: object) -> ActionResult:
    result = driver.run(action, host, params)
    assert result.ok, f"{action} failed: {result.facts.get('error')} / {result.stderr!r}"
    assert result.exit_code == 0 and not result.timed_out
    assert result.action == action and result.host == host
    return result


def refused(driver: HostDriver, action: str, host: str | None = None, **params: object) -> ActionResult:
    result = driver.run(action, host, params)
    assert not result.ok, f"{action} should have failed: {result.facts}"
    assert result.exit_code not in (None, 0) and not result.timed_out
    assert isinstance(result.facts.get("error"), str) and result.facts["error"]
    return result


def drain_and_start_b(driver: HostDriver) -> str:
    snapshot = ok(driver, "snapshot").facts["snapshot_sha256"]
    ok(driver, "drain")
    ok(driver, "start_arm", arm="B", role="B", window="w1", start="s2")
    return str(snapshot)


class TestHostDriverContract:
    def test_site_shape(self, rig: Rig) -> None:
        driver = rig.driver
        assert isinstance(driver, HostDriver)
        assert driver.kind == rig.kind
        assert driver.hosts == (rig.head, rig.worker)
        assert dict(driver.host_roles) == {rig.head: "head", rig.worker: "worker"}
        assert driver.serving_url.startswith("http://127.0.0.1:")
        assert driver.metrics_urls and all(u.endswith("/metrics") for u in driver.metrics_urls)
        assert driver.production_clock_cap_mhz == PRODUCTION_CAP
        # the simulator has no pair to close and no scoped HOLD to stash; neither rig lists its arms by
        # an action (the simulator's config lists them; statehost.sh has list_arms only when asked)
        assert driver.actions == frozenset(ACTIONS) - (CLOSE_ACTIONS if rig.kind == "sim" else frozenset()) \
            - {"list_arms"}
        assert all(driver.timeout_s(a) > 0 for a in driver.actions)
        assert rig.make({"drain": 7.5}).timeout_s("drain") == 7.5

    def test_preflight_and_probe_see_production_serving(self, rig: Rig) -> None:
        for action in ("preflight", "probe"):
            result = ok(rig.driver, action)
            assert result.facts["serving"] == "up"
            assert result.facts["arm"] == "production" and result.facts["role"] == "production"
            assert result.facts["placeholders"] == []
            assert HEX64.fullmatch(result.facts["production_sha256"])
            assert isinstance(result.stdout, bytes) and result.stdout
            assert result.duration_s >= 0

    def test_drain_then_production_down_proof(self, rig: Rig) -> None:
        driver = rig.driver
        before = refused(driver, "production_down_proof")
        assert "up" in before.facts["error"]
        assert ok(driver, "drain").facts["serving"] == "down"
        assert ok(driver, "production_down_proof").facts["serving"] == "down"
        assert ok(driver, "probe").facts["serving"] == "down"
        assert ok(driver, "drain").facts["serving"] == "down"  # draining a drained site is a no-op

    def test_snapshot_then_restore_to_the_same_sha(self, rig: Rig) -> None:
        driver = rig.driver
        production = ok(driver, "preflight").facts["production_sha256"]
        snapshot = drain_and_start_b(driver)
        assert snapshot == production
        refused(driver, "restore", snapshot_sha256="0" * 64)  # strict: only the snapshot's sha
        ok(driver, "stop_arm")
        restored = ok(driver, "restore", snapshot_sha256=snapshot)
        assert restored.facts["snapshot_sha256"] == snapshot and restored.facts["serving"] == "up"
        assert restored.facts["clock_cap_mhz"] == PRODUCTION_CAP
        probe = ok(driver, "probe").facts
        assert probe["serving"] == "up" and probe["arm"] == "production" and probe["production_sha256"] == snapshot
        assert ok(driver, "watch").facts["watch"] == "PASS"

    def test_start_arm_then_read_clock_cap_gives_the_arms_cap(self, rig: Rig) -> None:
        driver = rig.driver
        refused(driver, "start_arm", arm="B", role="B")  # production is up: drain first
        drain_and_start_b(driver)
        started = ok(driver, "probe").facts
        assert started["arm"] == "B" and started["role"] == "B" and started["engine"] == "ready"
        cap = ok(driver, "read_clock_cap").facts
        assert cap["clock_cap_mhz"] == ARM_B_CAP and cap["clock_cap_mhz"] != driver.production_clock_cap_mhz
        assert cap["log_line"] == f"clock cap {ARM_B_CAP} MHz"
        warm = ok(driver, "warmup").facts
        assert isinstance(warm["ttft_cold_s"], float) and warm["ttft_cold_s"] >= warm["ttft_warm_s"] > 0
        assert ok(driver, "stop_arm").facts["arm"] == "B"
        assert ok(driver, "probe").facts["arm"] is None
        refused(driver, "read_clock_cap")  # no engine, no clock cap

    def test_read_thermal_reports_a_dial_back_that_recovered(self, rig: Rig) -> None:
        from runner.gates.clocks import new_dial_backs

        driver = rig.driver
        drain_and_start_b(driver)
        assert ok(driver, "read_thermal").facts["dial_backs"] == []
        rig.dial_back_and_recover(1500)
        facts = ok(driver, "read_thermal").facts
        assert facts["current_clock_mhz"] == ARM_B_CAP              # recovered: the clock now says nothing
        found = new_dial_backs(facts, ARM_B_CAP, set())
        assert [(d["clock_mhz"], d["from_mhz"]) for d in found] == [(1500, ARM_B_CAP)]
        assert new_dial_backs(facts, ARM_B_CAP, {(d["host"], d["seq"]) for d in found}) == []   # recorded once

    def test_read_clock_cap_gives_every_hosts_own_line(self, rig: Rig) -> None:
        from runner.gates.clocks import read_caps

        driver = rig.driver
        rig.disagree(rig.worker, 2000)
        drain_and_start_b(driver)
        split = read_caps(ok(driver, "read_clock_cap").facts, driver.hosts)
        assert split.hosts[rig.worker]["clock_cap_mhz"] == 2000
        assert any("the hosts disagree on the clock cap" in p for p in split.problems)

    def test_placeholders_up_proof_down(self, rig: Rig) -> None:
        driver = rig.driver
        refused(driver, "placeholder_proof", rig.head)
        for host in driver.hosts:
            assert host in ok(driver, "placeholder_up", host).facts["placeholders"]
        for host in driver.hosts:
            assert host in ok(driver, "placeholder_proof", host).facts["placeholders"]
        assert ok(driver, "preflight").facts["placeholders"] == sorted(driver.hosts)
        down = ok(driver, "placeholder_down", rig.head).facts
        assert down["placeholders"] == [rig.worker]
        refused(driver, "placeholder_proof", rig.head)
        ok(driver, "placeholder_proof", rig.worker)
        ok(driver, "placeholder_down", rig.worker)
        assert ok(driver, "probe").facts["placeholders"] == []

    def test_chained_close_actions(self, rig: Rig) -> None:
        driver = rig.driver
        drain_and_start_b(driver)
        for host in driver.hosts:
            ok(driver, "placeholder_up", host)
        for host in driver.hosts:
            assert host in ok(driver, "fence", host).facts["fenced"]
        refused(driver, "quiet_proof")  # the experiment engine still runs
        ok(driver, "experiment_stop")
        assert ok(driver, "quiet_proof").facts["quiet"] is True
        assert ok(driver, "production_down_proof").facts["serving"] == "down"
        for host in driver.hosts:
            ok(driver, "placeholder_proof", host)
        state = ok(driver, "probe").facts
        assert state["serving"] == "down" and state["arm"] is None
        assert state["placeholders"] == sorted(driver.hosts) and state["fenced"] == sorted(driver.hosts)

    def test_watch_fails_while_down_and_passes_after_restore(self, rig: Rig) -> None:
        driver = rig.driver
        snapshot = ok(driver, "snapshot").facts["snapshot_sha256"]
        ok(driver, "drain")
        failed = refused(driver, "watch")
        assert failed.facts["watch"] == "FAIL"
        ok(driver, "restore", snapshot_sha256=snapshot)
        passed = ok(driver, "watch")
        assert passed.facts["watch"] == "PASS" and passed.facts["serving"] == "up"

    def test_injected_failure_is_a_failed_result_not_an_exception(self, rig: Rig) -> None:
        driver = rig.driver
        rig.fail_next("drain")
        failed = refused(driver, "drain")
        assert failed.stderr  # the failure's words are kept
        assert ok(driver, "probe").facts["serving"] == "up"  # nothing happened
        assert ok(driver, "drain").facts["serving"] == "down"  # the fault was used once

    def test_timeout_cuts_the_action_off(self, rig: Rig) -> None:
        driver = rig.make({"start_arm": 0.5})
        ok(driver, "drain")
        params = rig.hang_next("start_arm")
        result = driver.run("start_arm", None, {"arm": "B", "role": "B", **params})
        assert result.timed_out and not result.ok and result.exit_code is None
        assert 0.5 <= result.duration_s < 3.0
        assert "timed out" in result.facts["error"] or "did not answer" in result.facts["error"]
        rig.assert_hang_cleaned()

    def test_probe_after_an_interrupted_start(self, rig: Rig) -> None:
        driver = rig.make({"start_arm": 0.3})
        ok(driver, "drain")
        params = rig.hang_next("start_arm")
        assert driver.run("start_arm", None, {"arm": "B", "role": "B", **params}).timed_out
        # a new runner does not know whether the start happened: the probe tells it
        probe = ok(rig.make(), "probe").facts
        assert probe["serving"] == "down" and probe["arm"] == "B" and probe["role"] == "B"
        assert probe["engine"] in ("starting", "ready")
        ok(driver, "stop_arm")
        assert ok(driver, "probe").facts["arm"] is None

    def test_programming_errors_raise(self, rig: Rig) -> None:
        driver = rig.driver
        with pytest.raises(FormatError, match="unknown host action 'reboot'"):
            driver.run("reboot", None, {})
        with pytest.raises(FormatError, match="unknown host 'nope'"):
            driver.run("fence", "nope", {})
        assert ok(driver, "probe").facts["serving"] == "up"

    def test_per_host_actions_take_each_host(self, rig: Rig) -> None:
        for action in sorted(PER_HOST_ACTIONS - {"placeholder_proof"}):
            for host in rig.driver.hosts:
                assert ok(rig.driver, action, host).host == host

    def test_result_is_a_frozen_value(self, rig: Rig) -> None:
        result = ok(rig.driver, "probe")
        with pytest.raises(dataclasses.FrozenInstanceError):
            result.ok = False  # type: ignore[misc]
        summary = result.summary()
        assert set(summary) == {"action", "host", "ok", "exit_code", "duration_s", "timed_out", "facts"}
        assert summary["facts"] == result.facts
