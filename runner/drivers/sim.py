"""The simulator driver (``kind = "sim"``): each host action is a call to the simulator's control API.

``POST /_sim/<action>`` for the actions the simulator has; ``preflight`` and ``probe``
read ``GET /_sim/state``; ``experiment_stop`` is the simulator's ``stop_arm`` (the
simulated host has one engine). A 200 answer is a success; any other status is a
failed action whose ``exit_code`` is the HTTP status (409 a refusal or a negative
proof, 500 an injected failure, 400 a request the simulator cannot serve, such as an
unknown arm) and whose ``facts["error"]`` is the simulator's message. A call cut off at
the action's timeout is ``timed_out``; a simulator that cannot be reached at all raises
``ExternalError``.

Simulator-only knobs for tests and demos travel in ``params["sim"]`` (a table merged
into the request body, e.g. ``{"slow_start_s": 3.0}`` for ``start_arm`` and ``restore``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

from ledger.errors import ExternalError, FormatError

from ..vocabulary import CounterSourceName
from .base import (
    ACTIONS,
    CLOSE_ACTIONS,
    DEFAULT_TIMEOUTS_S,
    ActionResult,
    ServedArm,
    check_action,
    settle,
)

__all__ = ["SimDriver"]

# Our action -> the simulator's (None: read GET /_sim/state).
_ROUTES: Mapping[str, str | None] = {
    **{action: action for action in ACTIONS}, "preflight": None, "probe": None, "experiment_stop": "stop_arm",
}


_CONNECT_TIMEOUT_S = 10.0
_HOST_IDENTITIES = ("worker_identity", "markov_identity", "experiment_commit", "worker_tree")   # as the plan's


def _served(name: str, said: Mapping[str, Any] | None) -> ServedArm:
    """A simulator arm and what its start reports (``said``: the config's ``reported`` member of it)."""
    if said is None:
        return ServedArm(name)
    digest, spec = said.get("config_digest"), said.get("speculative_config")
    return ServedArm(name, digest if isinstance(digest, str) else None, spec if isinstance(spec, dict) else None,
                     "speculative_config" in said and (spec is None or isinstance(spec, dict)))


def _roles(hosts: tuple[str, ...]) -> dict[str, str]:
    return {name: "head" if index == 0 else "worker" for index, name in enumerate(hosts)}


class SimDriver:
    """Drives a simulator (``runner.sim``) at ``url`` through ``/_sim``."""

    kind = "sim"
    allow_unreachable: Mapping[str, tuple[str, ...]] = {}   # mode -> hosts (the site file's table)

    def __init__(self, url: str, *, timeouts: Mapping[str, float] | None = None,
                 hosts: tuple[str, ...] | None = None, production_clock_cap_mhz: int | None = None,
                 clocks: bool = True, counter_source: CounterSourceName = "vllm") -> None:
        self.url = url.rstrip("/")
        self._clocks = clocks
        self._counter_source: CounterSourceName = counter_source
        self._timeouts = {**DEFAULT_TIMEOUTS_S, **(timeouts or {})}
        self._hosts = hosts
        self._cap = production_clock_cap_mhz
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._arms: dict[str, ServedArm] | None = None

    @classmethod
    def for_handle(cls, handle: Any, *, timeouts: Mapping[str, float] | None = None,
                   counter_source: CounterSourceName = "vllm") -> SimDriver:
        """A driver for a simulator started in this process (``runner.sim.start``) or as a child."""
        config = getattr(handle, "config", None)
        hosts = cap = None
        if config is not None:
            hosts = tuple(config.hosts)
            cap = int(config.arm(config.production_arm).clock_cap_mhz)
        return cls(handle.url, timeouts=timeouts, hosts=hosts, production_clock_cap_mhz=cap,
                   counter_source=counter_source)

    # ------------------------------------------------------------------ the site

    def _config(self) -> None:
        """Hosts and production's clock cap from ``GET /_sim/config`` (once, when not given)."""
        status, body = self._call("GET", "/_sim/config", None, 30.0)
        if status != 200 or not isinstance(body, dict):
            raise ExternalError(f"simulator at {self.url} did not give its config (HTTP {status})")
        self._hosts = self._hosts or tuple(body["hosts"])
        arms = body.get("arms")
        if not isinstance(arms, dict) or not all(isinstance(name, str) for name in arms):
            raise ExternalError(f"simulator at {self.url} gave a config without its arms")
        reported = body.get("reported")   # absent from an older simulator: the names alone
        self._arms = {}
        for name in list(arms)[:1000]:
            said = reported.get(name) if isinstance(reported, dict) else None
            self._arms[name[:200]] = _served(name[:200], said if isinstance(said, dict) else None)
        if self._cap is None:
            self._cap = int(arms[body["production_arm"]]["clock_cap_mhz"])

    @property
    def hosts(self) -> tuple[str, ...]:
        if self._hosts is None:
            self._config()
        assert self._hosts is not None
        return self._hosts

    @property
    def host_roles(self) -> Mapping[str, str]:
        return _roles(self.hosts)

    @property
    def serving_url(self) -> str:
        return self.url

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        return (f"{self.url}/metrics",)

    @property
    def counter_source(self) -> CounterSourceName:
        return self._counter_source

    @property
    def production_clock_cap_mhz(self) -> int | None:
        if not self._clocks:
            return None
        if self._cap is None:
            self._config()
        assert self._cap is not None
        return self._cap

    @property
    def clocks(self) -> bool:
        return self._clocks

    def served_arms(self) -> Mapping[str, ServedArm] | None:
        """The arms the simulator is configured with (``GET /_sim/config``; the production arm among them),
        each with the config digest and speculative config its start reports (the config's ``reported``)."""
        if self._arms is None:
            self._config()
        return self._arms

    @property
    def actions(self) -> frozenset[str]:
        # no pair to close, no scoped HOLD; its arms come from its config, not from an action
        return frozenset(ACTIONS) - CLOSE_ACTIONS - {"list_arms"}

    def timeout_s(self, action: str) -> float:
        check_action(self, action, None)
        return self._timeouts[action]

    # ------------------------------------------------------------------ running

    def close(self) -> None:
        """Release the HTTP client and its kept-alive connection (the driver makes a new one if used again)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _call(self, method: str, path: str, body: Any, timeout_s: float) -> tuple[int, Any]:
        with self._lock:
            if self._client is None:
                # one client (building one costs ~25 ms) and one kept-alive connection (a fresh one
                # costs ~5 ms a call). A connection the simulator dropped (it stopped, restarted) is
                # seen closed when taken from the pool and replaced; one dropped while a call was
                # on it is a broken-off call: outcome unknown, probed, as for any host.
                self._client = httpx.Client(limits=httpx.Limits(max_keepalive_connections=2))
            client = self._client
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, _CONNECT_TIMEOUT_S))
        try:
            response = client.request(method, f"{self.url}{path}", json=body, timeout=timeout)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ExternalError(f"simulator at {self.url} did not answer: {type(exc).__name__}: {exc}") from None
        try:
            return response.status_code, response.json() if response.content else None
        except ValueError:
            return response.status_code, response.text

    def _body(self, action: str, host: str | None, params: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if host is not None:
            body["host"] = host
        if action == "start_arm":
            if not isinstance(params.get("arm"), str):
                raise FormatError("sim action start_arm: params['arm'] (the arm's name) is required")
            body["arm"] = params["arm"]
            body["role"] = params.get("role", params["arm"])
        elif action in ("restore", "restore_check") and params.get("snapshot_sha256") is not None:
            body["sha256"] = params["snapshot_sha256"]
            if isinstance(params.get("snapshot_identity"), Mapping):
                body["identity"] = dict(params["snapshot_identity"])
        elif action == "placeholder_proof":
            body.update({k: params[k] for k in ("expected_tag", "expected_commit") if isinstance(params.get(k), str)})
        elif action == "warmup":
            if isinstance(params.get("engine_sampling"), Mapping):
                body["engine_sampling"] = dict(params["engine_sampling"])   # the warm-up's requests carry them
            if params.get("endpoint") == "chat":
                body["endpoint"] = "chat"   # and go to the waves' API
        elif action == "drain":
            # let the simulator give up on in-flight requests before our call times out
            body["timeout_s"] = max(0.0, self._timeouts["drain"] * 0.8)
        knobs = params.get("sim")
        if knobs is not None:
            if not isinstance(knobs, Mapping):
                raise FormatError("sim action params['sim'] must be a table of simulator knobs")
            body.update(knobs)
        return body

    def run(self, action: str, host: str | None, params: Mapping[str, Any]) -> ActionResult:
        check_action(self, action, host)
        route = _ROUTES[action]
        timeout = self._timeouts[action]
        body = None if route is None else self._body(action, host, params)
        began = time.monotonic()
        try:
            if route is None:
                status, answer = self._call("GET", "/_sim/state", None, timeout)
            else:
                status, answer = self._call("POST", f"/_sim/{route}", body, timeout)
        except httpx.TimeoutException:
            message = f"{action}: the simulator did not answer within {timeout:g} s"
            ok, facts = settle(action, host, params, False, {"error": message})
            return ActionResult(action, host, ok, None, time.monotonic() - began, True, b"",
                                message.encode("utf-8"), facts)
        except httpx.TransportError as exc:
            message = f"{action}: the call broke off ({type(exc).__name__}: {exc}); outcome unknown, probe"
            ok, facts = settle(action, host, params, False, {"error": message})
            return ActionResult(action, host, ok, None, time.monotonic() - began, False, b"",
                                message.encode("utf-8"), facts)
        duration = time.monotonic() - began
        stdout = json.dumps(answer, sort_keys=True, indent=1).encode("utf-8") + b"\n"
        answer = answer if isinstance(answer, dict) else {"error": str(answer)}
        if status == 200:
            facts = _state_facts(answer) if route is None else _facts(action, host, answer)
            ok, facts = settle(action, host, params, True, facts)
            return ActionResult(action, host, ok, 0, duration, False, stdout, b"", facts)
        message = str(answer.get("error") or f"HTTP {status}")
        ok, facts = settle(action, host, params, False, {"error": message})
        return ActionResult(action, host, ok, status, duration, False, stdout, message.encode("utf-8") + b"\n", facts)


def _present(placeholders: Any) -> list[str]:
    return sorted(h for h, up in placeholders.items() if up) if isinstance(placeholders, dict) else []


def _clock_line(log: Any) -> str | None:
    if not isinstance(log, list):
        return None
    return next((line for line in log if isinstance(line, str) and line.startswith("clock cap ")), None)


def _state_facts(state: Mapping[str, Any]) -> dict[str, Any]:
    """preflight / probe: production's serving state, the running engine, placeholders, fences."""
    engine = state.get("engine")
    snapshot = state.get("snapshot")
    facts: dict[str, Any] = {
        "serving": state.get("production"),
        "arm": engine.get("arm") if engine else None,
        "role": engine.get("role") if engine else None,
        "engine": engine.get("status") if engine else None,
        "session": engine.get("session") if engine else None,
        "clock_cap_mhz": engine.get("clock_cap_mhz") if engine else None,
        "placeholders": _present(state.get("placeholders")),
        "fenced": _present(state.get("fenced")),
        "production_sha256": state.get("production_sha256"),
        "snapshot_sha256": snapshot.get("sha256") if isinstance(snapshot, dict) else None,
    }
    return facts


def _facts(action: str, host: str | None, answer: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of a successful simulator action, in the drivers' common vocabulary."""
    facts: dict[str, Any] = {}
    if action in ("drain", "production_down_proof"):
        facts["serving"] = answer.get("production", "down")
        if "aborted" in answer:
            facts["aborted"] = answer["aborted"]
    elif action == "snapshot":
        facts["snapshot_sha256"] = answer.get("sha256")
        facts["identity"] = answer.get("identity")
    elif action == "restore_check":
        facts.update({"snapshot_sha256": answer.get("sha256"), "arm": answer.get("arm")})
    elif action == "start_arm":
        facts.update({"arm": answer.get("arm"), "role": answer.get("role"), "engine": "ready",
                      "clock_cap_mhz": answer.get("clock_cap_mhz"), "log_line": _clock_line(answer.get("log")),
                      "config_digest": answer.get("config_digest"), "identity": answer.get("identity"),
                      "speculative_config": answer.get("speculative_config"), "session": answer.get("session")})
        facts.update({k: answer[k] for k in _HOST_IDENTITIES if k in answer})
    elif action in ("stop_arm", "experiment_stop"):
        facts["arm"] = answer.get("arm")
        facts["engine"] = None
    elif action == "warmup":
        facts["ttft_cold_s"] = answer.get("cold_ttft_s")
        facts["ttft_warm_s"] = answer.get("warm_ttft_s")
        if isinstance(answer.get("requests"), int):
            facts["requests"] = answer["requests"]
    elif action == "fence":
        facts["fenced"] = list(answer.get("hosts", []))
    elif action in ("placeholder_up", "placeholder_down"):
        facts["placeholders"] = _present(answer.get("placeholders"))
    elif action == "placeholder_proof":
        facts["placeholders"] = sorted(answer.get("hosts", []))
        commits = answer.get("commits")
        if isinstance(commits, dict) and host in commits:
            facts["commit"] = commits[host]
        tags = answer.get("tags")
        if isinstance(tags, dict) and isinstance(tags.get(host), dict):
            facts["tag"], facts["tag_commit"] = tags[host].get("tag"), tags[host].get("commit")
    elif action == "quiet_proof":
        facts["quiet"] = True
    elif action == "restore":
        facts.update({"serving": "up", "snapshot_sha256": answer.get("sha256"), "identity": answer.get("identity"),
                      "clock_cap_mhz": answer.get("clock_cap_mhz"), "log_line": _clock_line(answer.get("log")),
                      "session": answer.get("session")})
        if isinstance(answer.get("hosts"), dict):
            facts["hosts"] = answer["hosts"]
    elif action == "watch":
        facts.update({"watch": "PASS", "serving": answer.get("production", "up"),
                      "production_sha256": answer.get("sha256")})
    elif action == "read_clock_cap":
        facts.update({"clock_cap_mhz": answer.get("clock_cap_mhz"), "log_line": answer.get("log_line"),
                      "current_clock_mhz": answer.get("current_clock_mhz")})
        if isinstance(answer.get("hosts"), dict):
            facts["hosts"] = answer["hosts"]
    elif action == "read_thermal":
        facts.update({"current_clock_mhz": answer.get("current_clock_mhz"),
                      "dial_backs": answer.get("dial_backs") if isinstance(answer.get("dial_backs"), list) else []})
    return facts
