"""One real vLLM pair per test session: the example site (examples/site-vllm) in a temporary copy, resident.

The site's two engines (plain and ngram) start once per session, side by side (about
5 GB each: never more than two), and every test shares them: a start takes two to three
minutes on 2 CPU cores, so the windows run the site in ``resident`` mode (a start routes
the serving port to an engine kept up; docs/real-servers.md). Every server runs on 127.0.0.1 and is
stopped by pid when the session ends, also after a failure.

The install is ``make vllm``: the vLLM virtualenv (``VLLM_VENV``, default ``.venv-vllm``)
and the converted model (``VLLM_MODEL_DIR``, default ``.vllm-model``), both relative to
the repository. The tests skip (with the reason) when either is missing, unless
``TALLY_REQUIRE_VLLM=1`` (set by ``.ci/run``), which turns that into a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .sitecopy import SiteCopy, alive, copy_example, free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "site-vllm"
MODEL_NAME = "smollm2"
EOS = 2                          # SmolLM2's <|im_end|>
MAX_ENGINES = 2                  # ~5 GB each: never more than two up at once


def _repo_path(value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else REPO / path


def venv() -> Path:
    return _repo_path(os.environ.get("VLLM_VENV", ".venv-vllm"))


def model_dir() -> Path:
    return _repo_path(os.environ.get("VLLM_MODEL_DIR", ".vllm-model"))


def unavailable() -> str | None:
    """Why the real vLLM pair cannot run here (None: it can)."""
    python = venv() / "bin" / "python"
    if not python.exists():
        return f"no vLLM virtualenv at {venv()} (make vllm)"
    if not list((venv() / "lib").glob("python3*/site-packages/vllm/__init__.py")):
        return f"vLLM is not installed in {venv()} (make vllm)"
    if not (model_dir() / "model.safetensors").is_file() or not (model_dir() / "config.json").is_file():
        return f"no converted model at {model_dir()} (make vllm)"
    return None


@dataclass
class VllmSite(SiteCopy):
    """A copy of the example site, resident, on ports of its own."""

    SCRIPT = "vllmsite.py"
    ports: dict[str, int] = field(default_factory=dict)
    started_s: dict[str, float] = field(default_factory=dict)

    def url(self, arm: str) -> str:
        """The engine's own URL (not through the router); the engine is started first if need be."""
        self.ensure(arm)
        return f"http://127.0.0.1:{self.ports[arm]}"

    def records(self) -> dict[str, dict[str, Any]]:
        out = {}
        for path in (self.state / "engines").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(path.read_text())
                out[str(record["arm"])] = record
        return out

    def running(self) -> list[str]:
        return sorted(arm for arm, r in self.records().items() if alive(int(r["pid"])))

    def ensure(self, *arms: str) -> None:
        """Have these engines up (started side by side), stopping others so that at most two run."""
        missing = [arm for arm in arms if arm not in self.running()]
        if not missing:
            return
        keep = set(arms)
        for other in self.running():
            if len(self.running()) + len(missing) <= MAX_ENGINES:
                break
            if other not in keep:
                self.script("stop-engine", other, timeout=120)
        started = time.monotonic()
        children = [(arm, subprocess.Popen(self.command("launch", arm), cwd=self.directory, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True))
                    for arm in missing]
        failures = []
        for arm, child in children:
            _out, err = child.communicate(timeout=1200)
            if child.returncode != 0:
                failures.append(f"{arm}: {err.strip()[-500:]}")
            self.started_s[arm] = round(time.monotonic() - started, 1)
        if failures:
            raise RuntimeError("vLLM engines did not start: " + "; ".join(failures))

    def stop(self) -> None:
        """Stop whatever runs (the site's own stop, then each process group by pid)."""
        pids = [int(r["pid"]) for r in self.records().values()]
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(json.loads((self.state / "router.json").read_text())["pid"]))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.script("stop-all", timeout=120)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def make_site(directory: Path) -> VllmSite:
    """Copy the example site, point it at this machine's install, make it resident (nothing started yet)."""
    port = free_port()
    copy_example(EXAMPLE, directory, 8100, port)
    ports = {"plain": free_port(), "ngram": free_port(), "prio": free_port()}
    config = directory / "vllmsite.toml"
    text = config.read_text()
    text = text.replace('"../../.venv-vllm/bin/python"', json.dumps(str(venv() / "bin" / "python")))
    text = text.replace('"../../.vllm-model"', json.dumps(str(model_dir())))
    text = text.replace('mode = "restart"', 'mode = "resident"\nresident_arms = ["plain", "ngram"]')
    text = text.replace("port = 8100", f"port = {port}").replace("port = 8101", f"port = {ports['plain']}")
    text = text.replace("port = 8102", f"port = {ports['ngram']}")
    # a third engine for the priority tests only: the plain one under --scheduling-policy priority (the pair's
    # two keep vLLM's default fcfs and the example plans' config digests)
    text += (f'\n[arms.prio]\nport = {ports["prio"]}\nargs = ["--scheduling-policy", "priority"]\n'
             'env = { VLLM_CPU_OMP_THREADS_BIND = "1" }\n')
    config.write_text(text)
    return VllmSite(directory, port, ports)
