"""Site files: which hosts a window runs on and how each host action is done (``docs/site.md``).

``load_site(path)`` reads a TOML site file, checks every field (a ``FormatError``
names the file and the field in error) and returns the :class:`HostDriver` it
describes: ``kind = "commands"`` (command templates) or ``kind = "sim"`` (the built-in
simulator's control API). Loading touches no host.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledger.errors import ExternalError, FormatError

from .base import ACTIONS, CHAIN_ACTIONS, DEFAULT_TIMEOUTS_S, HostDriver
from .commands import CommandsDriver, CommandTemplate, parse_template
from .sim import SimDriver

__all__ = ["HOST_NAME", "REQUIRED_COMMAND_ACTIONS", "load_site", "site_from_dict", "site_time_scale"]

HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
REQUIRED_COMMAND_ACTIONS = tuple(a for a in ACTIONS if a not in CHAIN_ACTIONS)
_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")
_COMMON = {"kind", "production_clock_cap_mhz", "actions"}
_FIELDS = {
    "commands": _COMMON | {"hosts", "endpoints", "state_dir", "kill_grace_s"},
    "sim": _COMMON | {"url", "hosts"},
}


def load_site(path: str | Path, *, check_programs: bool = True) -> HostDriver:
    """Read and check a site file; the driver it describes.

    Relative paths (``state_dir``, program paths) are relative to the file's directory,
    which is also where commands run. ``check_programs`` checks that each command's
    program exists here (turn off to check a site written for another machine).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read site file {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"site file {path}: not TOML: {exc}") from None
    return site_from_dict(data, base_dir=path.resolve().parent, where=f"site file {path}",
                          check_programs=check_programs)


def site_from_dict(data: Mapping[str, Any], *, base_dir: Path, where: str = "site",
                   check_programs: bool = True) -> HostDriver:
    """The driver a parsed site file describes (see :func:`load_site`)."""
    kind = data.get("kind")
    if kind not in _FIELDS:
        raise FormatError(f"{where}: kind: must be \"commands\" or \"sim\", got {kind!r}")
    unknown = sorted(set(data) - _FIELDS[kind])
    if unknown:
        raise FormatError(f"{where}: unknown field {unknown[0]!r} for a {kind} site")
    if kind == "sim":
        return _sim_site(data, where)
    return _commands_site(data, base_dir, where, check_programs)


# ---------------------------------------------------------------------- kinds

