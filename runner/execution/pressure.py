"""Pressure on the server during a wave, against the plan's ``[pressure]`` limits. Pure: payload in, lines out.

Seed 003 asks to "check memory/serving health and request backlog throughout; abort on
unexplained failures/pressure". Every wave records the server's own gauges just before
and just after it (``gauges``) and its requests' outcomes (``client``); a plan that
registers limits has each wave checked against them as it is recorded. A wave over a
limit, or one whose gauge a limit needs was not read (what was not read cannot be shown
to be under the limit), is recorded as ``pressure.crossed`` with the wave, and measuring
stops there: the window ends as any stopped measurement does, production restored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..events.payloads import ServerGauges, WaveMeasured
    from ..plan import Pressure

__all__ = ["crossings"]


def crossings(pressure: Pressure, wave: WaveMeasured) -> list[str]:
    """What in ``wave`` crossed a limit of ``pressure``, one line each (``[]``: nothing)."""
    out: list[str] = []
    gauges = wave.gauges
    sides: tuple[tuple[str, ServerGauges | None], ...] = (
        ("before", gauges.before if gauges is not None else None),
        ("after", gauges.after if gauges is not None else None))
    for name, limit in (("waiting", pressure.max_waiting), ("kv_cache_usage", pressure.max_kv_cache_usage)):
        if limit is None:
            continue
        unread = [when for when, side in sides if side is None or getattr(side, name) is None]
        if unread:
            out.append(f"{name} not read {' or '.join(unread)} the wave (limit {limit:g})")
        for when, side in sides:
            value = getattr(side, name) if side is not None else None
            if value is not None and value > limit:
                out.append(f"{name} {value:g} {when} the wave, over the limit {limit:g}")
    if pressure.max_failed_share is not None:
        client = wave.client
        failed = client.failed + client.timed_out
        share = failed / client.requests if client.requests else 0.0
        if share > pressure.max_failed_share:
            out.append(f"{failed} of {client.requests} requests failed or timed out ({share:.0%}), over the limit "
                       f"{pressure.max_failed_share:.0%}")
    return out
