"""Site files: which hosts a window runs on and how each host action is done (``docs/site.md``).

``load_site(path)`` reads a TOML site file, checks every field (a ``FieldError``
names the file and the field in error) and returns the :class:`HostDriver` it
describes: ``kind = "commands"`` (command templates) or ``kind = "sim"`` (the built-in
simulator's control API). Loading touches no host.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledger.errors import ExternalError
from ledger.strictfile import read_limited
from ledger.stricttoml import MAX_TOML_BYTES, MAX_TOML_DEPTH, read_toml

from ..fields import Fields
from ..measure.urls import has_credentials, redact
from ..vocabulary import COUNTER_SOURCES, CounterSourceName
from .base import ACTIONS, CHAIN_ACTIONS, DEFAULT_TIMEOUTS_S, OPTIONAL_ACTIONS, HostDriver
from .commands import CommandsDriver, CommandTemplate, is_plain_word, parse_template
from .sim import SimDriver

__all__ = ["HOST_NAME", "MAX_TOML_DEPTH", "REQUIRED_COMMAND_ACTIONS", "load_site", "read_toml", "site_from_dict",
           "site_time_scale"]


HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
REQUIRED_COMMAND_ACTIONS = tuple(a for a in ACTIONS if a not in CHAIN_ACTIONS | OPTIONAL_ACTIONS)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")
_COMMON = {"kind", "production_clock_cap_mhz", "clocks", "actions", "allow_unreachable"}
_FIELDS = {
    "commands": _COMMON | {"hosts", "endpoints", "state_dir", "kill_grace_s", "pass_env"},
    "sim": _COMMON | {"url", "hosts", "endpoints"},
}


def load_site(path: str | Path, *, check_programs: bool = True) -> HostDriver:
    """Read and check a site file; the driver it describes.

    Relative paths (``state_dir``, program paths) are relative to the file's directory,
    which is also where commands run. ``check_programs`` checks that each command's
    program exists here (turn off to check a site written for another machine).
    """
    path = Path(path)
    raw = read_limited(path, "site file", MAX_TOML_BYTES)  # a regular file, not through a symlink
    data = read_toml(raw, f"site file {path}", invalid="not TOML")
    return site_from_dict(data, base_dir=path.resolve().parent, where=f"site file {path}",
                          check_programs=check_programs)


def site_from_dict(data: Mapping[str, Any], *, base_dir: Path, where: str = "site",
                   check_programs: bool = True) -> HostDriver:
    """The driver a parsed site file describes (see :func:`load_site`)."""
    f = Fields(data, "", source=where)
    kind = f.raw("kind")
    if kind not in _FIELDS:
        raise f.fail("kind", f'must be "commands" or "sim", got {kind!r}')
    unknown = sorted(set(data) - _FIELDS[kind])
    if unknown:
        raise f.fail_here(f"unknown field {unknown[0]!r} for a {kind} site")
    driver: SimDriver | CommandsDriver = _sim_site(f) if kind == "sim" else _commands_site(f, base_dir, check_programs)
    if f.has("allow_unreachable"):
        driver.allow_unreachable = _allow_unreachable(f, driver.hosts)
    return driver


def _allow_unreachable(f: Fields, hosts: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """``allow_unreachable = {"production-policy" = ["spark-worker"], ...}``: per mode, hosts of this site.

    The modes are checked against the plan when a window runs (a mode name here that no plan uses
    simply never applies); a drivers module does not read plans.
    """
    if not isinstance(f.raw("allow_unreachable"), Mapping):
        raise f.fail("allow_unreachable", "must be a table: mode -> list of host names")
    table = f.table("allow_unreachable")
    out: dict[str, tuple[str, ...]] = {}
    for mode in table.data:
        if not HOST_NAME.fullmatch(mode):
            raise table.fail(mode, "not a mode name")
        names = table.strings(mode)
        unknown = [n for n in names if n not in hosts]
        if unknown:
            raise table.fail(mode, f"{unknown[0]!r} is not a host of this site")
        if set(names) >= set(hosts):
            raise table.fail(mode, "lists every host of the site: a window of this mode could hold nothing it "
                                   "can reach (at least one host must answer)")
        out[mode] = tuple(names)
    return out


# ---------------------------------------------------------------------- kinds

def _sim_site(f: Fields) -> SimDriver:
    url = _url(f, "url")
    hosts = None
    if f.has("hosts"):
        names = f.raw("hosts")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise f.fail("hosts", "must be a non-empty list of host names (head first)")
        for index, name in enumerate(names):
            _host_name(f, f"hosts[{index}]", name)
        if len(set(names)) != len(names):
            raise f.fail("hosts", "host names must be unique")
        hosts = tuple(names)
    clocks = f.boolean("clocks", True)
    cap = _cap(f, required=False, clocks=clocks)
    source: CounterSourceName = "vllm"
    if "endpoints" in f.data:
        if not isinstance(f.raw("endpoints"), Mapping):
            raise f.fail("endpoints", "must be a table (a sim site sets only counter_source there)")
        endpoints = f.table("endpoints")
        unknown = sorted(set(endpoints.data) - {"counter_source"})
        if unknown:
            raise endpoints.fail(unknown[0], "a sim site sets only counter_source (the simulator is the endpoint)")
        source = _counter_source(endpoints)
    timeouts: dict[str, float] = {}
    for action, table in _action_tables(f).items():
        extra = sorted(set(table.data) - {"timeout_s"})
        if extra:
            raise table.fail(extra[0], "a sim site sets only timeout_s (the simulator runs the action)")
        if table.has("timeout_s"):
            timeouts[action] = _seconds(table, "timeout_s")
    return SimDriver(url, timeouts=timeouts, hosts=hosts, production_clock_cap_mhz=cap, clocks=clocks,
                     counter_source=source)


def _commands_site(f: Fields, base_dir: Path, check_programs: bool) -> CommandsDriver:
    hosts = _hosts(f)
    if not isinstance(f.raw("endpoints"), Mapping):
        raise f.fail("endpoints", "required table with serving_url (and metrics_urls)")
    endpoints = f.table("endpoints")
    unknown = sorted(set(endpoints.data) - {"serving_url", "metrics_urls", "counter_source"})
    if unknown:
        raise endpoints.fail(unknown[0], "unknown field")
    source = _counter_source(endpoints)
    serving = _url(endpoints, "serving_url").rstrip("/")
    metrics_raw = endpoints.raw("metrics_urls")
    if metrics_raw is None:
        metrics_raw = [f"{serving}/metrics"]
    if not isinstance(metrics_raw, list) or not metrics_raw:
        raise endpoints.fail("metrics_urls", "must be a non-empty list of URLs")
    metrics = tuple(_check_url(endpoints, f"metrics_urls[{i}]", u) for i, u in enumerate(metrics_raw))
    clocks = f.boolean("clocks", True)
    cap = _site_cap(f, clocks)
    state_dir = None
    if "state_dir" in f.data:
        value = f.raw("state_dir")
        if not isinstance(value, str) or not value:
            raise f.fail("state_dir", "must be a non-empty path")
        state_dir = (base_dir / value).resolve()
    grace = _seconds(f, "kill_grace_s", 5.0)
    pass_env = f.strings("pass_env", (), pattern=_ENV_NAME, what="an environment variable name")
    for index, name in enumerate(pass_env):
        if name.startswith("TALLY_"):
            raise f.fail(f"pass_env[{index}]", f"{name} is tally's own: it never reaches a site command")
    commands: dict[str, CommandTemplate] = {}
    for action, table in _action_tables(f).items():
        extra = sorted(set(table.data) - {"command", "timeout_s"})
        if extra:
            raise table.fail(extra[0], "unknown field (an action has command and timeout_s)")
        command = table.raw("command")
        if not isinstance(command, str) or not command.strip():
            raise table.fail("command", "required, a command template string")
        timeout = _seconds(table, "timeout_s", DEFAULT_TIMEOUTS_S[action])
        where = f"{f.source}: {table.at('command')}" if f.source else table.at("command")
        template = parse_template(action, command, timeout, where)
        if check_programs:
            _program(template.argv[0], base_dir, table)
        commands[action] = template
    required = [a for a in REQUIRED_COMMAND_ACTIONS if clocks or a != "read_clock_cap"]
    missing = [a for a in required if a not in commands]
    if missing:
        raise f.fail(f"actions.{missing[0]}", f"required (a commands site needs {', '.join(required)})")
    if not clocks and "read_clock_cap" in commands:
        raise f.fail("actions.read_clock_cap", "the site declares clocks = false: there is no clock cap to read")
    constants = {"state_dir": str(state_dir) if state_dir is not None else "", "serving_url": serving}
    for action, template in commands.items():
        if "state_dir" in template.fields and state_dir is None:
            raise f.fail_here(f"actions.{action}.command uses {{state_dir}} but the site sets no state_dir")
        for name in sorted(template.reparsed & set(constants)):
            if not is_plain_word(constants[name]):  # ssh's remote shell (or sh -c) would parse it again
                raise f.fail(f"actions.{action}.command",
                             f"{{{name}}} is {constants[name][:120]!r}, not a plain word, and this argument is "
                             "parsed again by a shell (the remote shell behind ssh, or sh -c): give the site a "
                             f"{name} of letters, digits and . _ - : @ % + = , / only, or pass it another way "
                             "(docs/site.md, \"Remote shells\")")
    return CommandsDriver(hosts=hosts, serving_url=serving, metrics_urls=metrics, production_clock_cap_mhz=cap,
                          commands=commands, cwd=base_dir, state_dir=state_dir, kill_grace_s=grace, pass_env=pass_env,
                          counter_source=source)


# ---------------------------------------------------------------------- fields

def _action_tables(f: Fields) -> dict[str, Fields]:
    actions = f.raw("actions")
    if actions is None:
        return {}
    if not isinstance(actions, Mapping):
        raise f.fail("actions", "must be a table of [actions.<name>] tables")
    out: dict[str, Fields] = {}
    for name, table in actions.items():
        if name not in ACTIONS:
            raise f.fail(f"actions.{name}", f"unknown action; actions: {', '.join(ACTIONS)}")
        if not isinstance(table, Mapping):
            raise f.fail(f"actions.{name}", "must be a table")
        out[name] = Fields(table, f"actions.{name}", source=f.source)
    return out


def _counter_source(endpoints: Fields) -> CounterSourceName:
    """``[endpoints] counter_source``: where the server's counters come from (default ``vllm``)."""
    value = endpoints.raw("counter_source")
    if value is None:
        return "vllm"
    for name in COUNTER_SOURCES:
        if value == name:
            return name
    raise endpoints.fail("counter_source", f"must be one of {', '.join(COUNTER_SOURCES)}, got {value!r}")


