#!/usr/bin/env python3
"""A command site for local vLLM servers on one CPU host (docs/real-servers.md).

    vllmsite.py STATE_DIR ACTION [ARGS...]

What the site runs is in ``vllmsite.toml`` beside this directory: the vLLM interpreter
(``make vllm``), the model directory, production (``arm = "plain"``) and the arms, each a
``vllm.entrypoints.openai.api_server`` on a port of its own. The serving port belongs to
``router.py``, a TCP relay to the engine the site routes to (``STATE_DIR/route.json``).
Each action prints what it did and ends with one ``TALLY-FACTS {json}`` line (docs/site.md,
the facts convention). Two modes (``mode`` in vllmsite.toml):

- ``restart``: one engine at a time. ``start_arm`` starts the arm's server (two to three
  minutes on 2 CPU cores) and routes the serving port to it; ``stop_arm`` stops it; a drain
  stops production and a restore starts it again.
- ``resident``: every engine is started once (``up``) and kept running; ``start_arm`` routes
  the serving port to the arm's engine and stops nothing. A start is then not a restart:
  the engine keeps its process, its warm caches and its counters (tally reads counter
  deltas, and every wave request carries a fresh ``cache_salt``). For tests and CI, where
  a restart per start would cost minutes; a decision to act on restarts.

Operator commands, not called by tally:

    vllmsite.py STATE_DIR up                 start the router and production (restart) or every engine (resident)
    vllmsite.py STATE_DIR stop-all           stop every process this site started (by pid)
    vllmsite.py STATE_DIR stop-engine ARM    stop one engine (by pid)
    vllmsite.py STATE_DIR digest ARM         the config_digest to declare for ARM in a plan
    vllmsite.py STATE_DIR status             the engines, the route and production's state

An engine's **identity** is what it runs, read where it can be read: the server's command
line (the environment the site sets, the module and its arguments; host and port left
out), vLLM's version (``GET /version`` of the running server) and the sha256 of every
model file. Its ``config_digest`` is the sha256 of that identity's canonical JSON without
the version. The reported speculative config is the engine's own: the
``speculative_config=...`` of its start-up log line ("Initializing a V1 LLM engine ...
with config: ..."), never this file's arguments.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
CONFIG = HERE / "vllmsite.toml"
ROUTER = HERE / "router.py"
READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 60.0
MODULE = "vllm.entrypoints.openai.api_server"
CONFIG_LINE = "Initializing a V1 LLM engine"


class Refused(Exception):
    """The action cannot be done: one line on stderr, exit 3."""


# ---------------------------------------------------------------------- configuration


def config() -> dict[str, Any]:
    with CONFIG.open("rb") as handle:
        cfg = tomllib.load(handle)
    if cfg.get("mode", "restart") not in ("restart", "resident"):
        raise Refused(f"{CONFIG.name}: mode must be restart or resident, not {cfg.get('mode')!r}")
    return cfg


def site_path(value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else (HERE / path).resolve()


def python(cfg: dict[str, Any]) -> Path:
    path = site_path(str(cfg["python"]))
    if not path.exists():
        raise Refused(f"the vLLM interpreter {path} does not exist (make vllm)")
    return path


def model_dir(cfg: dict[str, Any]) -> Path:
    path = site_path(str(cfg["model"]))
    if not (path / "config.json").is_file():
        raise Refused(f"the model directory {path} has no config.json (make vllm)")
    return path


def file_sha256(path: Path, state: Path) -> str:
    """A model file's sha256, cached by (path, size, mtime) in the state directory."""
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    cache_path = state / "model-sha256.json"
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    if isinstance(cache, dict) and isinstance(cache.get(key), str):
        return str(cache[key])
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    cache = cache if isinstance(cache, dict) else {}
    cache[key] = digest.hexdigest()
    cache_path.write_text(json.dumps(cache, sort_keys=True))
    return digest.hexdigest()


