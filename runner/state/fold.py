"""State by replay (``docs/events.md``, state by replay): a pure fold from events to the state the runner acts on.

``fold(state, events) -> state`` applies events in seq order to ``state`` (``State.empty()``
to start) and returns a new ``State``; it never changes the argument, reads no clock and
does no I/O, so the same events always give the same state. Every value in a state is
frozen (``runner.state.window``): each handler takes a window's state and the event's
typed payload and returns the window's new state (eventsourcing's ``mutate``), so folding
the few events appended since the last step costs O(new events), not O(ledger): the
runner keeps the last state and folds ``ledger.events(after=size)``.

``State.to_json()`` is the shape ``tally replay state --json`` prints::

    {"ledger": {"size", "head"},
     "chain": {"marker": null | {"window", "production_snapshot_sha256", "seq"},
               "placeholders": {host: {"window", "seq"}}},
     "hold": null | {"owner", "seq", "time"},
     "production": "up" | "down" | "unknown",
     "windows": {id: {"phase", "gates", "starts", "restore", "watch", "decision", ...}}}
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Never, cast

from ledger.errors import FormatError

from ..drivers import PER_HOST_ACTIONS
from ..events import payloads as pl
from ..events.catalogue import CATALOGUE, WINDOW_STREAM_PREFIX, validate_payload
from ..events.schema import from_wire
from ..vocabulary import ENDINGS, PHASES, Phase
from .window import (
    ENGINE_REPORTS,
    BudgetEntry,
    ChainAbort,
    DecisionView,
    EngineView,
    FinishedAction,
    GateView,
    Hold,
    Interruption,
    JSONObject,
    JSONValue,
    Marker,
    MeasurementEnd,
    OpenAction,
    ParamsView,
    PlaceholderUp,
    Priming,
    RestoreView,
    StartView,
    ThermalEntry,
    Warmup,
    WatchView,
    WindowState,
    evolve,
)

if TYPE_CHECKING:
    from ledger.event import Event

__all__ = [
    "CLOSING_ACTIONS",
    "ENDINGS",
    "ENGINE_REPORTS",
    "PHASES",
    "Folding",
    "State",
    "TypedPayload",
    "WaveKeys",
    "WindowState",
    "acting_window",
    "admission_blockers",
    "fold",
    "typed_payload",
]

_RANK = {phase: rank for rank, phase in enumerate(PHASES)}
for _ending in ENDINGS:
    _RANK[_ending] = _RANK["restored"]
# Host actions that belong to a window's ending (restore, chained close, abort).
CLOSING_ACTIONS = frozenset({
    "restore", "watch", "fence", "experiment_stop", "quiet_proof", "production_down_proof",
    "placeholder_up", "placeholder_down", "placeholder_proof",
})
_loads = json.loads
_WAVE_HEAD = re.compile(r'\{"cell":"([A-Za-z0-9._-]+)","client":\{')
_WAVE_TAIL = re.compile(
    r',"start":"([A-Za-z0-9._-]+)","started_at":"[0-9T:.Z-]+","wave":([0-9]+),"window":"([A-Za-z0-9._-]+)"\}\Z')


class WaveKeys(NamedTuple):
    """What the fold reads of a ``wave.measured`` payload (its fast path)."""

    window: str
    start: str
    cell: str
    wave: int


TypedPayload = pl.WindowPayload | WaveKeys
"""What a handler of the fold reads: the event's typed payload (``WaveKeys`` for a ``wave.measured``)."""


def _wave_keys(text: str) -> WaveKeys | None:
    """``window``, ``start``, ``cell``, ``wave`` of a ``wave.measured`` payload without parsing it all.

    The payload is JCS (members sorted at every level), so a well-formed one begins with
    ``{"cell":...,"client":{`` and ends with ``,"start":...,"started_at":...,"wave":N,
    "window":...}`` at the top level (a quote inside a string is always escaped, so these
    patterns cannot match inside a value). Anything else returns None and the caller
    parses the JSON; tests/runner/test_fold.py proves the two paths agree.
    """
    head = _WAVE_HEAD.match(text)
    if head is None:
        return None
    tail = _WAVE_TAIL.search(text, max(0, len(text) - 400))
    if tail is None:
        return None
    return WaveKeys(tail.group(3), tail.group(1), head.group(1), int(tail.group(2)))