def _hosts(f: Fields) -> dict[str, str]:
    value = f.raw("hosts")
    if not isinstance(value, list) or not value:
        raise f.fail("hosts", "required, one [[hosts]] table per host (name, role)")
    hosts: dict[str, str] = {}
    for index, table in enumerate(value):
        field = f"hosts[{index}]"
        if not isinstance(table, Mapping):
            raise f.fail(field, "must be a table with name and role")
        unknown = sorted(set(table) - {"name", "role", "production_clock_cap_mhz"})
        if unknown:
            raise f.fail(f"{field}.{unknown[0]}", "unknown field")
        name = _host_name(f, f"{field}.name", table.get("name"))
        if name in hosts:
            raise f.fail(f"{field}.name", f"host {name!r} appears twice")
        role = table.get("role")
        if role not in ("head", "worker"):
            raise f.fail(f"{field}.role", f'must be "head" or "worker", got {role!r}')
        hosts[name] = role
    heads = [name for name, role in hosts.items() if role == "head"]
    if len(heads) != 1:
        raise f.fail("hosts", f'exactly one host must have role "head", found {len(heads)}')
    # head first, then the workers in file order
    return {heads[0]: "head", **{n: r for n, r in hosts.items() if r == "worker"}}


def _host_name(f: Fields, key: str, value: Any) -> str:
    if not isinstance(value, str) or not HOST_NAME.fullmatch(value):
        raise f.fail(key, f"must be a host name (letters, digits, . _ -), got {value!r}")
    return value


