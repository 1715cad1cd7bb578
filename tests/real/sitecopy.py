"""A real test's copy of an example command site (examples/site-llamacpp, examples/site-vllm).

What the llama.cpp and the vLLM copies share: the copy itself (the example's files, its
``site.toml`` pointed at a free port and at this interpreter), the paths a test reads, and
the site script's actions run as an operator runs them (``SCRIPT STATE ACTION ...``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

FACTS = "TALLY-FACTS "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def copy_example(example: Path, directory: Path, default_port: int, port: int) -> None:
    """Copy ``example`` into ``directory`` (no state, no caches); its site.toml serves on ``port`` and runs
    its commands with this interpreter."""
    shutil.copytree(example, directory, ignore=shutil.ignore_patterns("state", "__pycache__"))
    site = directory / "site.toml"
    text = site.read_text().replace(f"127.0.0.1:{default_port}", f"127.0.0.1:{port}")
    site.write_text(text.replace('command = "python3 ', f'command = "{sys.executable} '))


@dataclass
class SiteCopy:
    """A copy of an example site on a port of its own; ``SCRIPT`` is its site script's name."""

    SCRIPT: ClassVar[str]
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

    def command(self, *args: str) -> list[str]:
        return [sys.executable, str(self.directory / "site-scripts" / self.SCRIPT), str(self.state), *args]

    def script(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout,
                              cwd=self.directory)

    def facts(self, action: str) -> dict[str, Any]:
        done = self.script(action)
        line = next(line for line in done.stdout.splitlines() if line.startswith(FACTS))
        return dict(json.loads(line[len(FACTS):]))