_LIVE_BEFORE_ENDING = frozenset({"admitted", "holding", "measuring", "measurement_ended"})
_NO_WINDOWS: Mapping[str, WindowState] = MappingProxyType({})
_NO_PLACEHOLDERS: Mapping[str, PlaceholderUp] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class State:
    """The folded state, a value: ``fold`` returns a new one and never changes this one."""

    size: int = 0
    head: str = "0" * 64
    hold: Hold | None = None
    production: str = "unknown"
    marker: Marker | None = None
    placeholders: Mapping[str, PlaceholderUp] = field(default_factory=lambda: _NO_PLACEHOLDERS)
    windows: Mapping[str, WindowState] = field(default_factory=lambda: _NO_WINDOWS)

    @classmethod
    def empty(cls) -> State:
        return cls()

    def window(self, window_id: str) -> WindowState | None:
        return self.windows.get(window_id)

    def with_event(self, event: Event, payload: Mapping[str, object] | None = None, *,
                   typed: TypedPayload | None = None) -> State:
        """A new state: this one with one event applied (``fold`` for many; ``Folding`` to feed events one at a
        time)."""
        folding = Folding(self)
        folding.apply(event, payload, typed=typed)
        return folding.state()

    # ------------------------------------------------------------------ queries

    def live_windows(self) -> list[str]:
        return [wid for wid, ws in self.windows.items() if ws.live]

    def acting(self, other_than: str) -> WindowState | None:
        """Another window acting on the site (``acting_window``)."""
        return acting_window(self.windows, other_than)

    def open_actions(self) -> list[tuple[str, OpenAction]]:
        """Host actions started and not finished (unknown outcomes), across windows: (window, action) by seq."""
        out = [(wid, action) for wid, ws in self.windows.items() for action in ws.open_actions.values()]
        return sorted(out, key=lambda item: item[1].seq)

    def to_json(self, window: str | None = None) -> JSONObject:
        windows = self.windows if window is None else {k: v for k, v in self.windows.items() if k == window}
        return {
            "ledger": {"size": self.size, "head": self.head},
            "chain": {
                "marker": None if self.marker is None else self.marker.to_json(),
                "placeholders": {host: v.to_json() for host, v in sorted(self.placeholders.items())},
            },
            "hold": None if self.hold is None else self.hold.to_json(),
            "production": self.production,
            "windows": {wid: ws.to_json() for wid, ws in windows.items()},
        }


def acting_window(windows: Mapping[str, WindowState], other_than: str) -> WindowState | None:
    """A window other than ``other_than`` that has acted on the site (a host action recorded) and is not closed
    yet (no ending recorded), the earliest registered: until it is closed, its runner (or what its crash left)
    may hold the hosts anywhere between the snapshot and the restore, HOLD or not, so no other window may open."""
    for wid, ws in windows.items():   # in registration order
        if wid != other_than and ws.actions and ws.ending is None:
            return ws
    return None


class Folding:
    """A fold in progress: ``apply`` events one at a time, read what is folded so far, ``state()`` the value.

    What belongs to the whole ledger (the HOLD, the marker, placeholders, production) is
    set here by the handlers; each window's state is a frozen value they return anew.
    """

    __slots__ = ("head", "hold", "marker", "placeholders", "production", "size", "windows")

    def __init__(self, state: State | None = None) -> None:
        start = state or State()
        self.size, self.head, self.production = start.size, start.head, start.production
        self.hold: Hold | None = start.hold
        self.marker: Marker | None = start.marker
        self.placeholders: dict[str, PlaceholderUp] = dict(start.placeholders)
        self.windows: dict[str, WindowState] = dict(start.windows)

    def state(self) -> State:
        return State(size=self.size, head=self.head, hold=self.hold, production=self.production, marker=self.marker,
                     placeholders=dict(self.placeholders), windows=dict(self.windows))

    def apply(self, event: Event, payload: Mapping[str, object] | None = None, *,
              typed: TypedPayload | None = None) -> None:
        """Fold one event.

        The payload is parsed here without caching it on the event (``Event.payload``
        would keep every parsed payload alive as long as the caller holds the events);
        a caller that has parsed it already passes it in (or what ``typed_payload``
        made of it). Handlers read the typed payload (``runner.events.payloads``); a
        window event whose payload does not validate is not applied (the audit reports
        it: ``event-catalogue``).
        """
        self.size = event.seq
        self.head = event.hash
        type_ = event.type
        handler = _HANDLERS.get(type_)
        if handler is None:
            return
        if not event.stream.startswith(WINDOW_STREAM_PREFIX) and type_ != "archive.control_start":
            return
        if typed is None:
            typed = _typed(event, payload)
            if typed is None:
                return
        wid = typed.window
        ws = self.windows.get(wid) or WindowState(wid)
        ws = evolve(ws, clock=evolve(ws.clock, last=event.time))
        self.windows[wid] = cast(_Apply, handler)(self, ws, event, typed)


