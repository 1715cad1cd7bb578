"""Injectable faults: 5xx, stalls, drops, slow TTFT, error frames, metrics down, host actions, clock caps."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import httpx
import pytest

import runner.sim as sim
from ledger.errors import FormatError
from runner.sim import SimHandle
from runner.sim.server import CATCH_UP

from .test_api import stream

BODY = {"prompt": "p", "max_tokens": 30, "ignore_eos": True, "stream": True}


def test_http_5xx_next_n(server: SimHandle, http: httpx.Client) -> None:
    server.set_faults(http_5xx={"count": 2, "status": 503})
    codes = [http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 2}).status_code
             for _ in range(3)]
    assert codes == [503, 503, 200]
    assert server.state()["faults"] == {}


def test_5xx_body_is_vllm_error(server: SimHandle, http: httpx.Client) -> None:
    server.set_faults(http_5xx={"count": 1})
    body = http.post(f"{server.url}/v1/completions", json={"prompt": "p"}).json()
    assert body["error"]["code"] == 500 and body["error"]["type"] == "InternalServerError"


def test_stall_mid_stream(server: SimHandle, http: httpx.Client) -> None:
    server.set_faults(stall={"after_chunks": 3, "seconds": 0.3})
    times = []
    sent = time.perf_counter()
    with http.stream("POST", f"{server.url}/v1/completions", json=BODY) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # the stall is on the stream's own schedule: the fourth chunk is not due before 0.3 s after the request; a
    # third chunk that left late may shorten the gap itself, to no less than the server's catch-up share of it
    assert times[3] - sent >= 0.3
    assert max(gaps) >= 0.3 * CATCH_UP and gaps.index(max(gaps)) == 2


def test_drop_mid_stream(server: SimHandle, http: httpx.Client) -> None:
    server.set_faults(drop={"after_chunks": 4})
    received = 0
    with pytest.raises(httpx.RemoteProtocolError), http.stream("POST", f"{server.url}/v1/completions",
                                                               json=BODY) as response:
        for line in response.iter_lines():
            received += line.startswith("data: {")
    assert received == 4
    record = server.truth()["requests"][-1]
    assert record["status"] == "aborted" and len(record["sent"]) == 4


def test_slow_ttft(server: SimHandle, http: httpx.Client) -> None:
    server.set_faults(slow_ttft={"seconds": 0.25})
    start = time.perf_counter()
    http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 1})
    assert time.perf_counter() - start >= 0.25


def test_error_frame_mid_stream(server: SimHandle, http: httpx.Client) -> None:
    server.set_faults(error_frame={"after_chunks": 2, "message": "engine died"})
    status, data = stream(http, f"{server.url}/v1/completions", BODY)
    assert status == 200 and len(data) == 4
    assert data[2]["error"]["message"] == "engine died" and data[3] == "[DONE]"


def test_metrics_down(server: SimHandle, http: httpx.Client) -> None:
    server.set_faults(metrics_down=True)
    assert http.get(f"{server.url}/metrics").status_code == 503
    server.set_faults(metrics_down=False)
    assert http.get(f"{server.url}/metrics").status_code == 200


def test_host_action_failure(server: SimHandle) -> None:
    server.set_faults(action_fail={"action": "drain", "count": 1})
    failed = server.control("drain")
    assert failed["status"] == 500 and failed["error"] == "injected failure of drain"
    assert server.state()["production"] == "up"  # nothing happened
    assert server.control("drain")["ok"]


def test_clock_cap_mismatch_next_start(server: SimHandle) -> None:
    server.set_faults(clock_cap_mismatch={"cap_mhz": 2150})
    server.control("drain")
    first = server.control("start_arm", arm="A", role="A")
    assert first["clock_cap_mhz"] == 2150 and "clock cap 2150 MHz" in first["log"]
    server.control("stop_arm")
    assert server.control("start_arm", arm="A", role="A")["clock_cap_mhz"] == 2300


def test_faults_from_config_and_clear(tmp_path: Path, http: httpx.Client) -> None:
    config = tmp_path / "sim.toml"
    config.write_text('time_scale = 0.05\n[faults]\nmetrics_down = true\nhttp_5xx = { count = 1, status = 502 }\n')
    with sim.start(config) as host:
        assert http.get(f"{host.url}/metrics").status_code == 503
        host.clear_faults()
        assert http.get(f"{host.url}/metrics").status_code == 200
        assert http.post(f"{host.url}/v1/completions", json={"prompt": "p", "max_tokens": 1}).status_code == 200


def test_bad_fault_refused(server: SimHandle, http: httpx.Client) -> None:
    response = http.post(f"{server.url}/_sim/faults", json={"stall": {"seconds": -1}})
    assert response.status_code == 400 and "stall.seconds" in response.json()["error"]
    with pytest.raises(FormatError, match="unknown fault"):
        sim.config_from_dict({"faults": {"meteor": True}})


def test_a_client_that_resets_its_connection_prints_no_traceback(server: SimHandle,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A client gone mid-request (a reset keep-alive socket) is no server error: nothing on stderr, and the
    server answers the next request."""
    import socket
    import struct

    for _ in range(3):
        conn = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        conn.sendall(b"GET /v1/mod")   # a request line cut short, then an RST (linger 0)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    time.sleep(0.3)
    assert httpx.get(f"{server.url}/v1/models", timeout=10).status_code == 200
    assert "Traceback" not in capsys.readouterr().err
