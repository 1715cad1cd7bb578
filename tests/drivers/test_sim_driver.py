"""The simulator driver on its own: reaching the simulator, its config, answers it refuses."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import runner.sim as sim
from ledger.errors import ExternalError, FormatError
from runner.drivers import SimDriver
from runner.drivers.site import load_site

from .rigs import ARM_B_CAP, sim_config


@pytest.fixture
def handle() -> Iterator[sim.SimHandle]:
    with sim.start(sim_config(), seed=5) as started:
        yield started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_simulator_that_does_not_answer_raises_external_error() -> None:
    driver = SimDriver(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ExternalError, match="did not answer"):
        driver.run("probe", None, {})
    with pytest.raises(ExternalError, match="did not answer"):
        _ = driver.hosts


def test_hosts_and_cap_come_from_the_simulator(handle: sim.SimHandle, tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(f'kind = "sim"\nurl = "{handle.url}/"\n')
    loaded = load_site(site)
    in_process = SimDriver.for_handle(handle)
    for driver in (loaded, in_process):
        assert driver.hosts == ("sim-head", "sim-worker")
        assert driver.production_clock_cap_mhz == 2300
        assert driver.serving_url == handle.url and driver.metrics_urls == (f"{handle.url}/metrics",)
    site.write_text(f'kind = "sim"\nurl = "{handle.url}"\nhosts = ["a", "b"]\nproduction_clock_cap_mhz = 2150\n')
    given = load_site(site)
    assert given.hosts == ("a", "b") and given.production_clock_cap_mhz == 2150


def test_refusals_carry_the_http_status_and_the_simulators_words(handle: sim.SimHandle) -> None:
    driver = SimDriver.for_handle(handle)
    assert driver.run("drain", None, {}).ok
    unknown = driver.run("start_arm", None, {"arm": "Z", "role": "B"})
    assert not unknown.ok and unknown.exit_code == 400 and "unknown arm 'Z'" in unknown.facts["error"]
    assert json.loads(unknown.stdout)["ok"] is False and b"unknown arm" in unknown.stderr
    with pytest.raises(FormatError, match=r"params\['arm'\]"):
        driver.run("start_arm", None, {"role": "B"})
    started = driver.run("start_arm", None, {"arm": "B", "role": "B"})
    assert started.ok and started.facts["clock_cap_mhz"] == ARM_B_CAP
    assert started.facts["config_digest"] == sim_config().arm("B").digest()
    assert handle.state()["engine"]["arm"] == "B"
    handle.set_faults(action_fail={"action": "stop_arm", "status": 503})
    failed = driver.run("experiment_stop", None, {})  # experiment_stop is the simulator's stop_arm
    assert not failed.ok and failed.exit_code == 503
    assert driver.run("experiment_stop", None, {}).ok and handle.state()["engine"] is None
    driver.close()
    assert driver.run("probe", None, {}).facts["arm"] is None  # usable again after close


def test_knobs_reach_the_simulator(handle: sim.SimHandle) -> None:
    driver = SimDriver.for_handle(handle)
    driver.run("drain", None, {})
    started = driver.run("start_arm", None, {"arm": "A", "role": "A", "sim": {"slow_start_s": 0.4, "wait": False}})
    assert started.ok and driver.run("probe", None, {}).facts["engine"] == "starting"
    with pytest.raises(FormatError, match="knobs"):
        driver.run("restore", None, {"sim": 3})


def test_the_driver_keeps_one_connection_alive_and_closes_it_with_itself(handle: sim.SimHandle) -> None:
    opened: list[bool] = []
    track = handle.server.track

    def counted(conn: socket.socket, alive: bool) -> None:
        opened.append(alive)
        track(conn, alive)

    handle.server.track = counted  # type: ignore[method-assign]
    driver = SimDriver.for_handle(handle)
    for _ in range(5):
        assert driver.run("probe", None, {}).ok
        assert driver.run("read_thermal", None, {}).ok
    assert opened == [True]  # ten calls, one connection
    driver.close()
    deadline = time.monotonic() + 5
    while len(opened) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert opened == [True, False]  # closed with the driver


def test_a_restarted_simulator_on_the_same_port_is_reached_on_a_fresh_connection() -> None:
    port = free_port()
    first = sim.start(sim_config(), seed=5, port=port)
    driver = SimDriver(first.url)
    try:
        assert driver.run("probe", None, {}).ok
        first.stop()
        with sim.start(sim_config(), seed=5, port=port) as second:
            assert second.url == first.url
            result = driver.run("probe", None, {})
            assert result.ok, result.facts  # the dropped kept-alive connection was replaced, not used
    finally:
        first.stop()
        driver.close()