def _typed(event: Event, payload: Mapping[str, object] | None) -> TypedPayload | None:
    """The typed payload of a window event (``WaveKeys`` on the wave fast path); None if invalid."""
    if payload is None:
        if event.type == "wave.measured":
            keys = _wave_keys(event.payload_json)
            if keys is not None:
                return keys
        try:
            payload = _loads(event.payload_json)
        except ValueError:
            return None
        if not isinstance(payload, dict):
            return None
    try:
        return typed_payload(event.type, payload)
    except FormatError:
        return None


def typed_payload(type_: str, payload: Mapping[str, object]) -> TypedPayload:
    """What the fold's handler of ``type_`` reads from a checked ``payload`` (``FormatError`` if invalid).

    The typed payload class, except for ``wave.measured``: its four keys (``WaveKeys``).
    """
    validate_payload(type_, payload)
    if type_ == "wave.measured":
        return WaveKeys(str(payload["window"]), str(payload["start"]), str(payload["cell"]), int(str(payload["wave"])))
    return from_wire(CATALOGUE[type_], payload)


def _advance(ws: WindowState, phase: Phase) -> WindowState:
    """Move forward only; endings and decided are set explicitly."""
    if ws.ending is None and _RANK[phase] > _RANK[ws.phase]:
        return evolve(ws, phase=phase)
    return ws


def _closing(ws: WindowState) -> WindowState:
    if ws.ending is None and (ws.phase in _LIVE_BEFORE_ENDING or ws.phase == "registered"):
        return evolve(ws, phase="closing")
    return ws


def _without(mapping: Mapping[str, OpenAction], *keys: str | None) -> Mapping[str, OpenAction]:
    if not any(key in mapping for key in keys if key is not None):
        return mapping
    return {k: v for k, v in mapping.items() if k not in keys}


def _owns_hold(s: Folding, ws: WindowState) -> bool:
    return s.hold is not None and s.hold.owner == ws.id


# ---------------------------------------------------------------------- registration, gates, admission


def _registered(s: Folding, ws: WindowState, e: Event, p: pl.WindowRegistered) -> WindowState:
    if ws.registered_seq is not None:
        return evolve(ws, extra_registrations=(*ws.extra_registrations, e.seq))
    plan = p.plan
    arms = plan.get("arms") or ()
    return evolve(
        ws,
        registered_seq=e.seq,
        plan_sha256=p.plan_sha256,
        plan_json=plan,
        protocol=plan.get("protocol"),
        mode=plan.get("mode"),
        chain=plan.get("chain", "none"),
        commit=plan.get("commit"),
        required_gates=tuple((plan.get("gates") or {}).get("required") or ()),
        plan_starts=tuple((s_.get("id"), s_.get("arm")) for s_ in plan.get("starts") or ()),
        spec_off_roles=frozenset(str(a.get("role")) for a in arms
                                 if isinstance(a, dict) and a.get("speculative") == "none"),
        phase="registered" if ws.phase == "unregistered" else ws.phase,
    )


def _gate(s: Folding, ws: WindowState, e: Event, p: pl.GateResult) -> WindowState:
    entry = GateView(verdict=p.verdict, seq=e.seq, commit=p.commit, summary=p.summary)
    if p.start is None:
        return evolve(ws, gates={**ws.gates, p.gate: entry})
    before = ws.gates.get(p.gate)
    starts = {**((before.starts or {}) if before is not None else {}), p.start: entry}
    planned = [sid for sid, role in ws.plan_starts
               if not (p.gate == "standard_spec" and role in ws.spec_off_roles)] or list(starts)
    verdicts = [starts[sid].verdict if sid in starts else None for sid in planned]
    verdict = "FAIL" if "FAIL" in verdicts else "PASS" if all(v == "PASS" for v in verdicts) else "PENDING"
    commits = {starts[sid].commit for sid in planned if sid in starts}
    gate = GateView(verdict=verdict, seq=e.seq, commit=commits.pop() if len(commits) == 1 else None,
                    summary=entry.summary, starts=starts)
    return evolve(ws, gates={**ws.gates, p.gate: gate})


