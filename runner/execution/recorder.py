"""How the runner records: typed window events in one transaction, and host actions as pairs.

Every host action is ``host.action started`` -> run it -> ``host.action finished`` plus
the events its outcome establishes, appended in one transaction (``Recorder.action``).
An action found started and never finished (a crash) is re-probed by the next runner.
``Recorder`` is the base of the runner's step handlers (``opening``, ``starts``,
``endings``) and of ``WindowRunner`` itself; it holds what they all read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.errors import ExternalError
from ledger.store import Blob

from ..events import payloads as p
from ..events.catalogue import window_event
from ..plan.register import WindowNotRegistered

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..drivers.base import ActionResult, HostDriver
    from ..plan.model import Plan
    from ..plan.register import Registration
    from ..state.fold import State, WindowState
    from .clock import BudgetClock
    from .steps import Step

__all__ = ["CRASH_ENV", "Pending", "Recorder", "RunResult", "StepHandler", "plain"]

CRASH_ENV = "TALLY_TEST_CRASH_AFTER"  # test hook: "event.type[:n]" -> SIGKILL after the n-th append of it
Pending = tuple[str, p.WindowPayload, Sequence[Blob]]
StepHandler = Callable[[Any, "Step", "RunResult"], None]  # (runner, step, result): performs one step kind


@dataclass
class RunResult:
    window: str
    ending: str | None
    decision: str | None
    reasons: list[str]
    blocked: str | None = None
    escalated: bool = False
    steps: int = 0
    waves: int = 0
    measuring_s: float = 0.0
    overhead_s: float = 0.0
    replay_s: float = 0.0
    wave_gaps_s: list[float] = field(default_factory=list)  # from one wave's end to the next one's start

    def to_json(self) -> dict[str, Any]:
        gaps = sorted(self.wave_gaps_s)
        return {"window": self.window, "ending": self.ending, "decision": self.decision, "reasons": self.reasons,
                "blocked": self.blocked, "escalated": self.escalated, "steps": self.steps, "waves": self.waves,
                "measuring_s": round(self.measuring_s, 4), "overhead_s": round(self.overhead_s, 4),
                "replay_s": round(self.replay_s, 4),
                "wave_gap_ms": {"p50": round(gaps[len(gaps) // 2] * 1000, 3) if gaps else None,
                                "max": round(gaps[-1] * 1000, 3) if gaps else None, "total": round(sum(gaps), 4)}}


class CrashHook:
    """Kill this process right after the n-th append of an event type (crash tests only)."""

    def __init__(self) -> None:
        spec = os.environ.get(CRASH_ENV, "")
        kind, _, count = spec.partition(":")
        self.kind = kind or None
        self.remaining = int(count or 1)

    def after(self, types: Sequence[str]) -> None:
        if self.kind is None:
            return
        for type_ in types:
            if type_ == self.kind:
                self.remaining -= 1
                if self.remaining <= 0:
                    os.kill(os.getpid(), signal.SIGKILL)


def plain(value: Any) -> Any:
    """A JSON-safe copy (tuples to lists, non-finite floats to None, unknown objects to str)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


