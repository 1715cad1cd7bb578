"""Serving as a process: `tally sim serve` prints its URL and stops cleanly on SIGTERM/SIGINT; kill is abrupt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import runner.sim as sim
from ledger.errors import ExternalError

TALLY = Path(sys.executable).parent / "tally"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_tally_sim_serve_stops_cleanly(sig: signal.Signals) -> None:
    process = subprocess.Popen([str(TALLY), "sim", "serve", "--port", "0", "--seed", "3", "--time-scale", "0.01"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("tally sim: serving http://127.0.0.1:")
        url = line.split()[3]
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        process.send_signal(sig)
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "tally sim: stopped" in out and "Traceback" not in err
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)


def test_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("time_scale = -1\n")
    result = subprocess.run([str(TALLY), "sim", "serve", "--config", str(config)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip() == f"tally: {config}: time_scale: must be > 0, got -1"


def test_spawned_process_and_kill() -> None:
    host = sim.spawn(sim.default_config().with_(time_scale=0.01), seed=5)
    try:
        assert host.state()["production"] == "up"
        assert httpx.post(f"{host.url}/v1/completions", json={"prompt": "p", "max_tokens": 3}, timeout=10).is_success
        pid = host.pid
    finally:
        host.kill()
    assert host.process.returncode == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ExternalError):
        host.state()


def test_sim_config_prints_defaults() -> None:
    result = subprocess.run([str(TALLY), "sim", "config"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "[arms.production]" in result.stdout
