"""The two sites the driver contract runs against, with the same pretend pair and the same arms.

Both have hosts ``*-head`` and ``*-worker``, production at 2300 MHz and arm ``B`` at
2150 MHz, and offer the same test levers: fail an action once, hang an action once,
rebuild the driver with other timeouts on the same hosts.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import runner.sim as sim
from runner.drivers import ACTIONS, HostDriver, SimDriver
from runner.drivers.commands import group_members
from runner.drivers.site import load_site

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "examples" / "site-scripts"
ARM_B_CAP = 2150
PRODUCTION_CAP = 2300

# How each action calls statehost.sh (the same lines as examples/site-commands.toml).
ARGS = {"start_arm": "{arm} {role}", "restore": "{snapshot}", "read_clock_cap": "spark-head spark-worker", "fence": "{host}", "placeholder_up": "{host}",
        "placeholder_down": "{host}", "placeholder_proof": "{host}"}


def commands_site_text(timeouts: Mapping[str, float] | None = None, *, kill_grace_s: float = 0.5,
                       commands: Mapping[str, str] | None = None, drop: tuple[str, ...] = ()) -> str:
    """A commands site over ``site-scripts/statehost.sh`` and ``state/``, next to the site file."""
    lines = ['kind = "commands"', "production_clock_cap_mhz = 2300", 'state_dir = "state"',
             f"kill_grace_s = {kill_grace_s}", "",
             '[[hosts]]', 'name = "spark-head"', 'role = "head"', "",
             '[[hosts]]', 'name = "spark-worker"', 'role = "worker"', "",
             "[endpoints]", 'serving_url = "http://127.0.0.1:8000"',
             'metrics_urls = ["http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics"]', ""]
    for action in ACTIONS:
        if action in drop or (action == "list_arms" and "list_arms" not in (commands or {})):
            continue   # list_arms only when asked: statehost.sh lists arms only from its arms.json
        command = (commands or {}).get(action) or f"site-scripts/statehost.sh {{state_dir}} {action} {ARGS.get(action, '')}"
        lines += [f"[actions.{action}]", f"command = {json.dumps(command.strip())}"]
        if timeouts and action in timeouts:
            lines.append(f"timeout_s = {timeouts[action]}")
        lines.append("")
    return "\n".join(lines)


class CommandsRig:
    """The command-template driver on a state directory (examples/site-scripts/statehost.sh)."""

    kind = "commands"
    head, worker = "spark-head", "spark-worker"

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copytree(SCRIPTS, root / "site-scripts")
        self.state = root / "state"
        (self.state / "caps").mkdir(parents=True)
        (self.state / "caps" / "B").write_text(f"{ARM_B_CAP}\n")
        self.driver = self.make()

    def make(self, timeouts: Mapping[str, float] | None = None) -> HostDriver:
        site = self.root / "site.toml"
        site.write_text(commands_site_text(timeouts))
        return load_site(site)

    def fail_next(self, action: str) -> None:
        (self.state / "inject").mkdir(exist_ok=True)
        (self.state / "inject" / f"{action}.fail").write_text("7\n")

    def dial_back_and_recover(self, mhz: int) -> None:
        (self.state / "inject").mkdir(exist_ok=True)
        (self.state / "inject" / "dial_back").write_text(f"{mhz}\n")

    def disagree(self, host: str, mhz: int) -> None:
        (self.state / "inject").mkdir(exist_ok=True)
        (self.state / "inject" / f"host_cap.{host}").write_text(f"{mhz}\n")

    def hang_next(self, action: str) -> dict[str, Any]:
        (self.state / "inject").mkdir(exist_ok=True)
        (self.state / "inject" / f"{action}.hang").touch()
        return {}

    def assert_hang_cleaned(self) -> None:
        pgid, child = (int(p) for p in (self.state / "hang.pids").read_text().split())
        assert group_members(pgid) == [], "the timed-out command's process group is still alive"
        assert child not in _live_pids(), "the timed-out command's child is still alive"

    def close(self) -> None:
        pass


def _live_pids() -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                pids.add(int(entry.name))
    return pids


def sim_config() -> sim.SimConfig:
    """A fast simulated pair: instant starts, no jitter, arm B capped at 2150 MHz."""
    base = sim.default_config().with_(time_scale=0.01, start_s=0.0, start_jitter=0.0, step_jitter=0.0,
                                      hosts=["sim-head", "sim-worker"])
    return base.with_arm("B", clock_cap_mhz=ARM_B_CAP)


class SimRig:
    """The simulator driver against a real simulator on 127.0.0.1, stopped by ``close``."""

    kind = "sim"
    head, worker = "sim-head", "sim-worker"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.handle = sim.start(sim_config(), seed=3)
        self.driver = self.make()

    def make(self, timeouts: Mapping[str, float] | None = None) -> HostDriver:
        site = self.root / "site-sim.toml"
        lines = ['kind = "sim"', f'url = "{self.handle.url}"', ""]
        for action, seconds in (timeouts or {}).items():
            lines += [f"[actions.{action}]", f"timeout_s = {seconds}", ""]
        site.write_text("\n".join(lines))
        driver = load_site(site)
        assert isinstance(driver, SimDriver)
        return driver

    def fail_next(self, action: str) -> None:
        self.handle.set_faults(action_fail={"action": action, "status": 500})

    def dial_back_and_recover(self, mhz: int) -> None:
        back = self.handle.state()["clock"]["current_mhz"]
        self.handle.control("thermal", cap_mhz=mhz)
        self.handle.control("thermal", cap_mhz=back)

    def disagree(self, host: str, mhz: int) -> None:
        self.handle.set_faults(host_clock_cap={"host": host, "cap_mhz": mhz})

    def hang_next(self, action: str) -> dict[str, Any]:
        return {"sim": {"slow_start_s": 3.0}}

    def assert_hang_cleaned(self) -> None:
        pass  # nothing of ours runs: the simulator keeps its own engine

    def close(self) -> None:
        self.handle.stop()
