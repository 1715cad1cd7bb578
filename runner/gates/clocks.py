"""GPU clocks at a start: every host's cap from its own log line, agreement, and dial-backs.

A site's ``read_clock_cap`` reports the start's cap (``clock_cap_mhz``), the log line it
read it from (``log_line``) and, on a multi-host site, every host's own reading
(``hosts``: host -> ``{clock_cap_mhz, log_line}``). :func:`read_caps` takes each host's
cap from the number in its own log line ("clock cap N MHz") and says what is wrong: a
host with no reading or no cap line (on a multi-host site one site-wide line is not every
node's), a host whose line and number disagree, hosts that disagree with each other, a
site-wide number that is not theirs. Any problem fails the start (the
``start_config`` gate). :func:`new_dial_backs` turns a ``read_thermal`` answer (the
host's THERMAL-WATCH log) into the dial-backs not yet recorded, and a line naming a host
the site does not have into a malformed reading (never that host's dial-back). Pure:
facts in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CAP_LINE", "ClockReading", "cap_in_line", "new_dial_backs", "read_caps", "restored_clock"]

CAP_LINE = re.compile(r"clock cap (\d{1,6}) ?MHz")
MAX_HOSTS = 64          # a hostile site cannot make the evidence huge
MAX_DIAL_BACKS = 256    # dial-backs read from one THERMAL-WATCH answer
_LINE_CHARS = 300
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _cap(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def cap_in_line(line: Any) -> int | None:
    """The cap a log line states ("clock cap 2300 MHz"), ``None`` when it states none."""
    if not isinstance(line, str):
        return None
    match = CAP_LINE.search(line[:_LINE_CHARS])
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ClockReading:
    """A start's cap as the hosts reported it."""

    cap: int | None                          # the cap the hosts agree on (else the site-wide number)
    hosts: Mapping[str, Mapping[str, Any]]   # host -> {clock_cap_mhz, log_line}
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"hosts": {h: dict(v) for h, v in self.hosts.items()}, "problems": list(self.problems)}


def _one(name: str, reading: Mapping[str, Any], problems: list[str]) -> int | None:
    number, line = _cap(reading.get("clock_cap_mhz")), reading.get("log_line")
    stated = cap_in_line(line)
    if stated is not None and number is not None and stated != number:
        problems.append(f"{name} reports clock cap {number} MHz, but its own log line says {stated} MHz")
    return stated if stated is not None else number


def read_caps(facts: Mapping[str, Any], hosts: Collection[str], action: str = "read_clock_cap") -> ClockReading:
    """Every host's cap from a ``read_clock_cap`` (or ``restore``) answer; the problems fail the start."""
    problems: list[str] = []
    site = _one("the site", facts, problems)
    per_host: dict[str, dict[str, Any]] = {}
    raw = facts.get("hosts")
    if raw is not None and not isinstance(raw, Mapping):
        problems.append(f"{action}'s hosts is not a table of host -> reading")
        raw = None
    caps: dict[str, int | None] = {}
    for name, reading in list((raw or {}).items())[:MAX_HOSTS]:
        if not isinstance(reading, Mapping):
            problems.append(f"{action}'s reading of {str(name)[:64]} is not a table")
            continue
        if name not in hosts:
            problems.append(f"{action} reports host {str(name)[:64]!r}, which the site does not have")
            continue
        caps[name] = _one(name, reading, problems)
        line = reading.get("log_line")
        per_host[name] = {"clock_cap_mhz": caps[name],
                          "log_line": line[:_LINE_CHARS] if isinstance(line, str) else None}
    if raw is None:
        named = ", ".join(list(hosts)[:8]) + (" ..." if len(hosts) > 8 else "")
        every = f"every host ({named}) must report its clock cap line"
        if site is None:
            problems.append(f"{action} reported no clock cap: {every}")
        elif len(hosts) > 1:
            problems.append(f"{action} gave one site-wide reading and no host's own: {every}")
        elif cap_in_line(facts.get("log_line")) is None:
            problems.append(f"{action} gave a clock cap number but no clock cap line: {every}")
    if raw is not None:
        unread = [h for h in hosts if h not in caps]
        if unread:
            problems.append(f"no clock cap read on {', '.join(unread)}")
        unknown = [h for h, c in caps.items() if c is None]
        if unknown:
            problems.append(f"no clock cap in the reading of {', '.join(unknown)}")
        lineless = [h for h, c in caps.items() if c is not None and cap_in_line(raw[h].get("log_line")) is None]
        if lineless:
            problems.append(f"no clock cap line from {', '.join(lineless)} (a number alone is not the host's log)")
    known = {h: c for h, c in caps.items() if c is not None}
    if len(set(known.values())) > 1:
        problems.append("the hosts disagree on the clock cap: "
                        + ", ".join(f"{h} {c} MHz" for h, c in known.items()))
    elif known and site is not None and site not in known.values():
        problems.append(f"the site reports clock cap {site} MHz, the hosts {next(iter(known.values()))} MHz")
    agreed = set(known.values())
    cap = next(iter(agreed)) if len(agreed) == 1 else site
    return ClockReading(cap, per_host, tuple(problems))