def model_files(cfg: dict[str, Any], state: Path) -> dict[str, str]:
    """Every file vLLM reads from the model directory, name -> sha256 (tally's conversion stamp left out)."""
    directory = model_dir(cfg)
    return {p.name: file_sha256(p, state) for p in sorted(directory.iterdir())
            if p.is_file() and not p.name.startswith(".") and p.name != "tally-conversion.json"}


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def arm_name(cfg: dict[str, Any], name: str) -> str:
    if name == "production":
        name = str(cfg["production"]["arm"])
    arms = cfg.get("arms", {})
    if name not in arms:
        raise Refused(f"arm {name!r} is not in {CONFIG.name} (arms: {', '.join(sorted(arms))})")
    return name


def engine_env(cfg: dict[str, Any], arm: dict[str, Any]) -> dict[str, str]:
    """The environment the site sets for an engine, as written (``{venv}``: the vLLM virtualenv's directory)."""
    merged = {**cfg.get("env", {}), **arm.get("env", {})}
    return {str(k): str(v) for k, v in sorted(merged.items())}


def expanded(cfg: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The environment with ``{venv}`` filled in: what the engine gets (its identity keeps the template, so
    the digest does not depend on where the virtualenv lies)."""
    venv = str(python(cfg).parent.parent)
    return {k: v.replace("{venv}", venv) for k, v in env.items()}


def engine_config(cfg: dict[str, Any], name: str, state: Path) -> dict[str, Any]:
    """What the engine of arm ``name`` (or ``production``) runs, and how it is identified."""
    name = arm_name(cfg, name)
    arm = cfg["arms"][name]
    args = ["--served-model-name", str(cfg["served_model_name"]), *map(str, cfg.get("common_args", [])),
            *map(str, arm.get("args", []))]
    env = engine_env(cfg, arm)
    command = {"env": env, "module": MODULE, "args": args}
    config_part = {"command": command, "model_files": model_files(cfg, state)}
    argv = [str(python(cfg)), "-m", MODULE, "--host", str(cfg.get("host", "127.0.0.1")), "--port",
            str(int(arm["port"])), "--model", str(model_dir(cfg)), *args]
    return {"arm": name, "port": int(arm["port"]), "argv": argv, "env": env, "config_part": config_part,
            "config_digest": hashlib.sha256(canonical(config_part)).hexdigest()}


def identity_sha256(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(identity)).hexdigest()


# ---------------------------------------------------------------------- HTTP


def request(port: int, path: str, body: dict[str, Any] | None = None, timeout: float = 5.0,
            host: str = "127.0.0.1") -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{host}:{port}{path}", data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            return reply.status, reply.read(1 << 22)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(1 << 16)
    except (OSError, urllib.error.URLError, ValueError):
        return 0, b""


def in_flight(port: int) -> float | None:
    """Requests running or waiting on the engine at ``port``, from its own /metrics."""
    status, body = request(port, "/metrics")
    if status != 200:
        return None
    total = 0.0
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")):
            with contextlib.suppress(ValueError, IndexError):
                total += float(line.rsplit(" ", 1)[1])
    return total


# ---------------------------------------------------------------------- processes


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def engines(state: Path) -> dict[str, dict[str, Any]]:
    """The engines this site started that still run, by arm."""
    out = {}
    for path in sorted((state / "engines").glob("*.json")):
        record = read_json(path)
        if record is None or not alive(int(record["pid"])):
            path.unlink(missing_ok=True)
            continue
        out[str(record["arm"])] = record
    return out


def speculative_from_log(log: Path) -> tuple[bool, dict[str, Any] | None]:
    """(found, config) from the engine's start-up line: ``speculative_config=None`` or ``SpeculativeConfig(...)``."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False, None
    line = next((line for line in reversed(text.splitlines()) if CONFIG_LINE in line), None)
    if line is None:
        return False, None
    if "speculative_config=None" in line:
        return True, None
    match = re.search(r"speculative_config=SpeculativeConfig\(([^)]*)\)", line)
    if match is None:
        return False, None
    members = dict(re.findall(r"(\w+)=('[^']*'|[^,]+)", match.group(1)))
    spec: dict[str, Any] = {}
    method = members.get("method", "").strip("'")
    if method:
        spec["method"] = method
    if members.get("num_spec_tokens", "").strip().isdigit():
        spec["num_speculative_tokens"] = int(members["num_spec_tokens"])
    model = members.get("model", "None").strip()
    if model != "None":
        spec["model"] = model.strip("'")
    return True, spec


def launch(cfg: dict[str, Any], state: Path, name: str) -> dict[str, Any]:
    """Start arm ``name``'s server and wait until it is healthy; its record (identity read from the server)."""
    running = engines(state)
    eng = engine_config(cfg, name, state)
    if eng["arm"] in running:
        raise Refused(f"the engine of {eng['arm']} is running already (pid {running[eng['arm']]['pid']})")
    (state / "engines").mkdir(exist_ok=True)
    log_path = state / f"{eng['arm']}.log"
    log = log_path.open("ab")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("TALLY_", "VLLM_"))},
           **expanded(cfg, eng["env"])}
    process = subprocess.Popen(eng["argv"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True, cwd=state, env=env)
    started = time.time()
    record: dict[str, Any] = {"pid": process.pid, "arm": eng["arm"], "port": eng["port"], "argv": eng["argv"],
                              "started": started, "log": str(log_path), "config_digest": eng["config_digest"]}
    (state / "engines" / f"{eng['arm']}.json").write_text(json.dumps(record))
    deadline = started + READY_TIMEOUT_S
    while time.time() < deadline:
        if process.poll() is not None:
            (state / "engines" / f"{eng['arm']}.json").unlink(missing_ok=True)
            raise Refused(f"{eng['arm']} exited with {process.returncode} while starting (see {log_path})")
        if request(eng["port"], "/health", timeout=2.0)[0] == 200:
            break
        time.sleep(1.0)
    else:
        stop_engine(state, eng["arm"])
        raise Refused(f"{eng['arm']} did not answer /health within {READY_TIMEOUT_S:g} s (see {log_path})")
    status, body = request(eng["port"], "/version")
    version = json.loads(body).get("version") if status == 200 else None
    found, spec = speculative_from_log(log_path)
    if not found or not isinstance(version, str):
        stop_engine(state, eng["arm"])
        raise Refused(f"{eng['arm']} started, but its version ({version!r}) or its speculative config "
                      f"(the {CONFIG_LINE!r} log line) could not be read")
    identity = {**eng["config_part"], "server": f"vLLM {version}", "speculative_config": spec}
    record.update(identity=identity, speculative_config=spec, ready_s=round(time.time() - started, 1))
    (state / "engines" / f"{eng['arm']}.json").write_text(json.dumps(record))
    print(f"started {eng['arm']}: pid {process.pid}, port {eng['port']}, ready in {record['ready_s']} s, "
          f"vLLM {version}, speculative_config {json.dumps(spec)}")
    return record


def stop_engine(state: Path, arm: str) -> dict[str, Any] | None:
    """Stop an engine: SIGTERM to its process group (the API server's pid), SIGKILL after a grace."""
    path = state / "engines" / f"{arm}.json"
    record = read_json(path)
    if record is None:
        return None
    pid = int(record["pid"])
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.time() + STOP_TIMEOUT_S
    while alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    print(f"stopped {arm} (pid {pid})")
    return record


def ensure_router(cfg: dict[str, Any], state: Path) -> None:
    record = read_json(state / "router.json")
    if record is not None and alive(int(record["pid"])):
        return
    if not (state / "route.json").exists():
        (state / "route.json").write_text(json.dumps({"port": None}))
    log = (state / "router.log").open("ab")
    argv = [sys.executable, str(ROUTER), "--host", str(cfg.get("host", "127.0.0.1")), "--port",
            str(int(cfg["port"])), "--state", str(state)]
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True, cwd=state)
    (state / "router.json").write_text(json.dumps({"pid": process.pid, "port": int(cfg["port"])}))
    deadline = time.time() + 20
    while time.time() < deadline:
        with contextlib.suppress(OSError):
            import socket

            with socket.create_connection((str(cfg.get("host", "127.0.0.1")), int(cfg["port"])), timeout=1):
                return
        time.sleep(0.1)
    raise Refused("the router did not listen on the serving port")