class Recorder:
    """What every step handler reads, and the two ways it records."""

    ledger: Ledger
    signer: Signer
    window: str
    driver: HostDriver
    registration: Registration
    plan: Plan
    clock: BudgetClock
    owner: str
    state: State
    cancel: threading.Event
    say: Callable[[str], None]
    on_wave: Callable[[int, int, str], None] | None
    crash: CrashHook
    held: list[Pending]   # what a held read-only action left to record (``action(..., hold=True)``)

    @property
    def ws(self) -> WindowState:
        ws = self.state.windows.get(self.window)
        if ws is None:
            raise WindowNotRegistered(self.window)
        return ws

    def append(self, items: Sequence[Pending]) -> list[Event]:
        """Validate and append ``items`` (type, payload, blobs) in one transaction.

        What a read-only host action left to record (``action(..., hold=True)``) goes first in it.
        """
        if self.held:
            items, self.held = [*self.held, *items], []
        if not items:
            return []
        events = [window_event(self.window, self.registration.plan_sha256, t, payload, b, ledger=self.ledger)
                  for t, payload, b in items]
        stored = self.ledger.append_many(events, self.signer)
        self.crash.after([e.type for e in stored])
        return stored

    def action(
        self,
        name: str,
        host: str | None,
        params: Mapping[str, Any] | None = None,
        *,
        start: str | None = None,
        probe_of: str | None = None,
        then: Callable[[ActionResult], list[Pending]] | None = None,
        verify: Callable[[ActionResult], dict[str, Any] | None] | None = None,
        hold: bool = False,
    ) -> ActionResult:
        """``host.action started`` -> run it -> ``finished`` plus what it established, atomically.

        ``verify`` checks a success against what the runner expects (a restore at production's
        cap): the facts it returns (with an ``error``) turn the success into a failure.

        The ``started`` record is always committed before the action runs. With ``hold`` (a
        read-only action: it changes nothing on the host) that established nothing, its
        ``finished`` record is kept and goes first into the step's next append (one commit
        fewer; it carries that commit's time); ``flush_held`` appends it when a step ends
        without one. What an action established (a dial-back) is never held: a crash must
        not lose it.
        """
        from ..drivers.base import ActionResult

        action_id = uuid.uuid4().hex[:16]
        full = {"window": self.window, **(params or {})}
        if start is not None:
            full.setdefault("start", start)
        probe: dict[str, Any] = {"probe_of": probe_of} if probe_of is not None else {}
        self.append([("host.action", p.HostAction(
            host=host or "site", action=name, phase="started", action_id=action_id,
            detail={"start": start, "params": plain(params or {})}, **probe), ())])
        try:
            result = self.driver.run(name, host, full)
        except ExternalError as exc:
            result = ActionResult(action=name, host=host, ok=False, exit_code=None, duration_s=0.0, timed_out=False,
                                  stdout=b"", stderr=str(exc).encode(), facts={"error": str(exc)})
        if verify is not None and result.ok:
            refused = verify(result)
            if refused is not None:
                result = dataclasses.replace(result, ok=False, facts={**result.facts, **refused})
        output = Blob(json.dumps({"stdout": result.stdout.decode("utf-8", "replace"),
                                  "stderr": result.stderr.decode("utf-8", "replace")}, sort_keys=True).encode(),
                      "application/json")
        finished = p.HostAction(
            host=host or "site", action=name, phase="finished", action_id=action_id, exit_code=result.exit_code,
            ok=bool(result.ok), duration_s=round(result.duration_s, 6), output=p.BlobRef.of(output),
            detail={**plain(result.facts), "start": start, "timed_out": bool(result.timed_out)}, **probe)
        items: list[Pending] = [("host.action", finished, (output,))]
        if then is not None and result.ok:
            items += then(result)
        if hold and len(items) == 1:  # nothing established (a dial-back found is committed at once)
            self.held.extend(items)
        else:
            self.append(items)
        verdict = "ok" if result.ok else f"FAILED ({result.facts.get('error') or result.exit_code})"
        self.say(f"  {name}{' ' + host if host else ''}{' ' + start if start else ''}: {verdict}")
        return result

    def flush_held(self) -> None:
        """Append what a held read-only action left to record (nothing if nothing is held)."""
        if self.held:
            self.append([])

    def arm_params(self, start_id: str) -> dict[str, Any]:
        """What a host action on a start's engine is told about its arm."""
        start = self.plan.start(start_id)
        arm = self.plan.arm(start.role)
        return {"role": start.role, "arm": arm.name, "arm_config": arm.to_json()}

    def snapshot_identity(self, sha: str) -> dict[str, Any] | None:
        """The production identity recorded with snapshot ``sha`` (the drain's, or a capture's), if any.

        A restore is asked for it, so that it restores what the ledger recorded whatever the
        host now remembers (a host that rebooted under the window remembers nothing).
        """
        for event in self.ledger.events(types=["production.snapshot"]):
            payload = event.payload
            if payload.get("sha256") == sha and payload.get("source") != "marker" and payload.get("identity"):
                identity = payload["identity"]
                return dict(identity) if isinstance(identity, dict) else None
        return None

    def snapshot_sha(self) -> str | None:
        """The production snapshot this window restores to (its own, else the chain marker's)."""
        ws = self.ws
        if ws.production_snapshot:
            return ws.production_snapshot
        marker = self.state.marker
        return marker.get("production_snapshot_sha256") if marker else None
