"""One run of each demo scenario per test session, shared by the tests that read it.

The wheel built from the package's sources is installed in a fresh virtualenv, and its
``tally demo --scenario S --json`` runs each scenario once, from a directory outside the
checkout, two at a time (one process per core). ``tests/test_packaging.py`` asserts that
every scenario ran from the wheel's own copy; ``tests/test_readme.py`` reads the same runs
for what each scenario shows (its ledger's event shapes, its endings and decisions). A
scenario runs when a test first asks for it (``DemoRuns.get``), so a test selected alone
waits only for its own. The fixtures (``installed_wheel``, ``demo_runs``) are in
``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

__all__ = ["DemoRun", "DemoRuns", "install_wheel", "wheel_env"]

REPO = Path(__file__).resolve().parents[1]


def install_wheel(root: Path) -> Path:
    """The wheel built from the package's sources, installed in a fresh virtualenv under ``root``; the venv.

    Its dependencies come from the machine's package index (pip's own configuration)."""
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("ledger", "runner", "cli", "migrations"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = root / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("tally-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                             capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


def wheel_env() -> dict[str, str]:
    """The environment the wheel's commands run in: nothing pointing back at the checkout's packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@dataclass(frozen=True)
class DemoRun:
    """One ``tally demo`` run of the installed wheel: its scenario, its ``--dir`` and the finished process."""

    scenario: str
    directory: Path
    proc: subprocess.CompletedProcess[str]

    @cached_property
    def summary(self) -> dict[str, Any]:
        """The scenario's ``--json`` summary (every scenario but ``ledger``), once it ran cleanly."""
        assert self.proc.returncode == 0, f"{self.scenario}: {self.proc.stderr[-3000:]}"
        value: dict[str, Any] = json.loads(self.proc.stdout)
        return value

    def path(self, reported: str) -> Path:
        """A path the summary reports (relative to where the demo ran, like its ``--dir``)."""
        return self.directory.parent / reported


class DemoRuns:
    """Each scenario run at most once (two at a time), from ``elsewhere``, by the wheel installed in ``venv``."""

    def __init__(self, venv: Path, elsewhere: Path) -> None:
        self.venv, self.elsewhere = venv, elsewhere
        self._pool = ThreadPoolExecutor(max_workers=2)  # each scenario is one process on one core; two cores
        self._runs: dict[str, Future[DemoRun]] = {}

    def get(self, *scenarios: str) -> list[DemoRun]:
        """The runs of ``scenarios``, in that order: each started now unless it already ran or runs."""
        futures = [self._runs.get(s) or self._runs.setdefault(s, self._pool.submit(self._run, s)) for s in scenarios]
        return [future.result() for future in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, scenario: str) -> DemoRun:
        directory = self.elsewhere / f"demo-{scenario}"
        args = [str(self.venv / "bin" / "tally"), "demo", "--dir", directory.name]
        args += [] if scenario == "window" else ["--scenario", scenario]
        args += [] if scenario == "ledger" else ["--json"]
        proc = subprocess.run(args, cwd=self.elsewhere, env=wheel_env(), capture_output=True, text=True, timeout=900)
        return DemoRun(scenario, directory, proc)