def _admitted(s: Folding, ws: WindowState, e: Event, p: pl.WindowAdmitted) -> WindowState:
    if ws.admitted_seq is None:
        ws = evolve(ws, admitted_seq=e.seq, admitted_under_marker=p.under_marker)
    return _advance(ws, "admitted")


# ---------------------------------------------------------------------- HOLD, production, host actions


def _hold_opened(s: Folding, ws: WindowState, e: Event, p: pl.HoldOpened) -> WindowState:
    s.hold = Hold(owner=p.owner, seq=e.seq, time=e.time)
    return _advance(evolve(ws, hold_seq=e.seq, clock=evolve(ws.clock, hold_opened=e.time),
                           unreachable_allowed=tuple(p.allow_unreachable)), "holding")


def _hold_closed(s: Folding, ws: WindowState, e: Event, p: pl.HoldClosed) -> WindowState:
    if s.hold is not None and s.hold.owner == p.owner:
        s.hold = None
    return _closing(evolve(ws, hold_seq=None))


def _snapshot(s: Folding, ws: WindowState, e: Event, p: pl.ProductionSnapshot) -> WindowState:
    return evolve(ws, production_snapshot=p.sha256)


def _production(s: Folding, ws: WindowState, e: Event, p: pl.ProductionState) -> WindowState:
    s.production = p.state
    return ws


def _host_action(s: Folding, ws: WindowState, e: Event, p: pl.HostAction) -> WindowState:
    if p.phase == "started":
        if not ws.actions:
            other = acting_window(s.windows, ws.id)
            if other is not None:
                ws = evolve(ws, raced_with=other.id)
        opened = OpenAction(host=p.host, action=p.action, seq=e.seq, time=e.time, probe_of=p.probe_of,
                            action_id=p.action_id)
        ws = evolve(ws, actions=ws.actions + 1, begun={**ws.begun, p.action: ws.begun.get(p.action, 0) + 1},
                     clock=ws.clock if ws.clock.first_action is not None else evolve(ws.clock, first_action=e.time),
                     open_actions={**ws.open_actions, p.action_id: opened})
        return _closing(ws) if p.action in CLOSING_ACTIONS else ws
    started = ws.open_actions.get(p.action_id)
    open_actions = _without(ws.open_actions, p.action_id, p.probe_of)  # a finished re-probe settles what it probed
    facts = p.detail
    ok = bool(p.ok)
    begun = ws.begun
    if facts.get("not_run") is True and started is not None and begun.get(p.action):
        begun = {**begun, p.action: begun[p.action] - 1}   # recorded as never run (its start was not recorded in time)
    not_serving = ws.not_serving_seq
    if p.action == "probe" and facts.get("serving") in ("down", "draining") and not_serving is None:
        not_serving = e.seq
    start = facts.get("start")
    unreachable = (not ok and facts.get("unreachable_allowed") is True and p.action in PER_HOST_ACTIONS
                   and (ws.hold_seq is None or p.host in ws.unreachable_allowed))   # in the HOLD: as it recorded
    done = FinishedAction(action=p.action, host=p.host, ok=ok, seq=e.seq, time=e.time, start=start,
                          started_time=started.time if started else None, unreachable=unreachable)
    block_began = ws.block_began
    if p.action == "start_arm" and ok and isinstance(start, str) and e.time and start not in block_began:
        block_began = {**block_began, start: started.time if started and started.time else e.time}
    first_identity = ws.first_identity
    if p.action == "start_arm" and ok and isinstance(start, str):
        role = next((r for sid, r in ws.plan_starts if sid == start), None)
        if isinstance(role, str) and role not in first_identity:
            first_identity = {**first_identity, role: (start, facts.get("identity"))}
    return evolve(ws, open_actions=open_actions, begun=begun, not_serving_seq=not_serving,
                   finished=(*ws.finished, done), block_began=block_began, first_identity=first_identity,
                   engine=_engine(ws.engine, p.action, ok, facts))


