"""Protocol audit (``docs/events.md``, the audit): did what happened keep what the plan promised?

``audit_protocol(events)`` walks the events once, in seq order, folding them with
``runner.state.fold`` and checking each event against the state *before* it; every breach is
a ``Violation`` naming the invariant and the offending seq. It runs after the
cryptographic checks (``tally audit``) and is pure: events in, violations out.

Invariants (names are stable; docs/events.md explains each):

``event-catalogue``            every event in a window stream has a known type and a valid payload
``plan-binding``               a window is registered once, before its other events, and every event
                               carries its ``plan_sha256``; the registered digest recomputes
``gate-before-host-contact``   no host action, HOLD or start before admission; admission only with
                               every required gate PASS at the plan's commit (host actions after a
                               ``chain.aborted`` are the chain's restore and are allowed)
``single-hold``                at most one HOLD open; only its owner closes it
``hold-closed``                a window does not close while its HOLD is open; no HOLD is left open by
                               a closed window
``measure-inside-hold``        starts and waves only inside the window's own HOLD, before
                               ``measurement.ended``
``stop-admitting-respected``   no wave begins after the registered stop-admitting time (measured from
                               the window's first host action; with ``stop_admitting_if_overrun``, the
                               restore point) or after a ``stop_admitting`` decision
``marker-set-by-chained-close``  the marker is set only by a ``chain = "chained"`` window after its
                               measurement ended, its HOLD closed, production down and placeholders
                               up; a ``chained`` ending needs that marker
``marker-cleared-after-watch-pass``  the marker is cleared only after this window's restore ok and
                               watch PASS
``prev-ok-under-marker``       a window admitted or opening a HOLD under a marker set by another
                               window has a PASS ``chain_prev_ok`` after that marker
``one-ending``                 one ``window.closed`` per window (restored needs a successful restore);
                               one decision, after the ending
``chain-ends-restored``        only a ``chain = "chained"`` window may close chained (a chain's last
                               window restores)
``untouched-close-proven``     a window closes aborted without a successful restore only when its
                               events prove it never touched the hosts (no HOLD, no recorded start of
                               a host-changing action such as a drain, no probe that found production
                               down, no chain abort, no foreign marker): otherwise production may be
                               left down while the ledger says nothing was touched
``order-seeds-families-match-plan``  starts in registered order with their roles; each start's waves in
                               the planned order with the planned repeat, family, seed, max_tokens and
                               concurrency
``clock-cap-recorded``         every ``start.began`` records its clock cap (none when the plan has no clocks)
``priming-before-waves``       a plan that registers prefix priming has each start's ``priming.done``
                               before that start's first wave
``params-attested-before-waves``  each start's effective parameters are attested (``params.attested``,
                               ok) before its first wave (a start whose warm-up was recorded with no
                               attestation is an older runner's, and is not held to it)
``one-window-on-site``         a window's first host action comes while no other window has acted and
                               is not yet closed (between a drain and its HOLD, production is down and
                               no HOLD says whose)
``decision-recomputes``        the decision's rule is the plan's protocol, and (with a hook) the
                               recorded result recomputes from the window's events
``smoke-before-decision``      a decision that depends on the smoke stage (pp3-v1; win2-v1 when the
                               plan registers smoke failures as INCONCLUSIVE) is CANDIDATE or WIN
                               only after every registered probe ran on every smoke start, none failed
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ledger.canonical import canonical
from ledger.errors import FormatError, TallyError

from ..decide.smoke import smoke_tally
from ..events.catalogue import CATALOGUE, WINDOW_STREAM_PREFIX
from ..plan.model import Plan, plan_sha256
from ..plan.parse import parse_plan
from ..state.fold import Folding, WindowState, acting_window, admission_blockers, typed_payload
from ..state.touched import touched

if TYPE_CHECKING:
    from ledger.event import Event

__all__ = ["INVARIANTS", "AuditReport", "RecomputeHook", "Violation", "audit_protocol", "audit_report"]

INVARIANTS: tuple[str, ...] = (
    "event-catalogue",
    "plan-binding",
    "gate-before-host-contact",
    "single-hold",
    "hold-closed",
    "measure-inside-hold",
    "stop-admitting-respected",
    "marker-set-by-chained-close",
    "marker-cleared-after-watch-pass",
    "prev-ok-under-marker",
    "one-ending",
    "chain-ends-restored",
    "untouched-close-proven",
    "order-seeds-families-match-plan",
    "clock-cap-recorded",
    "priming-before-waves",
    "params-attested-before-waves",
    "one-window-on-site",
    "decision-recomputes",
    "smoke-before-decision",
)

RecomputeHook = Callable[[Plan, Sequence["Event"], "Event"], Mapping[str, Any] | None]
"""``hook(plan, window_events_before_decision, decision_event) -> recomputed result | None``."""


@dataclass(frozen=True)
class Violation:
    invariant: str
    seq: int | None
    message: str
    window: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "seq": self.seq, "window": self.window, "message": self.message}

    def __str__(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "end of ledger"
        return f"{self.invariant} at {where}: {self.message}"


@dataclass(frozen=True)
class AuditReport:
    events: int
    windows: int
    violations: tuple[Violation, ...]
    skipped: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events": self.events,
            "windows": self.windows,
            "invariants": list(INVARIANTS),
            "skipped": list(self.skipped),
            "violations": [v.to_json() for v in self.violations],
        }


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _normal(value: Any) -> Any:
    return json.loads(canonical(value))


@dataclass
class _Track:
    """What the audit remembers about one window beyond the folded state."""

    plan: Plan | None = None
    sha: str | None = None
    starts_seen: int = 0
    wave_pos: dict[str, int] = field(default_factory=dict)
    stop_time: datetime | None = None
    stop_limit: datetime | None = None
    events: list[Event] = field(default_factory=list)
    decisions: int = 0


class _Auditor:
    def __init__(self, plans: Mapping[str, Plan] | None, recompute: RecomputeHook | None,
                 partial: bool = False) -> None:
        self.partial = partial
        self.state = Folding()
        self.tracks: dict[str, _Track] = {}
        self.plans = dict(plans or {})
        self.recompute = recompute
        self.violations: list[Violation] = []

    def flag(self, invariant: str, event: Event | None, message: str, window: str | None) -> None:
        self.violations.append(Violation(invariant, None if event is None else event.seq, message, window))

    # ------------------------------------------------------------------ walk

    def feed(self, event: Event) -> None:
        stream = event.stream
        in_window = stream.startswith(WINDOW_STREAM_PREFIX)
        if not in_window and event.type != "archive.control_start":
            self.state.apply(event)
            return
        window = stream[len(WINDOW_STREAM_PREFIX):] if in_window else None
        if event.type not in CATALOGUE:
            self.flag("event-catalogue", event, f"unknown event type {event.type!r} in {stream}", window)
            self.state.apply(event)
            return
        try:
            payload = json.loads(event.payload_json)
            typed = typed_payload(event.type, payload)
        except (FormatError, ValueError) as exc:
            self.flag("event-catalogue", event, f"{event.type}: {exc}", window)
            return
        wid = str(payload["window"])
        if self.partial and window is None and wid not in self.tracks:
            # A partial (one-window) bundle carries the archive its decision used; the other
            # windows those control starts came from are not in the bundle.
            return
        if window is not None and wid != window:
            self.flag("plan-binding", event, f"payload window {wid!r} in stream {stream}", window)
            return
        track = self.tracks.setdefault(wid, _Track())
        if not self._binding(event, payload, wid, track):
            self.state.apply(event, typed=typed)
            return
        ws = self.state.windows.get(wid)
        if ws is not None and track.plan is not None:
            check = _CHECKS.get(event.type)
            if check is not None:
                check(self, event, payload, ws, track)
        self.state.apply(event, typed=typed)
        track.events.append(event)

    def _binding(self, event: Event, payload: dict[str, Any], wid: str, track: _Track) -> bool:
        if event.type == "window.registered":
            if track.sha is not None:
                self.flag("plan-binding", event, f"window {wid} is registered a second time", wid)
                return False
            plan_json = payload["plan"]
            if plan_sha256(plan_json) != payload["plan_sha256"]:
                self.flag("plan-binding", event, "plan_sha256 is not the SHA-256 of the plan's JCS", wid)
            try:
                plan = self.plans.get(wid) or parse_plan(plan_json)
            except TallyError as exc:
                self.flag("plan-binding", event, f"the registered plan does not validate: {exc}", wid)
                plan = None
            if plan is not None and plan.window_id != wid:
                self.flag("plan-binding", event, f"the plan's window_id is {plan.window_id}, not {wid}", wid)
            track.plan, track.sha = plan, str(payload["plan_sha256"])
            return True
        if track.sha is None:
            self.flag("plan-binding", event, f"{event.type} for window {wid}, which is not registered", wid)
            return False
        if payload["plan_sha256"] != track.sha:
            self.flag("plan-binding", event, f"plan_sha256 {str(payload['plan_sha256'])[:12]} differs from the "
                                             f"registered {track.sha[:12]}", wid)
            return False
        return True

    # ------------------------------------------------------------------ helpers

    def _admitted_or_aborted(self, ws: WindowState) -> bool:
        return ws.admitted_seq is not None or ws.chain_aborted is not None

    def _owns_hold(self, ws: WindowState) -> bool:
        return self.state.hold is not None and self.state.hold.owner == ws.id

    def _prev_ok(self, event: Event, ws: WindowState, what: str) -> None:
        marker = self.state.marker
        if marker is None or marker.window == ws.id:
            return
        gate = ws.gates.get("chain_prev_ok")
        if gate is None or gate.verdict != "PASS" or int(gate.seq or 0) < int(marker.seq or 0):
            self.flag("prev-ok-under-marker", event,
                      f"{what} under the marker set by {marker.window} (seq {marker.seq}) without a "
                      f"PASS chain_prev_ok after it", ws.id)

    def finish(self) -> None:
        hold = self.state.hold
        if hold is not None:
            owner = self.state.windows.get(str(hold.owner))
            reported = any(v.invariant == "hold-closed" and v.window == hold.owner for v in self.violations)
            if (owner is None or not owner.live) and not reported:
                self.violations.append(Violation(
                    "hold-closed", int(hold.seq or 0) or None,
                    f"the HOLD opened by {hold.owner} is still open and its window is not live",
                    str(hold.owner)))


# ---------------------------------------------------------------------- per-type checks


def _check_host_action(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    if p["phase"] != "started":
        return
    if not a._admitted_or_aborted(ws):
        a.flag("gate-before-host-contact", e, f"host action {p['action']} on {p['host']} before window {ws.id} "
                                              f"was admitted", ws.id)
    other = acting_window(a.state.windows, ws.id) if not ws.actions else None
    if other is not None:
        a.flag("one-window-on-site", e, f"window {ws.id}'s first host action ({p['action']}) while window "
                                        f"{other.id} has acted and is not closed (phase {other.phase})", ws.id)


def _check_admitted(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    blockers = [b for b in admission_blockers(a.state, ws.id) if not b.startswith("chain_prev_ok")]
    if blockers:
        a.flag("gate-before-host-contact", e, "admitted while " + "; ".join(blockers), ws.id)
    if p.get("commit") != ws.commit:
        a.flag("gate-before-host-contact", e, f"admitted at commit {str(p.get('commit'))[:12]}, not the plan's "
                                              f"{str(ws.commit)[:12]}", ws.id)
    a._prev_ok(e, ws, "admitted")


def _check_hold_opened(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    if not a._admitted_or_aborted(ws):
        a.flag("gate-before-host-contact", e, f"HOLD opened before window {ws.id} was admitted", ws.id)
    hold = a.state.hold
    if hold is not None:
        a.flag("single-hold", e, f"a second HOLD: {hold.owner} holds since seq {hold.seq}", ws.id)
    if p.get("owner") != ws.id:
        a.flag("single-hold", e, f"window {ws.id} opens a HOLD for {p.get('owner')}", ws.id)
    a._prev_ok(e, ws, "HOLD opened")


def _check_hold_closed(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    hold = a.state.hold
    if hold is None or hold.owner != ws.id or p.get("owner") != ws.id:
        holder = "nobody" if hold is None else hold.owner
        a.flag("single-hold", e, f"window {ws.id} closes a HOLD held by {holder}", ws.id)


def _check_start_began(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    plan = t.plan
    assert plan is not None
    if not a._admitted_or_aborted(ws):
        a.flag("gate-before-host-contact", e, f"start {p['start']} before window {ws.id} was admitted", ws.id)
    if not a._owns_hold(ws):
        a.flag("measure-inside-hold", e, f"start {p['start']} outside the window's HOLD", ws.id)
    if ws.measurement_ended is not None:
        a.flag("measure-inside-hold", e, f"start {p['start']} after measurement.ended", ws.id)
    index = t.starts_seen
    t.starts_seen += 1
    starts = plan.run_starts   # the measurement starts, then the smoke stage's own
    if index >= len(starts):
        a.flag("order-seeds-families-match-plan", e, f"start {p['start']} is beyond the {len(starts)} "
                                                     f"registered starts", ws.id)
    else:
        planned = starts[index]
        if p["start"] != planned.id or p["role"] != planned.role:
            a.flag("order-seeds-families-match-plan", e,
                   f"start {p['start']} (role {p['role']}) where the plan has {planned.id} (role {planned.role})",
                   ws.id)
    if p.get("clock_cap_mhz") is None and plan.production_clock_cap_mhz is not None:
        a.flag("clock-cap-recorded", e, f"start {p['start']} records no clock cap", ws.id)
    elif p.get("clock_cap_mhz") is not None and plan.production_clock_cap_mhz is None:
        a.flag("clock-cap-recorded", e, f"start {p['start']} records a clock cap, but the plan registers "
                                        "that clocks do not apply", ws.id)


def _check_wave(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    plan = t.plan
    assert plan is not None
    start, cell, wave = p["start"], p["cell"], p["wave"]
    if not a._owns_hold(ws):
        a.flag("measure-inside-hold", e, f"wave {start}/{cell}/{wave} outside the window's HOLD", ws.id)
    if ws.measurement_ended is not None:
        a.flag("measure-inside-hold", e, f"wave {start}/{cell}/{wave} after measurement.ended", ws.id)
    began = _time(p["started_at"])
    zero = ws.clock.first_action
    if zero is not None:
        # With stop_admitting_if_overrun the registered time stops only a window whose stage overran
        # (the runner then records the stop_admitting decision, checked below); the restore point always does.
        conditional = plan.budget.stop_admitting_if_overrun
        limit_min = plan.budget.restore_by_min if conditional else plan.budget.stop_admitting_min
        if t.stop_limit is None:
            t.stop_limit = _time(zero) + timedelta(minutes=limit_min)
        limit = t.stop_limit
        if began > limit:
            a.flag("stop-admitting-respected", e,
                   f"wave {start}/{cell}/{wave} began {(began - _time(zero)).total_seconds() / 60:.2f} min after the "
                   f"first host action, past {'the restore point' if conditional else 'stop admitting'} at "
                   f"{limit_min:g} min", ws.id)
    if t.stop_time is not None and began > t.stop_time:
        a.flag("stop-admitting-respected", e, f"wave {start}/{cell}/{wave} began after the stop_admitting decision",
               ws.id)
    started = ws.starts.get(start)
    if plan.priming is not None and (started is None or started.priming is None):
        a.flag("priming-before-waves", e, f"wave {start}/{cell}/{wave} before start {start}'s registered priming",
               ws.id)
    params = None if started is None else started.params
    if started is not None and ((params is None and started.warmup is None) or (params is not None and not params.ok)):
        why = "with no params.attested" if params is None else "after params.attested found " + (
            "; ".join(params.failures[:2]) or "them not attested")
        a.flag("params-attested-before-waves", e, f"wave {start}/{cell}/{wave} {why}", ws.id)
    spec = plan.wave_index.get((start, cell, wave))
    if spec is None:
        a.flag("order-seeds-families-match-plan", e, f"wave {start}/{cell}/{wave} is not in the plan", ws.id)
        return
    if ws.current_start != start:
        a.flag("order-seeds-families-match-plan", e,
               f"wave for start {start} while the running start is {ws.current_start}", ws.id)
    wrong = [f"{name} {p[name]!r} (plan: {getattr(spec, name)!r})"
             for name in ("repeat", "family", "seed", "max_tokens", "concurrency") if p[name] != getattr(spec, name)]
    if wrong:
        a.flag("order-seeds-families-match-plan", e, f"wave {start}/{cell}/{wave}: " + ", ".join(wrong), ws.id)
    position = plan.wave_position[spec.key]
    expected = t.wave_pos.get(start, -1) + 1
    if position != expected:
        planned = plan.waves_of(start)
        want = planned[expected] if expected < len(planned) else None
        what = f"{want.cell}/{want.wave}" if want else "no further wave"
        a.flag("order-seeds-families-match-plan", e,
               f"wave {start}/{cell}/{wave} out of order (the plan expects {what} next)", ws.id)
    t.wave_pos[start] = max(position, t.wave_pos.get(start, -1))


def _check_budget(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    if p["action"] in ("stop_admitting", "begin_restore") and t.stop_time is None:
        t.stop_time = _time(e.time)


def _check_marker_set(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    problems = []
    if ws.chain != "chained":
        problems.append(f"the plan's chain is {ws.chain}, not chained")
    if ws.measurement_ended is None:
        problems.append("measurement has not ended")
    if a._owns_hold(ws):
        problems.append("the window still holds the HOLD")
    if a.state.production != "down":
        problems.append(f"production is {a.state.production}, not down")
    raised = ws.placeholders_raised
    if not raised or any(host not in a.state.placeholders for host in raised):
        problems.append("placeholders are not up on every host")
    if ws.ending is not None:
        problems.append(f"the window already closed ({ws.ending})")
    if problems:
        a.flag("marker-set-by-chained-close", e, "marker set outside a chained close: " + "; ".join(problems), ws.id)


def _check_marker_cleared(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    restore, watch = ws.restore, ws.watch
    if a.state.marker is None:
        a.flag("marker-cleared-after-watch-pass", e, "clears a marker that is not set", ws.id)
    if restore is None or watch is None or restore.status != "ok" or watch.verdict != "PASS" \
            or watch.seq < restore.seq:
        a.flag("marker-cleared-after-watch-pass", e,
               f"marker cleared without a restore ok followed by watch PASS in window {ws.id}", ws.id)


def _check_closed(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    ending = p["ending"]
    if ws.ending is not None:
        a.flag("one-ending", e, f"window {ws.id} closes again ({ending}) after ending {ws.ending}", ws.id)
        return
    if a._owns_hold(ws):
        a.flag("hold-closed", e, f"window {ws.id} closes ({ending}) while its HOLD is open", ws.id)
    if ending == "chained":
        if ws.chain != "chained":
            a.flag("chain-ends-restored", e, f"window {ws.id} (chain = {ws.chain}) closes chained; "
                                             f"only a chained window may leave production down", ws.id)
        if ws.marker_set_seq is None:
            a.flag("marker-set-by-chained-close", e, "closes chained without setting the marker", ws.id)
    elif ending == "restored" and (ws.restore is None or ws.restore.status != "ok"):
        a.flag("one-ending", e, f"window {ws.id} closes restored without a successful restore.finished", ws.id)
    if ending == "aborted" and (ws.restore is None or ws.restore.status != "ok") and touched(a.state, ws):
        a.flag("untouched-close-proven", e, f"window {ws.id} closes aborted without a successful restore, but its "
                                            f"events show it touched the hosts ({_touch_of(a.state, ws)}): "
                                            f"production may have been left as the window left it", ws.id)


def _touch_of(state: Folding, ws: WindowState) -> str:
    """What in the events shows that ``ws`` touched the hosts (for the violation's message)."""
    from ..drivers import OBSERVING_ACTIONS

    if ws.clock.hold_opened is not None:
        return "a HOLD was opened"
    if ws.chain_aborted is not None:
        return "a chain abort"
    if ws.not_serving_seq is not None:
        return f"a probe found production not serving at seq {ws.not_serving_seq}"
    begun = sorted(action for action, count in ws.begun.items() if count > 0 and action not in OBSERVING_ACTIONS)
    if begun:
        return "recorded starts of " + ", ".join(begun)
    return f"the chain marker is {state.marker.window if state.marker else None}'s"


def _check_decision(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    plan = t.plan
    assert plan is not None
    t.decisions += 1
    if t.decisions > 1:
        a.flag("one-ending", e, f"window {ws.id} records a second decision", ws.id)
    if ws.ending is None:
        a.flag("one-ending", e, f"decision recorded before window {ws.id} closed", ws.id)
    if p["rule"] != plan.protocol:
        a.flag("decision-recomputes", e, f"rule {p['rule']} is not the plan's protocol {plan.protocol}", ws.id)
        return
    _check_smoke(a, e, p, ws, t)
    if a.recompute is None:
        return
    try:
        again = a.recompute(plan, list(t.events), e)
    except Exception as exc:  # the hook is foreign code: its failure is a finding, not a crash
        a.flag("decision-recomputes", e, f"recomputation failed: {type(exc).__name__}: {exc}", ws.id)
        return
    if again is None:
        return
    recorded, computed = _normal(p["result"]), _normal(dict(again))
    if recorded != computed:
        keys = sorted(k for k in set(recorded) | set(computed) if recorded.get(k) != computed.get(k))
        a.flag("decision-recomputes", e,
               f"recorded result differs from the recomputation in {', '.join(keys)} "
               f"(recorded {recorded.get('decision')}, recomputed {computed.get('decision')})", ws.id)


def _check_smoke(a: _Auditor, e: Event, p: dict[str, Any], ws: WindowState, t: _Track) -> None:
    plan = t.plan
    smoke = None if plan is None else plan.smoke
    if plan is None or smoke is None or (plan.protocol == "win2-v1" and smoke.win2_effect != "inconclusive"):
        return
    tally = smoke_tally(plan, t.events)
    if not tally.counts:
        return  # a stage implied by greedy_check in a window recorded before the stage ran
    if (p.get("result") or {}).get("decision") not in ("CANDIDATE", "WIN"):
        return
    missing = [f"{probe} on {start}" for start, probe in tally.missing]
    if missing:
        a.flag("smoke-before-decision", e, f"decision {p['result']['decision']} of window {ws.id} depends on smoke "
               f"probes that did not run: {', '.join(missing)}", ws.id)
    failed = [f"{r.probe} on {r.start}" for r in tally.failed]
    if failed:
        a.flag("smoke-before-decision", e, f"decision {p['result']['decision']} of window {ws.id} despite failed "
               f"smoke probes: {', '.join(failed)}", ws.id)


Check = Callable[[_Auditor, "Event", dict[str, Any], WindowState, _Track], None]
_CHECKS: dict[str, Check] = {
    "host.action": _check_host_action,
    "window.admitted": _check_admitted,
    "hold.opened": _check_hold_opened,
    "hold.closed": _check_hold_closed,
    "start.began": _check_start_began,
    "wave.measured": _check_wave,
    "budget.decision": _check_budget,
    "chain.marker.set": _check_marker_set,
    "chain.marker.cleared": _check_marker_cleared,
    "window.closed": _check_closed,
    "decision.recorded": _check_decision,
}


def audit_report(
    events: Iterable[Event],
    *,
    plans: Mapping[str, Plan] | None = None,
    recompute: RecomputeHook | None = None,
    partial: bool = False,
) -> AuditReport:
    """Audit every protocol invariant over ``events`` (seq order).

    ``partial``: the events are one window's export (plus key events and the archive), not
    the whole ledger; archive entries of windows not in it are taken as given.
    """
    auditor = _Auditor(plans, recompute, partial)
    count = 0
    for event in events:
        count += 1
        auditor.feed(event)
    auditor.finish()
    skipped = () if recompute is not None else ("decision-recomputes (no recomputation hook; rule checked only)",)
    ordered = sorted(auditor.violations, key=lambda v: (v.seq if v.seq is not None else 1 << 62))
    return AuditReport(count, len(auditor.tracks), tuple(ordered), skipped)


def audit_protocol(
    events: Iterable[Event],
    plans: Mapping[str, Plan] | None = None,
    *,
    recompute: RecomputeHook | None = None,
) -> list[Violation]:
    """The violations of ``events`` (empty: every invariant holds)."""
    return list(audit_report(events, plans=plans, recompute=recompute).violations)