def route(state: Path, record: dict[str, Any] | None, role: str | None) -> dict[str, Any]:
    """Point the serving port at ``record``'s engine (``None``: at nothing) and tell the router."""
    current = read_json(state / "route.json") or {}
    count = int(current.get("count", 0)) + 1
    value: dict[str, Any] = {"port": None, "arm": None, "role": None, "session": None, "count": count}
    if record is not None:
        value = {"port": record["port"], "arm": record["arm"], "role": role, "count": count,
                 "session": f"{record['pid']}:{count}"}
    temp = state / "route.json.tmp"
    temp.write_text(json.dumps(value))
    temp.replace(state / "route.json")
    router = read_json(state / "router.json")
    if router is not None and alive(int(router["pid"])):
        os.kill(int(router["pid"]), signal.SIGHUP)
        time.sleep(0.2)
    return value


def routed(state: Path) -> dict[str, Any]:
    value = read_json(state / "route.json") or {}
    return value if value.get("port") is not None and value.get("arm") in engines(state) else {}


# ---------------------------------------------------------------------- actions


def facts(value: dict[str, Any]) -> None:
    print("TALLY-FACTS " + json.dumps(value, sort_keys=True))


def serving(cfg: dict[str, Any], state: Path) -> str:
    current = routed(state)
    if current.get("role") == "production" and request(int(current["port"]), "/health")[0] == 200:
        return "up"
    return "down"