def _engine(before: EngineView | None, action: str, ok: bool, facts: Mapping[str, JSONValue]) -> EngineView | None:
    """What the hosts serve, as the window's finished host actions last established it."""
    if action in ("probe", "preflight") and "serving" in facts:
        arm = facts.get("arm")
        if not arm:
            return None
        # A probe sees which engine serves; which start (and what config it reported) that engine
        # belongs to comes from the start_arm that started it, if it is the same engine: the same
        # arm and, where the site reports one, the same session (a host that rebooted is another).
        session = facts.get("session")
        same = before is not None and before.arm == arm and (
            session is None or before.session is None or session == before.session)
        kept = before if same else None
        return EngineView(arm=arm, role=facts.get("role"), start=kept.start if kept else None,
                          status=facts.get("engine"), serving=facts.get("serving"), session=session,
                          reports={k: kept.report(k) if kept else None for k in ENGINE_REPORTS},
                          reported=kept.reported if kept else ())
    if not ok:
        return before
    if action == "start_arm":
        return EngineView(arm=facts.get("arm"), role=facts.get("role"), start=facts.get("start"),
                          status=facts.get("engine") or "ready", serving="experiment", session=facts.get("session"),
                          reports={k: facts.get(k) for k in ENGINE_REPORTS},
                          reported=tuple(k for k in ENGINE_REPORTS if k in facts))
    if action in ("stop_arm", "experiment_stop", "drain"):
        return None
    if action == "restore":
        return EngineView(arm=facts.get("arm"), role="production", start=None, status="ready", serving="up",
                          session=facts.get("session"))
    return before


# ---------------------------------------------------------------------- starts and waves


def _start(ws: WindowState, start: str, info: StartView) -> WindowState:
    return evolve(ws, starts={**ws.starts, start: info})


def _later(info: StartView, name: str) -> tuple[str, ...]:
    return info.later if name in info.later else (*info.later, name)


def _start_began(s: Folding, ws: WindowState, e: Event, p: pl.StartBegan) -> WindowState:
    problems = (p.clock or {}).get("problems") or []
    info = StartView(role=p.role, status="began", clock_cap_mhz=p.clock_cap_mhz,
                     spec_config_sha256=p.spec_config_sha256, began_seq=e.seq, began_time=e.time,
                     clock_problems=tuple(problems))
    return _advance(evolve(_start(ws, p.start, info), current_start=p.start), "measuring")


def _warmup(s: Folding, ws: WindowState, e: Event, p: pl.WarmupDone) -> WindowState:
    info = ws.starts.get(p.start)
    if info is None:
        return ws
    failed = p.served.detail if p.served is not None and not p.served.ok else None
    return _start(ws, p.start, evolve(info, warmup=Warmup(cold_ttft_s=p.cold_ttft_s, warm_ttft_s=p.warm_ttft_s,
                                                           seq=e.seq, failed=failed)))


def _params(s: Folding, ws: WindowState, e: Event, p: pl.ParamsAttested) -> WindowState:
    info = ws.starts.get(p.start)
    if info is None:
        return ws
    view = ParamsView(ok=p.ok, none_reported=p.none_reported, failures=tuple(p.failures), seq=e.seq)
    return _start(ws, p.start, evolve(info, params=view, later=_later(info, "params")))


def _priming(s: Folding, ws: WindowState, e: Event, p: pl.PrimingDone) -> WindowState:
    info = ws.starts.get(p.start)
    if info is None:
        return ws
    return _start(ws, p.start, evolve(info, priming=Priming(cache_salt=p.cache_salt, ok=p.ok, seq=e.seq),
                                       later=_later(info, "priming")))


def _start_ended(s: Folding, ws: WindowState, e: Event, p: pl.StartEnded) -> WindowState:
    info = ws.starts.get(p.start)
    if info is not None:
        ws = _start(ws, p.start, evolve(info, status="ended", ended_seq=e.seq, ended_time=e.time,
                                         later=_later(info, "ended_time"), truncated=p.truncated, ok=p.ok))
    return evolve(ws, current_start=None) if ws.current_start == p.start else ws


def _wave(s: Folding, ws: WindowState, e: Event, p: WaveKeys | pl.WaveMeasured) -> WindowState:
    info = ws.starts.get(p.start)
    if info is None:
        return evolve(ws, waves=ws.waves + 1)
    waves = {**info.waves, p.cell: (*info.waves.get(p.cell, ()), p.wave)}
    return evolve(ws, waves=ws.waves + 1, starts={**ws.starts, p.start: evolve(info, waves=waves)})


