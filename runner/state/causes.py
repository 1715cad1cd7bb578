"""Why a window ended as it did, in a few lines read from its events (the report's and the run's opening).

A window that measured every planned wave with nothing interrupting it has no cause to
name (``[]``). Otherwise, in seq order:

- each ``window.interrupted``: the signal and when it came, the error and the step it
  stopped, the crash found on resume, the ``tally window abort``, a ledger that refused
  appends;
- each ``pressure.crossed``: the wave and what crossed the plan's pressure limits;
- each start that ended failed (``start.ended`` with ``ok`` false) and its reason;
- when the measurement did not complete, the host actions that failed before it ended
  (the failed step and its error; at most :data:`MAX_ACTIONS` of them, then how many more);
- how the measurement ended (``measurement.ended``) and after how many waves.

Every line is built from the recorded payloads (typed reads), and bounded: a server's
error text is cut at :data:`MAX_ERROR_CHARS`.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledger.event import Event

from ..events import payloads as p
from ..events import read_payload

__all__ = ["MAX_ACTIONS", "MAX_ERROR_CHARS", "ending_causes"]

MAX_ACTIONS = 3
MAX_ERROR_CHARS = 300

_MEASUREMENT = {"failed": "a step failed", "interrupted": "interrupted", "hard_limit": "the window's hard limit",
                "stop_admitting": "the budget stopped admitting starts", "aborted": "aborted",
                "truncated": "a block ran over its limit and was truncated", "complete": "every planned wave measured",
                "pressure": "a wave crossed the plan's pressure limits"}


def _cut(text: object) -> str:
    said = " ".join(str(text).split())
    return said if len(said) <= MAX_ERROR_CHARS else said[:MAX_ERROR_CHARS - 3] + "..."


def _interruption(event: Event) -> str:
    item = read_payload(event, p.WindowInterrupted)
    where = f" at {event.time}" + (f" (phase {item.phase})" if item.phase else "")
    detail = item.detail
    if item.reason == "signal":
        return f"interrupted by {item.signal or 'a signal'}{where}: measuring stopped, the window ended as its " \
               "plan allows"
    if item.reason == "error":
        step = detail.get("step")
        return f"an error{where}" + (f" during {step}" if isinstance(step, str) else "") + \
            (f": {_cut(detail['error'])}" if "error" in detail else "")
    if item.reason == "crash":
        return f"the runner stopped without ending the window; found by `tally window resume`{where}"
    return f"`tally window abort`{where}"


def ending_causes(events: Iterable[Event]) -> list[str]:
    """The cause lines of a window from its own events (stream ``window/<id>``), in seq order; ``[]`` when
    it measured everything it planned, uninterrupted."""
    lines: list[str] = []
    failed: list[str] = []
    ended: p.MeasurementEnded | None = None
    for event in events:
        if event.type == "window.interrupted":
            lines.append(_interruption(event))
        elif event.type == "pressure.crossed":
            lines.append(f"pressure at {_cut(read_payload(event, p.PressureCrossed).line)}")
        elif event.type == "start.ended":
            start = read_payload(event, p.StartEnded)
            if not start.ok:
                lines.append(f"start {start.start} (arm {start.role}) failed" +
                             (f": {_cut(start.reason)}" if start.reason else ""))
        elif event.type == "host.action" and ended is None:
            action = read_payload(event, p.HostAction)
            if action.phase == "finished" and action.ok is False:
                error = action.detail.get("error")
                failed.append(f"{action.action} on {action.host} failed at {event.time}" +
                              (f": {_cut(error)}" if error is not None else ""))
        elif event.type == "measurement.ended" and ended is None:
            ended = read_payload(event, p.MeasurementEnded)
    if ended is not None and ended.reason != "complete":
        lines.extend(failed[:MAX_ACTIONS])
        if len(failed) > MAX_ACTIONS:
            lines.append(f"(and {len(failed) - MAX_ACTIONS} more failed host action(s) before the measurement ended)")
        lines.append(f"measurement ended: {_MEASUREMENT.get(ended.reason, ended.reason)}, after {ended.waves} "
                     f"wave(s)")
    return lines