def production_facts(cfg: dict[str, Any], state: Path) -> dict[str, Any]:
    current = routed(state)
    if current.get("role") != "production":
        return {}
    return {"production_sha256": identity_sha256(engines(state)[current["arm"]]["identity"])}


def preflight(cfg: dict[str, Any], state: Path) -> None:
    current = routed(state)
    facts({"serving": serving(cfg, state), "arm": current.get("arm"), "role": current.get("role"),
           "engine": "ready" if current else None, "session": current.get("session"), "placeholders": [],
           "fenced": [], **production_facts(cfg, state)})


def snapshot(cfg: dict[str, Any], state: Path) -> None:
    current = routed(state)
    if current.get("role") != "production":
        raise Refused("production is not serving: nothing to snapshot")
    identity = engines(state)[current["arm"]]["identity"]
    sha = identity_sha256(identity)
    (state / "snapshot.json").write_text(json.dumps({"sha256": sha, "identity": identity, "arm": current["arm"]}))
    print(f"production snapshot sha256 {sha}")
    facts({"snapshot_sha256": sha, "identity": identity})


def wait_idle(port: int) -> None:
    deadline = time.time() + DRAIN_TIMEOUT_S
    while time.time() < deadline:
        if not in_flight(port):
            return
        time.sleep(0.5)
    raise Refused(f"requests still in flight on port {port} after {DRAIN_TIMEOUT_S:g} s")


def drain(cfg: dict[str, Any], state: Path) -> None:
    current = routed(state)
    if current and current.get("role") != "production":
        raise Refused(f"arm {current['arm']} is routed, not production")
    route(state, None, None)   # admit nothing more, then let what is in flight finish
    if current:
        wait_idle(int(current["port"]))
        if cfg.get("mode", "restart") == "restart":
            stop_engine(state, str(current["arm"]))
    print("production drained")
    facts({"serving": "down"})


def start_arm(cfg: dict[str, Any], state: Path, arm: str, role: str) -> None:
    if serving(cfg, state) == "up":
        raise Refused("production is up; drain it first")
    name = arm_name(cfg, arm)
    running = engines(state)
    if cfg.get("mode", "restart") == "restart":
        for other in list(running):
            stop_engine(state, other)
        record = launch(cfg, state, name)
    else:
        if name not in running:
            raise Refused(f"resident mode: the engine of {name} is not running (vllmsite.py STATE up)")
        record = running[name]
        wait_idle(int(record["port"]))
    current = route(state, record, role)
    print(f"routed the serving port to {name} as {role} (session {current['session']})")
    facts({"arm": name, "role": role, "engine": "ready", "session": current["session"],
           "config_digest": record["config_digest"], "speculative_config": record["speculative_config"],
           "identity": record["identity"]})


def stop_arm(cfg: dict[str, Any], state: Path) -> None:
    current = routed(state)
    if current.get("role") == "production":
        raise Refused("the routed engine is production; use drain")
    route(state, None, None)
    if current and cfg.get("mode", "restart") == "restart":
        stop_engine(state, str(current["arm"]))
    if not current:
        print("no arm routed")
    facts({"arm": current.get("arm"), "engine": None})