def _pressure(s: Folding, ws: WindowState, e: Event, p: pl.PressureCrossed) -> WindowState:
    return evolve(ws, pressure=(*ws.pressure, p.line))


def _smoke(s: Folding, ws: WindowState, e: Event, p: pl.SmokeResult) -> WindowState:
    info = ws.starts.get(p.start)
    if info is None:
        return ws
    return _start(ws, p.start, evolve(info, smoke=(*(info.smoke or ()), p.probe), later=_later(info, "smoke")))


def _thermal(s: Folding, ws: WindowState, e: Event, p: pl.ThermalEvent) -> WindowState:
    ws = evolve(ws, thermal=(*ws.thermal, ThermalEntry(host=p.host, kind=p.kind, seq=e.seq,
                                                         inside_hold=_owns_hold(s, ws))))
    detail = p.detail or {}
    watch_seq = detail.get("watch_seq")
    if isinstance(watch_seq, int):  # a malformed reading is keyed by the host name its line gave
        ws = evolve(ws, dial_backs_recorded=ws.dial_backs_recorded | {(str(detail.get("watch_host") or p.host),
                                                                        watch_seq)})
    start = detail.get("start")
    if p.kind in ("dial_back", "malformed") and isinstance(start, str):
        # a malformed reading (a host the site does not have) flags the start, at no cap of its own
        cap = p.clock_cap_mhz if p.kind == "dial_back" else None
        caps = (*ws.dial_back_caps.get(start, ()), cap if isinstance(cap, int) else None)
        ws = evolve(ws, dial_back_caps={**ws.dial_back_caps, start: caps})
    return ws


def _measurement_ended(s: Folding, ws: WindowState, e: Event, p: pl.MeasurementEnded) -> WindowState:
    return _advance(evolve(ws, measurement_ended=MeasurementEnd(reason=p.reason, seq=e.seq),
                            clock=evolve(ws.clock, measurement_ended=e.time), current_start=None),
                    "measurement_ended")


def _budget(s: Folding, ws: WindowState, e: Event, p: pl.BudgetDecision) -> WindowState:
    entry = BudgetEntry(action=p.action, reason=p.reason, seq=e.seq, start=p.start, cell=p.cell)
    return evolve(ws, budget=(*ws.budget, entry),
                   stop_admitting=ws.stop_admitting or p.action in ("stop_admitting", "begin_restore"))


# ---------------------------------------------------------------------- endings and chain


def _placeholder_up(s: Folding, ws: WindowState, e: Event, p: pl.Placeholder) -> WindowState:
    s.placeholders[p.host] = PlaceholderUp(window=ws.id, seq=e.seq)
    if p.host not in ws.placeholders_raised:
        ws = evolve(ws, placeholders_raised=(*ws.placeholders_raised, p.host))
    return _closing(ws)


def _placeholder_down(s: Folding, ws: WindowState, e: Event, p: pl.Placeholder) -> WindowState:
    s.placeholders.pop(p.host, None)
    return _closing(ws)


def _marker_set(s: Folding, ws: WindowState, e: Event, p: pl.ChainMarkerSet) -> WindowState:
    s.marker = Marker(window=ws.id, production_snapshot_sha256=p.production_snapshot_sha256, seq=e.seq)
    return _closing(evolve(ws, marker_set_seq=e.seq))


def _marker_cleared(s: Folding, ws: WindowState, e: Event, p: pl.ChainMarkerCleared) -> WindowState:
    s.marker = None
    return _closing(evolve(ws, marker_cleared_seq=e.seq))


def _chain_aborted(s: Folding, ws: WindowState, e: Event, p: pl.ChainAborted) -> WindowState:
    return _closing(evolve(ws, chain_aborted=ChainAbort(reason=p.reason, marker_window=p.marker_window, seq=e.seq)))


def _restore(s: Folding, ws: WindowState, e: Event, p: pl.RestoreFinished) -> WindowState:
    return _closing(evolve(ws, restore=RestoreView(status=p.status, attempts=p.attempts, seq=e.seq)))


def _watch(s: Folding, ws: WindowState, e: Event, p: pl.WatchResult) -> WindowState:
    return _closing(evolve(ws, watch=WatchView(verdict=p.verdict, seq=e.seq)))


def _interrupted(s: Folding, ws: WindowState, e: Event, p: pl.WindowInterrupted) -> WindowState:
    failed = (p.detail or {}).get("append_failed") is True
    entry = Interruption(reason=p.reason, signal=p.signal, seq=e.seq, phase=ws.phase, append_failed=failed)
    return evolve(ws, interrupted=(*ws.interrupted, entry))


