"""The simulated host: production, engine sessions (starts), snapshot/restore, clock, placeholders.

This is what the window runner's simulator driver talks to through ``/_sim/...``:
every host action of ``docs/site.md`` is a method here that either returns a JSON-able result
(``{"ok": true, "action", "output", ...}``) or raises :class:`HostActionError`
(HTTP 409 for a refusal or a negative proof, 500 for an injected failure).

Serving rules: only a *ready* engine serves; while production drains, new requests get
503; a start (``start_arm`` or ``restore``) is a new engine session whose ``/metrics``
counters begin at zero, whose log carries ``clock cap N MHz`` and whose first request
pays the cold-start TTFT unless it was warmed up.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .config import ArmConfig, SimConfig
from .exposition import SimMetrics, engine_metrics
from .faults import FaultState
from .load import BatchLoad
from .prefix import PrefixCache
from .scheduler import PrefillQueue
from .truth import TruthLog

__all__ = ["ACTIONS", "EngineSession", "Host", "HostActionError", "wall_time"]

# Host actions (``docs/site.md``) plus the simulator's own: production up/down and thermal dial-back.
ACTIONS = ("drain", "snapshot", "start_arm", "stop_arm", "warmup", "fence", "quiet_proof",
           "production_down_proof", "placeholder_up", "placeholder_down", "placeholder_proof", "restore",
           "watch", "read_clock_cap", "read_thermal", "production", "thermal", "reboot", "restore_check")


WARMUP_REQUESTS = 2   # a warm-up's one-token requests (a cold one, then a warm one)


def wall_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


class HostActionError(Exception):
    """A host action refused (409), failed by injection (500) or asked wrongly (400)."""

    def __init__(self, status: int, action: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.action = action
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"ok": False, "action": self.action, "error": self.message}


@dataclass
class EngineSession:
    """One start: one engine session of one arm."""

    number: int
    arm: ArmConfig
    role: str
    clock_cap_mhz: int
    ready_at: float
    started_at: str
    metrics: SimMetrics
    start_factor: float
    log: list[str]
    production: bool = False
    warmed: bool = False
    stopped: bool = False
    admitted: int = 0
    in_flight: int = 0
    unseeded: int = 0
    stopped_at: str | None = None
    rotor: int = 0
    session: str = ""  # "<boot id>:<start number>": which engine this is, across host reboots
    prefix: PrefixCache = field(default_factory=PrefixCache, repr=False)  # vLLM's prefix cache, per session
    queue: PrefillQueue = field(default_factory=lambda: PrefillQueue("fcfs", 0), repr=False)  # the waiting queue
    host_caps: dict[str, int] = field(default_factory=dict)   # host -> the cap it logged (fault host_clock_cap)
    load: BatchLoad | None = field(default=None, repr=False)  # step_model "batch": the batch it serves
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ready(self, now: float) -> bool:
        return not self.stopped and now >= self.ready_at

    def describe(self, now: float, current_mhz: int | None) -> dict[str, Any]:
        return {
            "start": self.number, "session": self.session, "arm": self.arm.name, "role": self.role,
            "status": "stopped" if self.stopped else ("ready" if now >= self.ready_at else "starting"),
            "production": self.production, "clock_cap_mhz": self.clock_cap_mhz, "current_clock_mhz": current_mhz,
            "config_digest": self.arm.reported_config_digest(), "speculative_config": self.arm.speculative_config(),
            "image": self.arm.image, "started_at": self.started_at, "stopped_at": self.stopped_at,
            "log": list(self.log), "in_flight": self.in_flight, "admitted": self.admitted, "warmed": self.warmed,
        }


class Host:
    """All host-side state of one simulator; every method is thread-safe."""

    def __init__(self, config: SimConfig, faults: FaultState, truth: TruthLog) -> None:
        self.config = config
        self.faults = faults
        self.truth = truth
        self.cond = threading.Condition()
        self.production = "down"
        self.engine: EngineSession | None = None
        self.snapshot_taken: dict[str, Any] | None = None
        self.current_mhz: int | None = None
        self.thermal_events: list[dict[str, Any]] = []
        self.placeholders = {h: False for h in config.hosts}
        self.fenced = {h: False for h in config.hosts}
        self.starts: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self._start_number = 0
        self.boot = ""
        self.serving_url: str | None = None   # where a warm-up sends its requests (set by the HTTP server)
        self._boot()

    def _boot(self) -> None:
        """The host comes up serving production, warm, as a production host would be found."""
        self.boot = uuid.uuid4().hex[:8]
        self._start_number = 0
        session = self._new_session(self.config.arm(self.config.production_arm), "production", ready_in=0.0,
                                    production=True)
        session.warmed = True
        self.production = "up"

    # ------------------------------------------------------------------ identity

    def identity_of(self, arm: ArmConfig) -> dict[str, Any]:
        """What the host reports as an engine's identity: the same members for production and any arm."""
        return {"arm": arm.name, "model": self.config.model, "image": arm.image,
                "config_digest": arm.reported_config_digest(), "speculative_config": arm.speculative_config(),
                "clock_cap_mhz": arm.clock_cap_mhz, "hosts": list(self.config.hosts)}

    def production_identity(self) -> dict[str, Any]:
        return self.identity_of(self.config.arm(self.config.production_arm))

    def production_sha256(self) -> str:
        return _sha256_json(self.production_identity())

    def clock_factor(self) -> float:
        """> 1 when the clock was dialled back below the start's cap (steps take longer)."""
        engine = self.engine
        if engine is None or self.current_mhz is None or self.current_mhz >= engine.clock_cap_mhz:
            return 1.0
        return engine.clock_cap_mhz / self.current_mhz

    # ------------------------------------------------------------------ sessions

    def _new_session(self, arm: ArmConfig, role: str, ready_in: float, production: bool = False,
                     cap_mhz: int | None = None) -> EngineSession:
        self._start_number += 1
        number = self._start_number
        cap = cap_mhz if cap_mhz is not None else arm.clock_cap_mhz
        rng = random.Random(f"{self.config.seed}|start|{number}")
        factor = max(0.5, 1.0 + rng.gauss(0.0, self.config.start_jitter)) if self.config.start_jitter > 0 else 1.0
        spec = arm.speculative_config()
        log = [
            f"starting engine: arm {arm.name} role {role} image {arm.image}",
            f"speculative config: {json.dumps(spec, sort_keys=True) if spec else 'none'}",
            f"clock cap {cap} MHz",
            "engine ready",
        ]
        metrics = engine_metrics(self.config.model, self.config.engines, arm.k, self.config.spec_metrics,
                                 self.config.max_model_len, self.config.metrics_format,
                                 prefix_caching=self.config.enable_prefix_caching)
        session = EngineSession(number=number, arm=arm, role=role, clock_cap_mhz=cap,
                                ready_at=time.perf_counter() + ready_in, started_at=wall_time(), metrics=metrics,
                                start_factor=factor, log=log, production=production, session=f"{self.boot}:{number}",
                                queue=PrefillQueue(self.config.scheduling_policy, self.config.max_num_batched_tokens))
        if self.config.step_model == "batch":
            session.load = BatchLoad(arm)
        self.engine = session
        self.current_mhz = cap
        self.starts.append({"start": number, "arm": arm.name, "role": role, "clock_cap_mhz": cap,
                            "production": production, "started_at": session.started_at, "stopped_at": None})
        return session

    def _stop_session(self) -> None:
        engine = self.engine
        if engine is None:
            return
        engine.stopped = True
        engine.stopped_at = wall_time()
        for start in self.starts:
            if start["start"] == engine.number:
                start["stopped_at"] = engine.stopped_at
        self.engine = None
        self.current_mhz = None
        self.cond.notify_all()

    def admit(self) -> tuple[EngineSession, int] | str:
        """Admit one serving request: (session, engine index), or the reason it cannot run."""
        now = time.perf_counter()
        with self.cond:
            engine = self.engine
            if engine is None:
                return "no engine is running on this host"
            if engine.production and self.production == "draining":
                return "production is draining"
            if not engine.ready(now):
                return "engine is starting"
            engine.admitted += 1
            engine.in_flight += 1
            index = engine.rotor % self.config.engines
            engine.rotor += 1
            return engine, index

    def release(self, engine: EngineSession) -> None:
        with self.cond:
            engine.in_flight -= 1
            self.cond.notify_all()

    def health(self) -> bool:
        with self.cond:
            return self.engine is not None and self.engine.ready(time.perf_counter()) and self.production != "draining"

    # ------------------------------------------------------------------ actions

    def act(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run host action ``action`` (a name of :data:`ACTIONS`) with JSON ``args``."""
        if action not in ACTIONS:
            raise HostActionError(404, action, f"unknown host action {action!r}")
        failure = self.faults.take_action(action)
        if failure is not None:
            self._note(action, False, "injected failure")
            raise HostActionError(failure["status"], action, f"injected failure of {action}")
        method = getattr(self, f"_do_{action}")
        try:
            result: dict[str, Any] = method(args)
        except HostActionError as exc:
            self._note(action, False, exc.message)
            raise
        self._note(action, True, result.get("output", ""))
        return {"ok": True, "action": action, **result}

    def _note(self, action: str, ok: bool, output: str) -> None:
        with self.cond:
            self.actions.append({"action": action, "ok": ok, "at": wall_time(), "output": output})

    def _scaled(self, seconds: float) -> float:
        return seconds * self.config.time_scale

    def _wait_ready(self, session: EngineSession) -> None:
        while True:
            remaining = session.ready_at - time.perf_counter()
            if remaining <= 0 or session.stopped:
                return
            time.sleep(min(remaining, 0.05))

    def _do_drain(self, args: dict[str, Any]) -> dict[str, Any]:
        timeout = float(args.get("timeout_s", 30.0))
        with self.cond:
            if self.production == "down":
                return {"production": "down", "output": "production already down"}
            engine = self.engine
            self.production = "draining"
            deadline = time.perf_counter() + timeout
            while engine is not None and engine.in_flight > 0:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self.cond.wait(left)
            aborted = engine.in_flight if engine is not None else 0
            self._stop_session()
            self.production = "down"
        out = "production drained and stopped" + (f"; {aborted} requests aborted at the timeout" if aborted else "")
        return {"production": "down", "aborted": aborted, "output": out}

    def _do_snapshot(self, args: dict[str, Any]) -> dict[str, Any]:
        identity = self.production_identity()
        sha = _sha256_json(identity)
        with self.cond:
            self.snapshot_taken = {"identity": identity, "sha256": sha, "at": wall_time()}
        return {"identity": identity, "sha256": sha, "output": f"production snapshot sha256 {sha}"}

    def _do_start_arm(self, args: dict[str, Any]) -> dict[str, Any]:
        name = args.get("arm")
        role = args.get("role", name)
        if not isinstance(name, str) or not isinstance(role, str):
            raise HostActionError(400, "start_arm", "start_arm needs {arm: str, role: str}")
        arm = next((a for a in self.config.arms if a.name == name), None)
        if arm is None:
            raise HostActionError(400, "start_arm", f"unknown arm {name!r}; configured: {self.config.arm_names()}")
        slow = args.get("slow_start_s")
        ready_in = float(slow) if isinstance(slow, int | float) else self._scaled(self.config.start_s)
        with self.cond:
            if self.production != "down":
                raise HostActionError(409, "start_arm", f"production is {self.production}; drain it first")
            if self.engine is not None:
                raise HostActionError(409, "start_arm", f"arm {self.engine.arm.name} is running; stop_arm first")
            mismatch = self.faults.take("clock_cap_mismatch")
            session = self._new_session(arm, role, ready_in, cap_mhz=mismatch["cap_mhz"] if mismatch else None)
            odd = self.faults.take("host_clock_cap")
            if odd is not None:
                session.host_caps[odd["host"]] = odd["cap_mhz"]
            identities = dict(arm.reported_identities or {})
            other = self.faults.take("identity_mismatch")
            if other is not None:
                identities[other["member"]] = other["value"]
            changed = self.faults.take_for("digest_mismatch", arm.name)
            digest = changed["config_digest"] if changed is not None else arm.reported_config_digest()
        if args.get("wait", True):
            self._wait_ready(session)
        return {
            **identities,
            "start": session.number, "session": session.session, "arm": arm.name, "role": role,
            "identity": self.identity_of(arm),
            "config_digest": digest, "speculative_config": arm.speculative_config(),
            "clock_cap_mhz": session.clock_cap_mhz, "log": list(session.log), "output": "\n".join(session.log),
        }

    def _do_stop_arm(self, args: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            engine = self.engine
            if engine is None:
                return {"output": "no arm running"}
            if engine.production:
                raise HostActionError(409, "stop_arm", "the running engine is production; use drain")
            self._stop_session()
        return {"start": engine.number, "arm": engine.arm.name, "output": f"stopped arm {engine.arm.name}"}

    def _do_warmup(self, args: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            engine = self.engine
            if engine is None:
                raise HostActionError(409, "warmup", "no engine is running")
        self._wait_ready(engine)
        unserved = self.faults.take("warmup_unserved") is not None
        if self.serving_url is not None and not unserved:
            return self._served_warmup(engine, args)
        arm = engine.arm
        warm_ms = arm.ttft_base_ms + arm.ttft_per_1k_tokens_ms * 0.016
        cold_ms = warm_ms + (0.0 if engine.warmed else self.config.cold_ttft_extra_ms)
        time.sleep(self._scaled(cold_ms + warm_ms) / 1000.0)
        engine.warmed = True
        cold_s, warm_s = self._scaled(cold_ms) / 1000.0, self._scaled(warm_ms) / 1000.0
        return {"start": engine.number, "cold_ttft_s": cold_s, "warm_ttft_s": warm_s,
                **({"requests": WARMUP_REQUESTS} if unserved else {}),   # said sent, never served
                "output": f"warmup: cold TTFT {cold_s:.6f} s, warm TTFT {warm_s:.6f} s"}

    def _served_warmup(self, engine: EngineSession, args: dict[str, Any]) -> dict[str, Any]:
        """The warm-up as the example sites do it: ``WARMUP_REQUESTS`` one-token requests to the serving
        endpoint, served by the engine (its counters and the truth record count them), carrying the plan's
        engine-side sampling fields (``engine_sampling``) as every request of the window does."""
        import httpx

        fields = args.get("engine_sampling")
        # sampled, as the waves are: a T=0 fault set for the smoke probes (greedy_diverge, ...) is left to them
        chat = args.get("endpoint") == "chat"   # the waves' API (a plan's measurement.endpoint)
        body = {**({"messages": [{"role": "user", "content": "Hello"}]} if chat else {"prompt": "Hello"}),
                "max_tokens": 1, "temperature": 1.0, "seed": 1, **(fields if isinstance(fields, dict) else {})}
        path = "/v1/chat/completions" if chat else "/v1/completions"
        ttfts: list[float] = []
        with httpx.Client(timeout=120.0) as http:
            for _ in range(WARMUP_REQUESTS):
                t0 = time.perf_counter()
                try:
                    reply = http.post(f"{self.serving_url}{path}", json=body)
                except httpx.HTTPError as exc:
                    raise HostActionError(500, "warmup", f"a warm-up request got no answer: {exc}") from None
                if reply.status_code != 200:
                    raise HostActionError(500, "warmup", f"the engine answered a warm-up request HTTP "
                                                         f"{reply.status_code}: {reply.text[:200]}")
                ttfts.append(time.perf_counter() - t0)
        return {"start": engine.number, "cold_ttft_s": ttfts[0], "warm_ttft_s": ttfts[-1],
                "requests": WARMUP_REQUESTS,
                "output": f"warmup: cold TTFT {ttfts[0]:.6f} s, warm TTFT {ttfts[-1]:.6f} s"}

    def _hosts(self, args: dict[str, Any], action: str) -> list[str]:
        host = args.get("host")
        if host is None:
            return list(self.config.hosts)
        if host not in self.config.hosts:
            raise HostActionError(400, action, f"unknown host {host!r}; hosts: {list(self.config.hosts)}")
        return [host]

    def _do_fence(self, args: dict[str, Any]) -> dict[str, Any]:
        hosts = self._hosts(args, "fence")
        with self.cond:
            for h in hosts:
                self.fenced[h] = True
        return {"hosts": hosts, "output": f"fenced {', '.join(hosts)}"}

    def _do_placeholder_up(self, args: dict[str, Any]) -> dict[str, Any]:
        hosts = self._hosts(args, "placeholder_up")
        with self.cond:
            for h in hosts:
                self.placeholders[h] = True
        return {"hosts": hosts, "placeholders": dict(self.placeholders), "output": f"placeholders up on {hosts}"}

    def _do_placeholder_down(self, args: dict[str, Any]) -> dict[str, Any]:
        hosts = self._hosts(args, "placeholder_down")
        with self.cond:
            for h in hosts:
                self.placeholders[h] = False
                self.fenced[h] = False
        return {"hosts": hosts, "placeholders": dict(self.placeholders), "output": f"placeholders down on {hosts}"}

    def _do_placeholder_proof(self, args: dict[str, Any]) -> dict[str, Any]:
        hosts = self._hosts(args, "placeholder_proof")
        with self.cond:
            missing = [h for h in hosts if not self.placeholders[h]]
        if missing:
            raise HostActionError(409, "placeholder_proof", f"no placeholder on {', '.join(missing)}")
        commits: dict[str, str] = {}
        armed = self.faults.snapshot().get("host_commit")
        if isinstance(armed, dict) and armed["host"] in hosts:
            other = self.faults.take("host_commit")
            if other is not None:
                commits[other["host"]] = other["commit"]
        tags: dict[str, dict[str, str | None]] = {}
        wanted = args.get("expected_tag")
        if isinstance(wanted, str):   # the simulated hosts have checked out the tag asked for, at the window's commit
            tags = {h: {"tag": wanted, "commit": args.get("expected_commit")} for h in hosts}
        armed_tag = self.faults.snapshot().get("host_tag")
        if isinstance(armed_tag, dict) and armed_tag["host"] in hosts:
            odd = self.faults.take("host_tag")
            if odd is not None:
                tags[odd["host"]] = {"tag": odd["tag"] or None, "commit": odd["commit"] or args.get("expected_commit")}
        return {"hosts": hosts, **({"commits": commits} if commits else {}), **({"tags": tags} if tags else {}),
                "output": f"placeholders present on {', '.join(hosts)}"}

    def _do_quiet_proof(self, args: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            if self.engine is not None:
                raise HostActionError(409, "quiet_proof",
                                      f"engine of arm {self.engine.arm.name} is running "
                                      f"({self.engine.in_flight} requests in flight)")
        return {"output": "no engine process; no requests in flight"}

    def _do_production_down_proof(self, args: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            if self.production != "down":
                raise HostActionError(409, "production_down_proof", f"production is {self.production}")
        return {"production": "down", "output": "production is down: serving endpoint has no engine"}

    def _do_restore(self, args: dict[str, Any]) -> dict[str, Any]:
        sha = args.get("sha256")
        identity = args.get("identity")
        with self.cond:
            if self.snapshot_taken is None and isinstance(identity, dict) and _sha256_json(identity) == sha:
                # the host lost its own record (a reboot): restore from the snapshot the caller kept
                self.snapshot_taken = {"identity": identity, "sha256": sha, "at": wall_time()}
            if self.snapshot_taken is None:
                raise HostActionError(409, "restore", "no production snapshot was taken")
            if sha is not None and sha != self.snapshot_taken["sha256"]:
                raise HostActionError(409, "restore", f"snapshot sha256 mismatch: asked {sha}, "
                                                      f"snapshot is {self.snapshot_taken['sha256']}")
            self._stop_session()
            slow = args.get("slow_start_s")
            ready_in = float(slow) if isinstance(slow, int | float) else self._scaled(self.config.start_s)
            odd = self.faults.take("restore_clock_cap")   # production comes back at another cap
            session = self._new_session(self.config.arm(self.config.production_arm), "production", ready_in,
                                        production=True, cap_mhz=odd["cap_mhz"] if odd and not odd["host"] else None)
            if odd is not None and odd["host"]:
                session.host_caps[odd["host"]] = odd["cap_mhz"]
            self.production = "up"
            snap = dict(self.snapshot_taken)
        if args.get("wait", True):
            self._wait_ready(session)
        facts = {"sha256": snap["sha256"], "identity": snap["identity"], "start": session.number,
                 "session": session.session,
                 "clock_cap_mhz": session.clock_cap_mhz, "log": list(session.log),
                 "output": f"production restored to snapshot {snap['sha256']}"}
        return {**facts, **self._host_lines(session, "restore")}

    def _do_restore_check(self, args: dict[str, Any]) -> dict[str, Any]:
        """A dry restore: what ``restore`` would bring back (the snapshot it checks, as ``restore`` does,
        and the production arm it would start); changes nothing."""
        sha = args.get("sha256")
        identity = args.get("identity")
        with self.cond:
            snapshot = self.snapshot_taken
            if snapshot is None and isinstance(identity, dict) and _sha256_json(identity) == sha:
                snapshot = {"identity": identity, "sha256": sha}   # the caller's capture would serve
            if snapshot is None:
                raise HostActionError(409, "restore_check", "no production snapshot was taken: nothing to restore to")
            if sha is not None and sha != snapshot["sha256"]:
                raise HostActionError(409, "restore_check", f"snapshot sha256 mismatch: asked {sha}, "
                                                            f"snapshot is {snapshot['sha256']}")
            arm = self.config.arm(self.config.production_arm)
        return {"sha256": snapshot["sha256"], "arm": arm.name,
                "output": f"restore would start {arm.name} from snapshot {snapshot['sha256']}"}

    def _do_production(self, args: dict[str, Any]) -> dict[str, Any]:
        state = args.get("state")
        if state not in ("up", "down"):
            raise HostActionError(400, "production", "production needs {state: up|down}")
        with self.cond:
            if state == "down":
                if self.engine is not None and self.engine.production:
                    self._stop_session()
                self.production = "down"
                return {"production": "down", "output": "production stopped"}
            if self.production == "up":
                return {"production": "up", "output": "production already up"}
            if self.engine is not None:
                raise HostActionError(409, "production", f"arm {self.engine.arm.name} is running; stop_arm first")
            session = self._new_session(self.config.arm(self.config.production_arm), "production",
                                        self._scaled(self.config.start_s), production=True)
            self.production = "up"
        if args.get("wait", True):
            self._wait_ready(session)
        return {"production": "up", "start": session.number, "output": "production started"}

    def _do_reboot(self, args: dict[str, Any]) -> dict[str, Any]:
        """The host restarts: every engine and placeholder is gone, its own snapshot record too, and it
        comes back serving production (a test's way to play a host that rebooted under a window)."""
        with self.cond:
            self._stop_session()
            self.snapshot_taken = None
            self.placeholders = dict.fromkeys(self.config.hosts, False)
            self.fenced = dict.fromkeys(self.config.hosts, False)
            self._boot()
        return {"production": "up", "boot": self.boot, "output": f"host rebooted (boot {self.boot})"}

    def _do_watch(self, args: dict[str, Any]) -> dict[str, Any]:
        now = time.perf_counter()
        with self.cond:
            engine = self.engine
            problems = []
            if self.production != "up":
                problems.append(f"production is {self.production}")
            if engine is None or not engine.production:
                problems.append("production engine is not running")
            elif not engine.ready(now):
                problems.append("production engine is still starting")
            if self.snapshot_taken and self.production_sha256() != self.snapshot_taken["sha256"]:
                problems.append("production identity differs from the snapshot")
        if problems:
            raise HostActionError(409, "watch", "; ".join(problems))
        return {"production": "up", "sha256": self.production_sha256(),
                "output": "production up, engine ready, identity matches the snapshot"}

    def _do_read_clock_cap(self, args: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            engine = self.engine
            if engine is None:
                raise HostActionError(409, "read_clock_cap", "no engine is running")
            line = next(line for line in engine.log if line.startswith("clock cap "))
            lines = self._host_lines(engine, "read_clock_cap")
            hosts = lines.get("hosts", {})
            return {"start": engine.number, "clock_cap_mhz": engine.clock_cap_mhz,
                    "current_clock_mhz": self.current_mhz, "log_line": line, **lines,
                    "output": "\n".join([f"{h}: {v['log_line']}" for h, v in hosts.items()] or [line])}

    def _host_lines(self, session: EngineSession, action: str) -> dict[str, Any]:
        """Every host's own clock cap line (``hosts``), less the one fault ``clock_line_missing`` leaves out."""
        hosts = {h: {"clock_cap_mhz": session.host_caps.get(h, session.clock_cap_mhz),
                     "log_line": f"clock cap {session.host_caps.get(h, session.clock_cap_mhz)} MHz"}
                 for h in self.config.hosts}
        missing = self.faults.take_if("clock_line_missing", "action", action)
        if missing is not None and not missing["host"]:
            return {}
        if missing is not None:
            hosts.pop(str(missing["host"]), None)
        return {"hosts": hosts}

    def _do_read_thermal(self, args: dict[str, Any]) -> dict[str, Any]:
        """The THERMAL-WATCH log: every dial-back since the host booted, and the clock now."""
        with self.cond:
            engine = self.engine
            dial_backs = [{"seq": e["seq"], "at": e["at"], "from_mhz": e["from_mhz"], "to_mhz": e["to_mhz"],
                           "start": e["start"]} for e in self.thermal_events if e["kind"] == "dial_back"]
            lines = [f"THERMAL-WATCH {e['at']} clock {e['from_mhz']} -> {e['to_mhz']} MHz ({e['kind']})"
                     for e in self.thermal_events]
            return {"current_clock_mhz": self.current_mhz,
                    "clock_cap_mhz": engine.clock_cap_mhz if engine else None,
                    "dial_backs": dial_backs, "output": "\n".join(lines) or "THERMAL-WATCH: no events"}

    def blip(self, cap_mhz: int) -> None:
        """A dial-back to ``cap_mhz`` and its recovery at once (fault ``thermal_blip``)."""
        engine = self.engine
        back = self.current_mhz
        self._do_thermal({"cap_mhz": cap_mhz})
        if engine is not None and back is not None:
            self._do_thermal({"cap_mhz": back})

    def _do_thermal(self, args: dict[str, Any]) -> dict[str, Any]:
        cap = args.get("cap_mhz", self.config.thermal_cap_mhz)
        if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
            raise HostActionError(400, "thermal", "thermal needs {cap_mhz: positive integer}")
        with self.cond:
            engine = self.engine
            before = self.current_mhz
            event = {"seq": len(self.thermal_events) + 1, "at": wall_time(), "from_mhz": before, "to_mhz": cap,
                     "start": engine.number if engine else None,
                     "kind": "dial_back" if before is None or cap < before else "recover"}
            self.thermal_events.append(event)
            if engine is not None:
                self.current_mhz = cap
        return {"event": event, "output": f"THERMAL-WATCH: clock {before} -> {cap} MHz"}

    # ------------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        now = time.perf_counter()
        with self.cond:
            engine = self.engine
            return {
                "model": self.config.model,
                "boot": self.boot,
                "time_scale": self.config.time_scale,
                "production": self.production,
                "production_arm": self.config.production_arm,
                "production_identity": self.production_identity(),
                "production_sha256": self.production_sha256(),
                "engine": engine.describe(now, self.current_mhz) if engine else None,
                "clock": {"production_cap_mhz": self.config.arm(self.config.production_arm).clock_cap_mhz,
                          "start_cap_mhz": engine.clock_cap_mhz if engine else None,
                          "current_mhz": self.current_mhz},
                "snapshot": dict(self.snapshot_taken) if self.snapshot_taken else None,
                "thermal_events": [dict(e) for e in self.thermal_events],
                "placeholders": dict(self.placeholders),
                "fenced": dict(self.fenced),
                "starts": [dict(s) for s in self.starts],
                "actions": [dict(a) for a in self.actions],
                "faults": self.faults.snapshot(),
                "truth": self.truth.totals(),
            }
