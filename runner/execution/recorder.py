"""How the runner records: typed window events in one transaction, and host actions as pairs.

Every host action is ``host.action started`` -> run it -> ``host.action finished`` plus
the events its outcome establishes, appended in one transaction (``Recorder.action``).
An action found started and never finished (a crash) is re-probed by the next runner.
Its outcome is recorded whatever the site printed or the driver did, bounded
(``runner.execution.outcome``). Appends go through an ``Appender``
(``runner.execution.appends``): what the ledger refuses past its retries is held, folded
into the state the runner decides from, and appended as soon as the ledger takes it.
``Recorder`` is the base of the runner's step handlers (``opening``, ``starts``,
``endings``) and of ``WindowRunner`` itself; it holds what they all read.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.errors import ExternalError, FormatError, StorageError
from ledger.store import Blob

from ..events import payloads as p
from ..events.catalogue import window_event
from ..plan.register import WindowNotRegistered
from ..state.fold import fold
from ..state.replay import replay
from .appends import MAX_BACKLOG, Appender, pending_events
from .outcome import failed_result, output_blob, recordable, unrecordable

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Ledger, NewEvent

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

RUNNER_KEYS = frozenset({"unreachable", "unreachable_allowed"})   # written by the runner alone


def _site_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """What a site reported, less the keys only the runner writes (a site saying it was unreachable, or
    allowed to be, would have its failed step passed)."""
    return {k: v for k, v in facts.items() if k not in RUNNER_KEYS}


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
    measuring_s: float = 0.0   # inside the measurement client (its set-up, the scrapes, the requests)
    overhead_s: float = 0.0    # all but measuring_s
    replay_s: float = 0.0
    wave_gaps_s: list[float] = field(default_factory=list)  # from one wave's end to the next one's start
    load_s: float = 0.0        # the requests in flight: from each wave's first send to its last reply
    host_s: float = 0.0        # inside the site's host actions (start an engine, drain, restore...)
    runner_s: float = 0.0      # the runner's own time: the run's wall time but load_s and host_s
    runner_cpu_s: float = 0.0  # CPU time of the thread that ran the window (the runner's work; not the requests')
    interrupted: str | None = None   # the signal (SIGINT, SIGTERM) this run was stopped by, if any
    measurement: str | None = None   # how the measurement ended (measurement.ended's reason), if it did
    causes: list[str] = field(default_factory=list)   # why it ended so (runner.state.ending_causes)

    def exit_code(self, *, abort: bool = False) -> int:
        """0 when the window ended safely and decided; 1 when it stopped before it was safe, its restore
        escalated, it ended aborted (but under ``tally window abort``, which asked for it), or it did not
        decide because a step failed (INCONCLUSIVE after a failed measurement); 130 when a signal stopped it
        and it then ended safely (``docs/window.md``)."""
        if self.blocked or self.escalated or (not abort and self.ending == "aborted"):
            return 1
        if self.interrupted is not None and self.ending is not None:
            return 130
        if self.decision == "INCONCLUSIVE" and self.measurement == "failed":
            return 1
        return 0

    def to_json(self) -> dict[str, Any]:
        gaps = sorted(self.wave_gaps_s)
        return {"window": self.window, "ending": self.ending, "decision": self.decision, "reasons": self.reasons,
                "blocked": self.blocked, "escalated": self.escalated, "steps": self.steps, "waves": self.waves,
                "measuring_s": round(self.measuring_s, 4), "overhead_s": round(self.overhead_s, 4),
                "replay_s": round(self.replay_s, 4), "load_s": round(self.load_s, 4),
                "host_s": round(self.host_s, 4), "runner_s": round(self.runner_s, 4),
                "runner_cpu_s": round(self.runner_cpu_s, 4), "interrupted": self.interrupted,
                "measurement_ended": self.measurement, "causes": self.causes,
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
    held: list[NewEvent]  # what a held read-only action left to record (``action(..., hold=True)``)
    appender: Appender    # appends with bounded retries; what the ledger refuses waits in its backlog
    appended: list[Event]  # what this runner stored since it last folded the ledger (``refresh``)
    recorded: State | None  # while the ledger refuses: the state it holds (``state`` adds the backlog)
    step_kind: str | None   # the step being taken (named in a refused append's record)
    host_s: float           # time spent inside the driver's host actions (``RunResult.host_s``)

    @property
    def ws(self) -> WindowState:
        ws = self.state.windows.get(self.window)
        if ws is None:
            raise WindowNotRegistered(self.window)
        return ws

    def events_of(self, items: Sequence[Pending]) -> list[NewEvent]:
        """``items`` (type, payload, blobs) as validated window events (``PayloadError`` if one is not)."""
        return [window_event(self.window, self.registration.plan_sha256, t, payload, b, ledger=self.ledger)
                for t, payload, b in items]

    def append(self, items: Sequence[Pending]) -> list[Event]:
        """Validate and append ``items`` (type, payload, blobs) in one transaction.

        What a read-only host action left to record (``action(..., hold=True)``) goes first in it.
        An append the ledger refuses for a passing reason (locked, full, not answering) is tried
        again within bounds, then kept in memory with the backlog before it: the state the
        runner decides from includes it (and a ``window.interrupted`` naming the refusal, so
        that the window stops measuring and ends by restoring production), and it is appended,
        in order, as soon as the ledger takes appends again. It returns the events as stored,
        or, deferred, as they will be (no hash yet).
        """
        events = [*self.held, *self.events_of(items)]
        self.held = []
        return self.append_events(events) if events else []

    def append_events(self, events: list[NewEvent]) -> list[Event]:
        """Append validated window events (see ``append``)."""
        deferring = bool(self.appender.unrecorded)
        landing = self.appender.append(events)
        if landing.deferred:
            return self._defer(events)
        self.crash.after([e.type for e in landing.stored])
        if deferring:   # the backlog went in first: the ledger holds everything again
            self._caught_up(list(landing.stored))
        else:
            self.appended.extend(landing.stored)
        return list(landing.stored[len(landing.stored) - len(events):])

    def catch_up(self, wait_s: float = 0.0) -> bool:
        """Try to append the backlog (for up to ``wait_s`` seconds); True when nothing is left unrecorded."""
        if not self.appender.unrecorded:
            return True
        landing = self.appender.flush(wait_s)
        if landing.deferred:
            return False
        self.crash.after([e.type for e in landing.stored])
        self._caught_up(list(landing.stored))
        self.say(f"  the ledger takes appends again: {len(landing.stored)} held event(s) recorded")
        return True

    def _defer(self, events: list[NewEvent]) -> list[Event]:
        """Keep ``events`` in the backlog and fold them into the state the runner decides from."""
        first = self.recorded is None
        if first:   # what the ledger holds, as far as this runner knows (its reads may fail too)
            self.recorded = self._known_state()
            self.appended = []
            self.state = self.recorded
            self.say(f"  the ledger refuses appends ({self.appender.last_error}): holding the records, "
                     "ending the window safely, recording them as soon as it can")
        if len(self.appender.unrecorded) > MAX_BACKLOG:
            raise ExternalError(f"the ledger has refused {len(self.appender.unrecorded)} events "
                                f"({self.appender.last_error}); stopping")
        after = self.state.size
        pending = pending_events(events, after)
        ws = self.state.windows.get(self.window)
        if first and ws is not None and ws.ending is None:   # the window was live when the ledger refused
            note = self.events_of([("window.interrupted", p.WindowInterrupted(
                reason="error", phase=ws.phase, detail={
                    "step": self.step_kind, "append_failed": True,
                    "error": f"the ledger refused an append: {self.appender.last_error}"[:500]}), ())])
            self.appender.keep(note)
            pending += pending_events(note, after + len(pending))
        self.state = fold(self.state, pending)
        return pending[:len(events)]

    def _known_state(self) -> State:
        try:
            return replay(self.ledger, self.state)
        except (ExternalError, StorageError):
            return fold(self.state, self.appended)

    def _caught_up(self, stored: list[Event]) -> None:
        """The backlog is stored: the state is the ledger's again."""
        base = self.recorded if self.recorded is not None else self.state
        self.recorded = None
        try:
            self.state = replay(self.ledger, base)
            self.appended = []
        except (ExternalError, StorageError):
            self.state = base
            self.appended = stored

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

        The ``started`` record is committed before the action runs. While the ledger refuses
        it, an action that may change a host runs only if the ledger already shows the window
        as having touched the hosts (a HOLD, an earlier recorded start of such an action), or
        if it is the restore (production comes first); otherwise it is recorded as not run
        (``detail.not_run``): "nothing to restore" stays provable from the ledger alone. With ``hold`` (a
        read-only action: it changes nothing on the host) that established nothing, its
        ``finished`` record is kept and goes first into the step's next append (one commit
        fewer; it carries that commit's time); ``flush_held`` appends it when a step ends
        without one. What an action established (a dial-back) is never held: a crash must
        not lose it.

        Its outcome is always recorded: when the driver raises, when the site's output cannot
        be recorded (facts an event cannot carry, too large), or when the runner cannot build
        the record, the ``finished`` half says so (an ``error``, ``ok`` false) and the action
        counts as failed and as possibly done (``runner.execution.outcome``).
        """
        from ..drivers.base import OBSERVING_ACTIONS

        action_id = uuid.uuid4().hex[:16]
        full = {"window": self.window, **(params or {})}
        if start is not None:
            full.setdefault("start", start)
        probe: dict[str, Any] = {"probe_of": probe_of} if probe_of is not None else {}
        self.append([("host.action", p.HostAction(
            host=host or "site", action=name, phase="started", action_id=action_id,
            detail={"start": start, "params": plain(params or {})}, **probe), ())])
        if self.appender.unrecorded and name not in OBSERVING_ACTIONS and name != "restore" \
                and not self._touched_on_record():
            result = failed_result(name, host, f"not run: the ledger refused its start record "
                                               f"({self.appender.last_error})", may_have_run=False)
        else:
            result = self._run(name, host, full)
        try:
            if verify is not None and result.ok:
                refused = verify(result)
                if refused is not None:
                    result = dataclasses.replace(result, ok=False, facts={**result.facts, **refused})
            result, events = self._outcome(name, host, action_id, start, probe, result, then)
        except Exception as exc:  # the record the runner owes could not be built: record that instead
            result = failed_result(name, host, f"the runner could not record the outcome of {name}: "
                                               f"{type(exc).__name__}: {exc}")
            result, events = self._outcome(name, host, action_id, start, probe, result, None)
        if hold and len(events) == 1:  # nothing established (a dial-back found is committed at once)
            self.held.extend(events)
        else:
            self.append_events(events)
        verdict = "ok" if result.ok else f"FAILED ({result.facts.get('error') or result.exit_code})"
        if self._unreachable_allowed(name, host, result):
            verdict = f"no answer from {host}, which this window may lose (allow_unreachable): going on"
        self.say(f"  {name}{' ' + host if host else ''}{' ' + start if start else ''}: {verdict}"[:1000])
        return result

    def _unreachable_allowed(self, name: str, host: str | None, result: ActionResult) -> bool:
        """A failed per-host action that got no answer from a host the window may lose: in the HOLD, one
        its ``hold.opened`` names; before it, one the site's ``allow_unreachable`` table names for the
        plan's mode (what the HOLD will record). Any other failure fails as recorded."""
        from ..drivers.base import PER_HOST_ACTIONS, unreachable_allowed

        if result.ok or name not in PER_HOST_ACTIONS or host is None:
            return False
        if not (result.timed_out or result.unreachable):
            return False
        ws = self.ws
        if ws.hold_seq is not None:
            return host in ws.unreachable_allowed
        return host in unreachable_allowed(self.driver, self.plan.mode)

    def _touched_on_record(self) -> bool:
        """Does what the ledger holds (not the backlog) show this window as having touched the hosts?"""
        from .steps import touched

        state = self.recorded if self.recorded is not None else self.state
        ws = state.windows.get(self.window)
        return ws is not None and touched(state, ws)

    def _run(self, name: str, host: str | None, params: dict[str, Any]) -> ActionResult:
        """Run the action through the driver; a driver that raises gives a failed outcome, never an exception."""
        began = time.perf_counter()
        try:
            return self.driver.run(name, host, params)
        except ExternalError as exc:
            return failed_result(name, host, str(exc), unreachable=True)
        except Exception as exc:   # after it may have acted: record it, as an action that may have happened
            return failed_result(name, host, f"the driver raised {type(exc).__name__} running {name}: {exc} "
                                             "(the action may have run)")
        finally:
            self.host_s += time.perf_counter() - began

    def _outcome(self, name: str, host: str | None, action_id: str, start: str | None, probe: dict[str, Any],
                 result: ActionResult, then: Callable[[ActionResult], list[Pending]] | None,
                 ) -> tuple[ActionResult, list[NewEvent]]:
        """The ``finished`` record and what the outcome established, as validated events (bounded)."""
        output, cut = output_blob(result)
        detail = {**_site_facts(plain(result.facts)), "start": start, "timed_out": bool(result.timed_out),
                  **({"output_cut": cut} if cut else {})}
        why = recordable(detail)
        if why is not None:
            result = unrecordable(result, why)
            detail = {**_site_facts(result.facts), "start": start, "timed_out": bool(result.timed_out),
                      **({"output_cut": cut} if cut else {})}
        if result.unreachable:   # the runner's own findings, never the site's (its facts lose these keys)
            detail["unreachable"] = True
        if self._unreachable_allowed(name, host, result):
            detail["unreachable_allowed"] = True
        finished = p.HostAction(
            host=host or "site", action=name, phase="finished", action_id=action_id, exit_code=result.exit_code,
            ok=bool(result.ok), duration_s=round(result.duration_s, 6), output=p.BlobRef.of(output),
            detail=detail, **probe)
        record = self.events_of([("host.action", finished, (output,))])
        if then is None or not result.ok:
            return result, record
        try:
            established = self.events_of(then(result))
            for event in established:
                problem = recordable(event.payload)
                if problem is not None:
                    raise FormatError(f"{event.type}: {problem}")
        except FormatError as exc:   # what the outcome established cannot be recorded: the action failed
            return self._outcome(name, host, action_id, start, probe, unrecordable(result, str(exc)), None)
        return result, [*record, *established]

    def flush_held(self) -> None:
        """Append what a held read-only action left to record (nothing if nothing is held)."""
        if self.held:
            self.append([])

    def arm_params(self, start_id: str) -> dict[str, Any]:
        """What a host action on a start's engine is told about its arm."""
        start = self.plan.start(start_id)
        arm = self.plan.arm(start.role)
        return {"role": start.role, "arm": arm.name, "arm_config": arm.to_json()}

    def restore_params(self) -> dict[str, Any]:
        """What a restore (and its dry check, ``restore_check``) is told: production's snapshot sha and,
        where the ledger holds it, its identity (none before a snapshot is recorded)."""
        sha = self.snapshot_sha()
        params: dict[str, Any] = {"snapshot_sha256": sha} if sha else {}
        identity = self.snapshot_identity(sha) if sha else None
        if identity is not None:
            params["snapshot_identity"] = identity
        return params

    def snapshot_identity(self, sha: str) -> dict[str, Any] | None:
        """The production identity recorded with snapshot ``sha`` (the drain's, or a capture's), if any.

        A restore is asked for it, so that it restores what the ledger recorded whatever the
        host now remembers (a host that rebooted under the window remembers nothing).
        """
        held = [item.payload for item in self.appender.unrecorded if item.type == "production.snapshot"]
        try:
            stored = [event.payload for event in self.ledger.events(types=["production.snapshot"])]
        except (ExternalError, StorageError):   # the ledger cannot be read now: restore without it
            stored = []
        for payload in (*stored, *held):
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
        return marker.production_snapshot_sha256 if marker else None