def _closed(s: Folding, ws: WindowState, e: Event, p: pl.WindowClosed) -> WindowState:
    if ws.ending is not None:
        return ws  # a second ending: the audit reports it (one-ending)
    return evolve(ws, ending=p.ending, closed_seq=e.seq, clock=evolve(ws.clock, closed=e.time),
                   phase="decided" if ws.decision is not None else p.ending)


def _decision(s: Folding, ws: WindowState, e: Event, p: pl.DecisionRecorded) -> WindowState:
    result = p.result
    decision = DecisionView(rule=p.rule, result=result.get("decision"), reasons=result.get("reasons", []),
                            inputs_digest=p.inputs_digest, seq=e.seq)
    return evolve(ws, decision=decision, phase="decided" if ws.ending is not None else ws.phase)


def _archive(s: Folding, ws: WindowState, e: Event, p: pl.ArchiveControlStart) -> WindowState:
    return ws


# A handler reads its own type's payload class (``Never`` here: every payload class is narrower than
# what the table promises, so any handler fits); ``Folding.apply`` calls it with the payload of its type.
Handler = Callable[["Folding", WindowState, "Event", Never], WindowState]
_Apply = Callable[["Folding", WindowState, "Event", TypedPayload], WindowState]
_HANDLERS: dict[str, Handler] = {
    "window.registered": _registered,
    "gate.result": _gate,
    "window.admitted": _admitted,
    "hold.opened": _hold_opened,
    "hold.closed": _hold_closed,
    "production.snapshot": _snapshot,
    "production.state": _production,
    "host.action": _host_action,
    "start.began": _start_began,
    "warmup.done": _warmup,
    "params.attested": _params,
    "priming.done": _priming,
    "start.ended": _start_ended,
    "wave.measured": _wave,
    "smoke.result": _smoke,
    "thermal.event": _thermal,
    "measurement.ended": _measurement_ended,
    "budget.decision": _budget,
    "pressure.crossed": _pressure,
    "placeholder.up": _placeholder_up,
    "placeholder.down": _placeholder_down,
    "chain.marker.set": _marker_set,
    "chain.marker.cleared": _marker_cleared,
    "chain.aborted": _chain_aborted,
    "restore.finished": _restore,
    "watch.result": _watch,
    "window.interrupted": _interrupted,
    "window.closed": _closed,
    "decision.recorded": _decision,
    "archive.control_start": _archive,
}


def fold(state: State | None, events: Iterable[Event]) -> State:
    """A new state: ``state`` (or the empty state) with ``events`` applied in order."""
    folding = Folding(state)
    apply = folding.apply
    for event in events:
        apply(event)
    return folding.state()


def admission_blockers(state: State | Folding, window_id: str) -> list[str]:
    """Why ``window_id`` cannot be admitted now (empty: it can).

    Every required gate (and ``chain_prev_ok`` while the chain marker is set) must have
    its latest result PASS at the plan's commit; ``standard_spec`` needs a PASS for every
    start. An empty required list is refused (fail closed).
    """
    ws = state.windows.get(window_id)
    if ws is None or ws.registered_seq is None:
        return [f"window {window_id} is not registered"]
    if ws.ending is not None:
        return [f"window {window_id} is closed ({ws.ending})"]
    required = list(ws.required_gates)
    if not required:
        return ["the plan requires no gate: refused (fail closed)"]
    marker = state.marker
    if marker is not None and marker.window != window_id and "chain_prev_ok" not in required:
        required.append("chain_prev_ok")
    blockers = []
    marker_seq = marker.seq if marker is not None else 0
    for name in required:
        gate = ws.gates.get(name)
        if gate is None:
            blockers.append(f"{name}: no result")
        elif name == "chain_prev_ok" and marker_seq and gate.seq < marker_seq:
            blockers.append(f"chain_prev_ok: its result (seq {gate.seq}) predates the marker (seq {marker_seq})")
        elif gate.verdict != "PASS":
            blockers.append(f"{name}: {gate.verdict} (seq {gate.seq})")
        elif gate.commit != ws.commit:
            blockers.append(f"{name}: PASS at commit {str(gate.commit)[:12]}, not the plan's "
                            f"{str(ws.commit)[:12]}")
    return blockers
