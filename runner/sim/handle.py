"""Running a simulator: in this process (a thread) or as a child process.

``start(config)`` serves from a background thread and returns a :class:`SimHandle`;
``spawn(config)`` runs ``python -m runner.sim`` as a child process (for tests that kill
things) and returns a :class:`SimProcess`. Both are context managers and expose
``url`` (the serving endpoint, as a vLLM base URL), ``metrics_url`` and ``control_url``
(``/_sim``), and a small ``control(action, **args)`` client of the control API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from ledger.errors import ExternalError

from .config import SimConfig, default_config, load_config
from .server import SimServer

__all__ = ["SimHandle", "SimProcess", "resolve_config", "spawn", "start"]


def resolve_config(config: SimConfig | str | Path | None, *, seed: int | None = None,
                   time_scale: float | None = None) -> SimConfig:
    """A config object from an object, a file path or ``None`` (defaults), with overrides."""
    if config is None:
        resolved = default_config()
    elif isinstance(config, SimConfig):
        resolved = config
    else:
        resolved = load_config(config)
    changes: dict[str, Any] = {}
    if seed is not None:
        changes["seed"] = seed
    if time_scale is not None:
        changes["time_scale"] = time_scale
    return resolved.with_(**changes) if changes else resolved


class _Control:
    """The control API over HTTP (stdlib only, so it works from any process)."""

    url: str

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    @property
    def control_url(self) -> str:
        return f"{self.url}/_sim"

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
        """One request to the simulator: ``(status, parsed JSON body)``."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except OSError as exc:
            raise ExternalError(f"simulator at {self.url} did not answer: {exc}") from None
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def control(self, action: str, **args: Any) -> dict[str, Any]:
        """Run a host action; the answer as JSON (``ok`` false with ``error`` on refusal)."""
        status, body = self.call("POST", f"/_sim/{action}", args)
        if not isinstance(body, dict):
            return {"ok": False, "action": action, "status": status, "error": str(body)}
        return {**body, "status": status}

    def state(self) -> dict[str, Any]:
        return dict(self.call("GET", "/_sim/state")[1])

    def set_faults(self, **faults: Any) -> dict[str, Any]:
        status, body = self.call("POST", "/_sim/faults", faults)
        if status != 200:
            raise ValueError(f"faults refused: {body}")
        return dict(body)

    def clear_faults(self) -> None:
        self.call("DELETE", "/_sim/faults")

    def truth(self, after: int = 0) -> dict[str, Any]:
        return dict(self.call("GET", f"/_sim/truth?after={after}")[1])


class SimHandle(_Control):
    """A simulator serving from a thread of this process."""

    def __init__(self, server: SimServer, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread
        host, port = server.server_address[:2]
        self.host_name = str(host)
        self.port = int(port)
        self.url = f"http://{self.host_name}:{self.port}"

    @property
    def host(self) -> Any:
        """The simulated host (in-process access to its state and actions)."""
        return self.server.host

    @property
    def config(self) -> SimConfig:
        return self.server.config

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: cut streams and idle connections, release the port."""
        if self.server.stopping.is_set():
            return
        self.server.stopping.set()
        self.server.shutdown()
        self.server.close_connections()
        self.server.server_close()
        self.thread.join(timeout)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def start(config: SimConfig | str | Path | None = None, *, seed: int | None = None, host: str = "127.0.0.1",
          port: int = 0, time_scale: float | None = None) -> SimHandle:
    """Serve a simulator from a background thread; ``port=0`` picks a free port."""
    resolved = resolve_config(config, seed=seed, time_scale=time_scale)
    server = SimServer((host, port), resolved)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                              name=f"tally-sim-{server.server_address[1]}")
    thread.start()
    return SimHandle(server, thread)


class SimProcess(_Control):
    """A simulator serving from a child process (``python -m runner.sim``)."""

    def __init__(self, process: subprocess.Popen[str], url: str, config_file: Path | None) -> None:
        self.process = process
        self.url = url
        self._config_file = config_file

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        self._cleanup()
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL: the host dies without a word."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._cleanup()

    def _cleanup(self) -> None:
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self._config_file is not None:
            self._config_file.unlink(missing_ok=True)
            self._config_file = None

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def spawn(config: SimConfig | str | Path | None = None, *, seed: int | None = None, host: str = "127.0.0.1",
          port: int = 0, time_scale: float | None = None, startup_timeout: float = 20.0) -> SimProcess:
    """Run a simulator as a child process and wait until it serves."""
    config_file: Path | None = None
    args = [sys.executable, "-m", "runner.sim", "--host", host, "--port", str(port)]
    if isinstance(config, SimConfig):
        handle, name = tempfile.mkstemp(prefix="tally-sim-", suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(config.to_dict(), out)
        config_file = Path(name)
        args += ["--config", name]
    elif config is not None:
        args += ["--config", str(config)]
    if seed is not None:
        args += ["--seed", str(seed)]
    if time_scale is not None:
        args += ["--time-scale", repr(time_scale)]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
    url = _read_url(process, startup_timeout)
    if url is None:
        process.kill()
        process.wait(10)
        if config_file is not None:
            config_file.unlink(missing_ok=True)
        raise ExternalError(f"simulator process did not start (exit {process.returncode})")
    return SimProcess(process, url, config_file)


def _read_url(process: subprocess.Popen[str], timeout: float) -> str | None:
    found: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("tally sim: serving "):
                found.append(line.split()[3])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return found[0] if found else None
