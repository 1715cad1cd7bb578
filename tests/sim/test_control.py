"""The host side (/_sim): drain, snapshot, start/stop arms, restore, watch, clock cap, thermal, placeholders."""

from __future__ import annotations

import httpx

import runner.sim as sim
from runner.sim import SimHandle

from .conftest import fast_config


def test_initial_state_serves_production(server: SimHandle) -> None:
    state = server.state()
    assert state["production"] == "up"
    assert state["engine"]["arm"] == "production" and state["engine"]["status"] == "ready"
    assert "clock cap 2300 MHz" in state["engine"]["log"]
    assert state["clock"] == {"production_cap_mhz": 2300, "start_cap_mhz": 2300, "current_mhz": 2300}


def test_window_host_sequence(server: SimHandle, http: httpx.Client) -> None:
    assert server.control("start_arm", arm="B", role="B")["status"] == 409  # production is up: drain first
    drained = server.control("drain")
    assert drained["ok"] and drained["production"] == "down"
    assert http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 2}).status_code == 503
    assert http.get(f"{server.url}/health").status_code == 503
    assert server.control("production_down_proof")["ok"]
    assert server.control("quiet_proof")["ok"]
    snap = server.control("snapshot")
    assert snap["ok"] and len(snap["sha256"]) == 64 and snap["identity"]["arm"] == "production"
    assert snap["sha256"] == server.state()["production_sha256"]

    started = server.control("start_arm", arm="B", role="B")
    assert started["ok"] and started["clock_cap_mhz"] == 2300 and "clock cap 2300 MHz" in started["log"]
    assert started["config_digest"] == sim.default_config().arm("B").digest()
    assert started["speculative_config"]["verification"] == "standard"
    assert server.control("start_arm", arm="A", role="A")["status"] == 409  # one arm at a time
    assert server.control("quiet_proof")["status"] == 409
    assert http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 2}).status_code == 200
    warm = server.control("warmup")
    assert warm["ok"] and warm["cold_ttft_s"] >= warm["warm_ttft_s"] > 0
    cap = server.control("read_clock_cap")
    assert cap["clock_cap_mhz"] == 2300 and cap["log_line"] == "clock cap 2300 MHz"
    assert server.control("stop_arm")["ok"]
    assert server.state()["engine"] is None

    assert server.control("restore", sha256="0" * 64)["status"] == 409  # strict: the snapshot's sha only
    restored = server.control("restore", sha256=snap["sha256"])
    assert restored["ok"] and restored["sha256"] == snap["sha256"]
    assert server.control("watch")["ok"]
    state = server.state()
    assert state["production"] == "up" and state["engine"]["arm"] == "production"
    assert [s["arm"] for s in state["starts"]] == ["production", "B", "production"]
    assert all(s["stopped_at"] for s in state["starts"][:2])
    assert [a["action"] for a in state["actions"] if a["ok"]][:3] == ["drain", "production_down_proof", "quiet_proof"]


def test_restore_without_snapshot_refused(server: SimHandle) -> None:
    server.control("drain")
    refused = server.control("restore")
    assert refused["status"] == 409 and "snapshot" in refused["error"]


def test_watch_fails_while_production_down(server: SimHandle) -> None:
    server.control("drain")
    assert server.control("watch")["status"] == 409


def test_slow_start_and_health(server: SimHandle, http: httpx.Client) -> None:
    server.control("drain")
    started = server.control("start_arm", arm="A", role="A", slow_start_s=0.3, wait=False)
    assert started["ok"]
    assert server.state()["engine"]["status"] == "starting"
    assert http.get(f"{server.url}/health").status_code == 503
    assert http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 2}).status_code == 503
    blocking = server.control("warmup")  # waits for the engine
    assert blocking["ok"] and server.state()["engine"]["status"] == "ready"


def test_thermal_dial_back_slows_steps_and_is_recorded(http: httpx.Client) -> None:
    config = fast_config(time_scale=0.02).with_arm("production", step_base_ms=50, step_per_token_ms=0)
    with sim.start(config) as host:
        def decode_s() -> float:
            before = host.truth()["next"]
            http.post(f"{host.url}/v1/completions", json={"prompt": "p", "max_tokens": 30, "ignore_eos": True,
                                                          "seed": 1})
            return float(host.truth(before)["totals"]["decode_s"])

        normal = decode_s()
        event = host.control("thermal", cap_mhz=1150)
        assert event["ok"] and event["event"]["from_mhz"] == 2300 and event["event"]["to_mhz"] == 1150
        slowed = decode_s()
        assert abs(slowed / normal - 2.0) < 1e-6
        state = host.state()
        assert state["thermal_events"][0]["kind"] == "dial_back" and state["clock"]["current_mhz"] == 1150
        assert host.control("read_clock_cap")["clock_cap_mhz"] == 2300  # the start's own log is unchanged


def test_placeholders_and_fences_per_host() -> None:
    with sim.start(fast_config(hosts=["spark-head", "spark-worker"])) as host:
        assert host.control("placeholder_proof")["status"] == 409
        assert host.control("placeholder_up", host="spark-head")["ok"]
        assert host.control("placeholder_proof")["status"] == 409
        assert host.control("placeholder_up", host="spark-worker")["ok"]
        assert host.control("placeholder_proof")["ok"]
        assert host.control("fence")["hosts"] == ["spark-head", "spark-worker"]
        assert host.control("placeholder_up", host="nope")["status"] == 400
        assert host.control("placeholder_down")["ok"]
        assert host.state()["placeholders"] == {"spark-head": False, "spark-worker": False}


def test_production_up_down(server: SimHandle) -> None:
    assert server.control("production", state="down")["production"] == "down"
    assert server.state()["engine"] is None
    assert server.control("production", state="up")["production"] == "up"
    assert server.state()["engine"]["arm"] == "production"
    assert server.control("production", state="sideways")["status"] == 400


def test_unknown_action_and_bad_body(server: SimHandle, http: httpx.Client) -> None:
    assert server.control("teleport")["status"] == 404
    response = http.post(f"{server.url}/_sim/drain", content=b"[1,", headers={"content-type": "application/json"})
    assert response.status_code == 400


def test_truth_endpoint_lists_requests(server: SimHandle, http: httpx.Client) -> None:
    http.post(f"{server.url}/v1/completions", json={"prompt": "p q", "max_tokens": 6, "ignore_eos": True, "seed": 3})
    truth = server.truth()
    (record,) = truth["requests"]
    assert record["status"] == "finished" and record["completion_tokens"] == 6 and record["seed"] == 3
    assert len(record["planned"]) == len(record["sent"]) == len(record["tokens"])
    assert all(s >= p - 1e-6 for s, p in zip(record["sent"], record["planned"], strict=True))
    only = http.get(f"{server.url}/_sim/truth", params={"request_id": record["request_id"]}).json()
    assert [r["seq"] for r in only["requests"]] == [1]