def _ttft(cfg: dict[str, Any], params: dict[str, Any]) -> float | None:
    """One warm-up request's time to its reply, sent as the window's waves are: the plan's engine-side
    sampling fields (``params.engine_sampling``) in the body, to chat completions when the waves go there
    (``params.endpoint``), so that the warm-up warms what the waves will use."""
    given = params.get("engine_sampling")
    fields: dict[str, Any] = given if isinstance(given, dict) else {}
    body: dict[str, Any]
    if params.get("endpoint") == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}]}
    else:
        path, body = "/v1/completions", {"prompt": "Hello"}
    body.update({**fields, "max_tokens": 1, "temperature": 0})
    started = time.perf_counter()
    status, _ = request(int(cfg["port"]), path, body, timeout=120.0)
    return time.perf_counter() - started if status == 200 else None


def warmup(cfg: dict[str, Any], state: Path, req: dict[str, Any]) -> None:
    if not routed(state):
        raise Refused("no engine is routed")
    params = req.get("params") or {}
    cold, warm = _ttft(cfg, params), _ttft(cfg, params)
    if cold is None or warm is None:
        raise Refused("the engine did not answer the warm-up requests")
    print(f"warmup: cold TTFT {cold:.6f} s, warm TTFT {warm:.6f} s")
    facts({"ttft_cold_s": cold, "ttft_warm_s": warm, "requests": 2})


def restore(cfg: dict[str, Any], state: Path, req: dict[str, Any]) -> None:
    wanted = (req.get("params") or {}).get("snapshot_sha256")
    current = routed(state)
    name = arm_name(cfg, "production")
    if current.get("role") != "production":
        route(state, None, None)
        running = engines(state)
        if cfg.get("mode", "restart") == "restart":
            for other in running:
                if other != name:
                    stop_engine(state, other)
            record = running.get(name) or launch(cfg, state, "production")
        else:
            if name not in running:
                raise Refused(f"resident mode: production's engine ({name}) is not running")
            record = running[name]
        route(state, record, "production")
    record = engines(state)[name]
    sha = identity_sha256(record["identity"])
    if wanted and sha != wanted:
        raise Refused(f"production came back as {sha[:12]}, not the snapshot {str(wanted)[:12]}")
    print(f"production restored: {sha}")
    facts({"serving": "up", "snapshot_sha256": sha, "identity": record["identity"], "arm": name,
           "session": (read_json(state / "route.json") or {}).get("session")})


def restore_check(cfg: dict[str, Any], state: Path, request: dict[str, Any]) -> None:
    """The rollback preflight: would ``restore`` bring back production's snapshot? Changes nothing: the
    snapshot is on record with the sha asked for, and production's engine can be launched as configured."""
    wanted = (request.get("params") or {}).get("snapshot_sha256")
    try:
        snap = json.loads((state / "snapshot.json").read_text())
    except (OSError, ValueError):
        raise Refused("no production snapshot on record (snapshot.json): nothing to restore to") from None
    if wanted and snap.get("sha256") != wanted:
        raise Refused(f"the snapshot on record is {str(snap.get('sha256'))[:12]}, not production's {str(wanted)[:12]}")
    eng = engine_config(cfg, "production", state)
    python(cfg)
    model_dir(cfg)
    print(f"restore check: would restore {snap['sha256']} ({eng['arm']})")
    facts({"snapshot_sha256": snap["sha256"], "arm": eng["arm"]})


def watch(cfg: dict[str, Any], state: Path) -> None:
    ok = all(request(int(cfg["port"]), "/v1/completions",
                     {"prompt": f"Count to {n}", "max_tokens": 4, "temperature": 0}, timeout=120.0)[0] == 200
             for n in range(3))
    up = serving(cfg, state)
    print(f"watch: production {up}, 3 requests {'answered' if ok else 'not all answered'}")
    facts({"watch": "PASS" if ok and up == "up" else "FAIL", "serving": up, **production_facts(cfg, state)})


def quiet_proof(cfg: dict[str, Any], state: Path) -> None:
    current = routed(state)
    if current:
        raise Refused(f"{current['arm']} is routed")
    busy = [arm for arm, record in engines(state).items() if in_flight(int(record["port"]))]
    if busy:
        raise Refused(f"requests in flight on {', '.join(busy)}")
    facts({"quiet": True})