def _url(f: Fields, key: str) -> str:
    return _check_url(f, key, f.raw(key))


def _check_url(f: Fields, key: str, value: Any) -> str:
    if not isinstance(value, str) or not _URL.fullmatch(value):
        shown = redact(value) if isinstance(value, str) else value
        raise f.fail(key, f"must be an http:// or https:// URL, got {shown!r}")
    if has_credentials(value):
        # the site's URLs are recorded with every wave and given to site commands ({serving_url})
        raise f.fail(key, f"{redact(value)!r} carries credentials: a site URL is recorded with every wave and "
                          "passed to site commands, so it must not hold them")
    return value


def _cap(f: Fields, required: bool, clocks: bool) -> int | None:
    value = f.raw("production_clock_cap_mhz")
    if not clocks:
        if value is not None:
            raise f.fail("production_clock_cap_mhz", "the site declares clocks = false (no GPU clocks): "
                                                     "a clock cap does not apply")
        return None
    if value is None:
        if required:
            raise f.fail("production_clock_cap_mhz", "required, production's GPU clock cap in MHz")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise f.fail("production_clock_cap_mhz", f"must be a positive integer (MHz), got {value!r}")
    return value


def _site_cap(f: Fields, clocks: bool) -> int | None:
    """Production's cap: each host's own ``production_clock_cap_mhz`` where given (all equal, and equal to
    the site-wide one), else the site-wide one."""
    own: dict[str, int] = {}
    for index, table in enumerate(f.raw("hosts")):
        value = table.get("production_clock_cap_mhz")
        field = f"hosts[{index}].production_clock_cap_mhz"
        if value is None:
            continue
        if not clocks:
            raise f.fail(field, "the site declares clocks = false (no GPU clocks): a clock cap does not apply")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise f.fail(field, f"must be a positive integer (MHz), got {value!r}")
        own[str(table.get("name"))] = value
    cap = _cap(f, required=clocks and not own, clocks=clocks)
    if own:
        if len(own) != len(f.raw("hosts")):
            missing = [str(t.get("name")) for t in f.raw("hosts") if t.get("production_clock_cap_mhz") is None]
            raise f.fail("hosts", f"production_clock_cap_mhz is set per host, but not for {', '.join(missing)}")
        if len(set(own.values())) > 1:
            raise f.fail("hosts", "the hosts' production clock caps differ ("
                         + ", ".join(f"{h} {c} MHz" for h, c in own.items()) + "): production runs one cap")
        host_cap = next(iter(own.values()))
        if cap is not None and cap != host_cap:
            raise f.fail("production_clock_cap_mhz", f"{cap}, but the hosts are configured at {host_cap} MHz")
        cap = host_cap
    return cap


def _seconds(f: Fields, key: str, default: float | None = None) -> float:
    value = f.raw(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise f.fail(key, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _program(program: str, base_dir: Path, f: Fields) -> None:
    if "/" in program:
        candidate = (base_dir / program) if not Path(program).is_absolute() else Path(program)
        if not candidate.is_file():
            raise f.fail("command", f"program {program!r} not found (relative to {base_dir})")
        if not _executable(candidate):
            raise f.fail("command", f"program {program!r} is not executable")
    elif shutil.which(program) is None:
        raise f.fail("command", f"program {program!r} not found on PATH")


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