def _sim_site(data: Mapping[str, Any], where: str) -> SimDriver:
    url = _url(data.get("url"), f"{where}: url")
    hosts = None
    if "hosts" in data:
        names = data["hosts"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise FormatError(f"{where}: hosts: must be a non-empty list of host names (head first)")
        for index, name in enumerate(names):
            _host_name(name, f"{where}: hosts[{index}]")
        if len(set(names)) != len(names):
            raise FormatError(f"{where}: hosts: host names must be unique")
        hosts = tuple(names)
    cap = _cap(data, where, required=False)
    timeouts: dict[str, float] = {}
    for action, table in _action_tables(data, where).items():
        extra = sorted(set(table) - {"timeout_s"})
        if extra:
            raise FormatError(f"{where}: actions.{action}.{extra[0]}: a sim site sets only timeout_s "
                              "(the simulator runs the action)")
        if "timeout_s" in table:
            timeouts[action] = _seconds(table["timeout_s"], f"{where}: actions.{action}.timeout_s")
    return SimDriver(url, timeouts=timeouts, hosts=hosts, production_clock_cap_mhz=cap)


def _commands_site(data: Mapping[str, Any], base_dir: Path, where: str, check_programs: bool) -> CommandsDriver:
    hosts = _hosts(data.get("hosts"), f"{where}: hosts")
    endpoints = data.get("endpoints")
    if not isinstance(endpoints, Mapping):
        raise FormatError(f"{where}: endpoints: required table with serving_url (and metrics_urls)")
    unknown = sorted(set(endpoints) - {"serving_url", "metrics_urls"})
    if unknown:
        raise FormatError(f"{where}: endpoints.{unknown[0]}: unknown field")
    serving = _url(endpoints.get("serving_url"), f"{where}: endpoints.serving_url").rstrip("/")
    metrics_raw = endpoints.get("metrics_urls", [f"{serving}/metrics"])
    if not isinstance(metrics_raw, list) or not metrics_raw:
        raise FormatError(f"{where}: endpoints.metrics_urls: must be a non-empty list of URLs")
    metrics = tuple(_url(u, f"{where}: endpoints.metrics_urls[{i}]") for i, u in enumerate(metrics_raw))
    cap = _cap(data, where, required=True)
    assert cap is not None
    state_dir = None
    if "state_dir" in data:
        if not isinstance(data["state_dir"], str) or not data["state_dir"]:
            raise FormatError(f"{where}: state_dir: must be a non-empty path")
        state_dir = (base_dir / data["state_dir"]).resolve()
    grace = _seconds(data.get("kill_grace_s", 5.0), f"{where}: kill_grace_s")
    commands: dict[str, CommandTemplate] = {}
    for action, table in _action_tables(data, where).items():
        field = f"{where}: actions.{action}"
        extra = sorted(set(table) - {"command", "timeout_s"})
        if extra:
            raise FormatError(f"{field}.{extra[0]}: unknown field (an action has command and timeout_s)")
        command = table.get("command")
        if not isinstance(command, str) or not command.strip():
            raise FormatError(f"{field}.command: required, a command template string")
        timeout = _seconds(table.get("timeout_s", DEFAULT_TIMEOUTS_S[action]), f"{field}.timeout_s")
        template = parse_template(action, command, timeout, f"{field}.command")
        if check_programs:
            _program(template.argv[0], base_dir, f"{field}.command")
        commands[action] = template
    missing = [a for a in REQUIRED_COMMAND_ACTIONS if a not in commands]
    if missing:
        raise FormatError(f"{where}: actions.{missing[0]}: required (a commands site needs "
                          f"{', '.join(REQUIRED_COMMAND_ACTIONS)})")
    for action, template in commands.items():
        if "state_dir" in template.fields and state_dir is None:
            raise FormatError(f"{where}: actions.{action}.command uses {{state_dir}} but the site sets no state_dir")
    return CommandsDriver(hosts=hosts, serving_url=serving, metrics_urls=metrics, production_clock_cap_mhz=cap,
                          commands=commands, cwd=base_dir, state_dir=state_dir, kill_grace_s=grace)


# ---------------------------------------------------------------------- fields

def _action_tables(data: Mapping[str, Any], where: str) -> dict[str, Mapping[str, Any]]:
    actions = data.get("actions", {})
    if not isinstance(actions, Mapping):
        raise FormatError(f"{where}: actions: must be a table of [actions.<name>] tables")
    out: dict[str, Mapping[str, Any]] = {}
    for name, table in actions.items():
        if name not in ACTIONS:
            raise FormatError(f"{where}: actions.{name}: unknown action; actions: {', '.join(ACTIONS)}")
        if not isinstance(table, Mapping):
            raise FormatError(f"{where}: actions.{name}: must be a table")
        out[name] = table
    return out


def _hosts(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, list) or not value:
        raise FormatError(f"{where}: required, one [[hosts]] table per host (name, role)")
    hosts: dict[str, str] = {}
    for index, table in enumerate(value):
        field = f"{where}[{index}]"
        if not isinstance(table, Mapping):
            raise FormatError(f"{field}: must be a table with name and role")
        unknown = sorted(set(table) - {"name", "role"})
        if unknown:
            raise FormatError(f"{field}.{unknown[0]}: unknown field")
        name = _host_name(table.get("name"), f"{field}.name")
        if name in hosts:
            raise FormatError(f"{field}.name: host {name!r} appears twice")
        role = table.get("role")
        if role not in ("head", "worker"):
            raise FormatError(f"{field}.role: must be \"head\" or \"worker\", got {role!r}")
        hosts[name] = role
    heads = [name for name, role in hosts.items() if role == "head"]
    if len(heads) != 1:
        raise FormatError(f"{where}: exactly one host must have role \"head\", found {len(heads)}")
    # head first, then the workers in file order
    return {heads[0]: "head", **{n: r for n, r in hosts.items() if r == "worker"}}


def _host_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not HOST_NAME.fullmatch(value):
        raise FormatError(f"{where}: must be a host name (letters, digits, . _ -), got {value!r}")
    return value


def _url(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _URL.fullmatch(value):
        raise FormatError(f"{where}: must be an http:// or https:// URL, got {value!r}")
    return value


def _cap(data: Mapping[str, Any], where: str, required: bool) -> int | None:
    value = data.get("production_clock_cap_mhz")
    if value is None:
        if required:
            raise FormatError(f"{where}: production_clock_cap_mhz: required, production's GPU clock cap in MHz")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"{where}: production_clock_cap_mhz: must be a positive integer (MHz), got {value!r}")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise FormatError(f"{where}: must be a positive number of seconds, got {value!r}")
    return float(value)


def _program(program: str, base_dir: Path, where: str) -> None:
    if "/" in program:
        candidate = (base_dir / program) if not Path(program).is_absolute() else Path(program)
        if not candidate.is_file():
            raise FormatError(f"{where}: program {program!r} not found (relative to {base_dir})")
        if not _executable(candidate):
            raise FormatError(f"{where}: program {program!r} is not executable")
    elif shutil.which(program) is None:
        raise FormatError(f"{where}: program {program!r} not found on PATH")


def _executable(path: Path) -> bool:
    return os.access(path, os.X_OK)


def site_time_scale(driver: HostDriver) -> float:
    """Window minutes per wall minute, inverted: 1.0 on a real site, the simulator's own scale on a sim site."""
    if driver.kind != "sim":
        return 1.0
    import httpx

    url = getattr(driver, "url", None)
    if not isinstance(url, str):
        return 1.0
    try:
        body = httpx.get(f"{url}/_sim/config", timeout=10.0).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ExternalError(f"simulator at {url} did not give its config: {exc}") from None
    scale = body.get("time_scale", 1.0) if isinstance(body, dict) else 1.0
    return float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0