def list_arms(cfg: dict[str, Any], state: Path) -> None:
    """The arms start_arm can start and the config_digest a start of each reports (read before the drain:
    a plan naming another arm, or another digest, is refused before any host action). The speculative
    config is not listed: a start reads it from the engine's start-up line."""
    arms = {name: {"config_digest": engine_config(cfg, name, state)["config_digest"]}
            for name in sorted(cfg.get("arms", {}))}
    print(f"{len(arms)} arms: {', '.join(arms)}")
    facts({"arms": arms})


def production_down_proof(cfg: dict[str, Any], state: Path) -> None:
    if serving(cfg, state) != "down":
        raise Refused("production is up")
    facts({"serving": "down"})


def up(cfg: dict[str, Any], state: Path) -> None:
    """Start the router and production (restart) or every arm's engine (resident, started together)."""
    ensure_router(cfg, state)
    name = arm_name(cfg, "production")
    wanted = [name] if cfg.get("mode", "restart") == "restart" else list(cfg.get("resident_arms", sorted(cfg["arms"])))
    missing = [arm for arm in wanted if arm not in engines(state)]
    if len(missing) > 1:   # start them side by side: each takes minutes
        children = [subprocess.Popen([sys.executable, __file__, str(state), "launch", arm]) for arm in missing]
        codes = [child.wait() for child in children]
        if any(codes):
            raise Refused(f"engines did not all start ({dict(zip(missing, codes, strict=True))})")
    elif missing:
        launch(cfg, state, missing[0])
    route(state, engines(state)[name], "production")
    print(f"production ({name}) serves on port {cfg['port']}")


def stop_all(cfg: dict[str, Any], state: Path) -> None:
    route(state, None, None)
    for arm in list(engines(state)):
        stop_engine(state, arm)
    router = read_json(state / "router.json")
    if router is not None and alive(int(router["pid"])):
        with contextlib.suppress(OSError):
            os.killpg(int(router["pid"]), signal.SIGTERM)
        print(f"stopped the router (pid {router['pid']})")
    (state / "router.json").unlink(missing_ok=True)


def status(cfg: dict[str, Any], state: Path) -> None:
    print(json.dumps({"mode": cfg.get("mode", "restart"), "route": read_json(state / "route.json"),
                      "serving": serving(cfg, state),
                      "engines": {arm: {"pid": r["pid"], "port": r["port"], "ready_s": r.get("ready_s")}
                                  for arm, r in engines(state).items()}}, indent=2, sort_keys=True))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    state = Path(argv[0]).resolve()
    state.mkdir(parents=True, exist_ok=True)
    action, rest = argv[1], argv[2:]
    req = json.loads(os.environ.get("TALLY_REQUEST") or "{}")
    with (state / "actions.log").open("a") as log:
        log.write(" ".join([action, *rest]) + "\n")
    try:
        cfg = config()
        if action in ("preflight", "probe"):
            preflight(cfg, state)
        elif action == "snapshot":
            snapshot(cfg, state)
        elif action == "drain":
            drain(cfg, state)
        elif action == "start_arm":
            start_arm(cfg, state, rest[0], rest[1] if len(rest) > 1 else rest[0])
        elif action in ("stop_arm", "experiment_stop"):
            stop_arm(cfg, state)
        elif action == "warmup":
            warmup(cfg, state, req)
        elif action == "restore":
            restore(cfg, state, req)
        elif action == "watch":
            watch(cfg, state)
        elif action == "restore_check":
            restore_check(cfg, state, req)
        elif action == "quiet_proof":
            quiet_proof(cfg, state)
        elif action == "production_down_proof":
            production_down_proof(cfg, state)
        elif action == "list_arms":
            list_arms(cfg, state)
        elif action == "up":
            up(cfg, state)
        elif action == "launch":   # one engine (``up`` starts several side by side this way)
            launch(cfg, state, rest[0])
        elif action == "stop-engine":
            stop_engine(state, arm_name(cfg, rest[0]))
        elif action == "stop-all":
            stop_all(cfg, state)
        elif action == "digest":
            print(engine_config(cfg, rest[0], state)["config_digest"])
        elif action == "status":
            status(cfg, state)
        else:
            raise Refused(f"unknown action {action}")
    except Refused as exc:
        print(f"{action}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