def restored_clock(facts: Mapping[str, Any], hosts: Collection[str], expected: int | None) -> dict[str, Any] | None:
    """Production's cap after a restore, checked against ``expected`` (production's registered cap).

    ``None`` when no cap applies (no GPU clocks). Otherwise ``{hosts, problems,
    clock_cap_mhz, expected_clock_cap_mhz}``: a host that brought production back at
    another cap, hosts that disagree, and a host (or a restore) that reports no cap line are
    problems (each names the host, the cap read and the cap expected); a restore with
    problems is not verified.
    """
    if expected is None:
        return None
    reading = read_caps(facts, hosts, "restore")
    problems = list(reading.problems)
    wrong = {h: v["clock_cap_mhz"] for h, v in reading.hosts.items()
             if v.get("clock_cap_mhz") is not None and v["clock_cap_mhz"] != expected}
    for host, cap in wrong.items():
        problems.append(f"{host} restored production at {cap} MHz, expected {expected} MHz (production's cap)")
    if not reading.hosts and reading.cap is not None and reading.cap != expected:
        problems.append(f"the site restored production at {reading.cap} MHz, expected {expected} MHz "
                        "(production's cap)")
    return {**reading.to_json(), "problems": problems, "clock_cap_mhz": reading.cap,
            "expected_clock_cap_mhz": expected}


def new_dial_backs(facts: Mapping[str, Any], start_cap: int | None, recorded: Collection[tuple[str, int]],
                   host: str = "site", since: str | None = None,
                   hosts: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The dial-backs of a ``read_thermal`` answer not yet recorded (keyed by host and the log's ``seq``).

    ``since`` (a ledger time) leaves out dial-backs the log stamps earlier (before the HOLD).

    ``hosts`` (the site's hosts): a line naming a host that is not one of them is a
    malformed reading, never a dial-back of a host that does not exist. It is returned
    under ``host`` (the site) with ``malformed`` (the reason) and ``watch_host`` (the name
    the line gave, cut to 64 characters), keyed by that name and its ``seq`` so that it is
    recorded once.

    A site that keeps no THERMAL-WATCH log and reports only ``current_clock_mhz`` gives
    one dial-back when the clock is below the start's cap (keyed ``seq`` 0 with that clock).
    """
    out: list[dict[str, Any]] = []
    log = facts.get("dial_backs")
    if isinstance(log, list):
        for entry in log[:MAX_DIAL_BACKS]:
            if not isinstance(entry, Mapping):
                continue
            seq, to = entry.get("seq"), _cap(entry.get("to_mhz"))
            named = entry.get("host")
            where: str = named[:64] if isinstance(named, str) and named else host
            unknown = hosts is not None and named is not None and named != "" and named not in hosts
            key = str(named)[:64] if unknown else where
            if isinstance(seq, bool) or not isinstance(seq, int) or to is None or (key, seq) in recorded:
                continue
            at = entry.get("at") if isinstance(entry.get("at"), str) and _TIME.fullmatch(entry["at"]) else None
            if at is not None and since is not None and at < since:
                continue
            reading = {"host": where, "seq": seq, "clock_mhz": to, "from_mhz": _cap(entry.get("from_mhz")), "at": at}
            if unknown:
                reading.update(host=host, watch_host=key,
                               malformed=f"THERMAL-WATCH line {seq} names host {key!r}, which the site does not have")
            out.append(reading)
        return out
    current = _cap(facts.get("current_clock_mhz"))
    if current is not None and start_cap is not None and current < start_cap and (host, -current) not in recorded:
        out.append({"host": host, "seq": -current, "clock_mhz": current, "from_mhz": start_cap, "at": None})
    return out
