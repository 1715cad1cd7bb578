"""State by replay (``docs/events.md``, state by replay): a pure fold from events to the state the runner acts on.

``fold(state, events) -> state`` applies events in seq order to a copy of ``state``
(``State.empty()`` to start) and never touches the argument; it reads no clock and does
no I/O, so the same events always give the same state. Copies are copy-on-write per
window, so folding the few events appended since the last step costs O(new events),
not O(ledger): the runner keeps the last state and folds ``ledger.events(after=size)``.

``State.to_json()`` is the shape ``tally replay state --json`` prints::

    {"ledger": {"size", "head"},
     "chain": {"marker": null | {"window", "production_snapshot_sha256", "seq"},
               "placeholders": {host: {"window", "seq"}}},
     "hold": null | {"owner", "seq", "time"},
     "production": "up" | "down" | "unknown",
     "windows": {id: {"phase", "gates", "starts", "restore", "watch", "decision", ...}}}
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ledger.errors import FormatError

from ..events import payloads as pl
from ..events.catalogue import CATALOGUE, WINDOW_STREAM_PREFIX, validate_payload
from ..events.schema import from_wire
from ..vocabulary import ENDINGS, PHASES, Phase

if TYPE_CHECKING:
    from ledger.event import Event

__all__ = [
    "CLOSING_ACTIONS",
    "ENDINGS",
    "PHASES",
    "State",
    "WindowState",
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


@dataclass
class WindowState:
    """What the ledger says about one window."""

    id: str
    phase: Phase = "unregistered"
    plan_sha256: str | None = None
    protocol: str | None = None
    mode: str | None = None
    chain: str | None = None
    commit: str | None = None
    required_gates: tuple[str, ...] = ()
    plan_starts: tuple[tuple[str, str], ...] = ()
    spec_off_roles: frozenset[str] = frozenset()  # arms declaring speculative = "none"
    registered_seq: int | None = None
    admitted_seq: int | None = None
    admitted_under_marker: bool = False
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)
    starts: dict[str, dict[str, Any]] = field(default_factory=dict)
    current_start: str | None = None
    waves: int = 0
    hold_seq: int | None = None
    production_snapshot: str | None = None
    measurement_ended: dict[str, Any] | None = None
    restore: dict[str, Any] | None = None
    watch: dict[str, Any] | None = None
    placeholders_raised: list[str] = field(default_factory=list)
    marker_set_seq: int | None = None
    marker_cleared_seq: int | None = None
    chain_aborted: dict[str, Any] | None = None
    ending: str | None = None
    closed_seq: int | None = None
    decision: dict[str, Any] | None = None
    interrupted: list[dict[str, Any]] = field(default_factory=list)
    open_actions: dict[str, dict[str, Any]] = field(default_factory=dict)
    finished: list[dict[str, Any]] = field(default_factory=list)
    engine: dict[str, Any] | None = None
    actions: int = 0
    budget: list[dict[str, Any]] = field(default_factory=list)
    stop_admitting: bool = False
    thermal: list[dict[str, Any]] = field(default_factory=list)
    # per start: when its block began (the started time of its first ok start_arm; ledgers older
    # than ``started_time``: when it finished); a start with none begins at its start.began
    block_began: dict[str, str] = field(default_factory=dict)
    # the THERMAL-WATCH entries already recorded as thermal.event: (host, the log's watch_seq)
    dial_backs_recorded: frozenset[tuple[str, int]] = frozenset()
    # per start: the clock caps (MHz) its recorded dial-backs fell to, in seq order (None: a malformed reading)
    dial_back_caps: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    clock: dict[str, str | None] = field(default_factory=lambda: {
        "first_action": None, "hold_opened": None, "measurement_ended": None, "closed": None, "last": None,
    })
    extra_registrations: list[int] = field(default_factory=list)
    # per host action name: how many of its starts were recorded, less those whose finished record
    # says the action never ran (``detail.not_run``); the step machine's "touched" test reads it
    begun: dict[str, int] = field(default_factory=dict)
    # the seq of the first finished ``probe`` whose facts said production is not serving (down, draining)
    not_serving_seq: int | None = None

    def clone(self) -> WindowState:
        """A copy that shares nothing the handlers mutate (cheaper than ``deepcopy``)."""
        new = copy.copy(self)
        new.gates = {name: (dict(gate, starts=dict(gate["starts"])) if "starts" in gate else dict(gate))
                     for name, gate in self.gates.items()}
        new.starts = {sid: dict(info, waves={cell: list(w) for cell, w in info["waves"].items()})
                      for sid, info in self.starts.items()}
        new.placeholders_raised = list(self.placeholders_raised)
        new.interrupted = list(self.interrupted)
        new.finished = list(self.finished)
        new.engine = dict(self.engine) if self.engine else None
        new.open_actions = dict(self.open_actions)
        new.budget = list(self.budget)
        new.thermal = list(self.thermal)
        new.block_began = dict(self.block_began)
        new.dial_back_caps = dict(self.dial_back_caps)  # its values are tuples: shared safely
        new.clock = dict(self.clock)
        new.extra_registrations = list(self.extra_registrations)
        new.begun = dict(self.begun)
        return new

    @property
    def closed(self) -> bool:
        return self.ending is not None

    @property
    def live(self) -> bool:
        """Registered, not closed."""
        return self.ending is None and self.phase != "unregistered"

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "plan_sha256": self.plan_sha256,
            "protocol": self.protocol,
            "mode": self.mode,
            "chain": self.chain,
            "commit": self.commit,
            "required_gates": list(self.required_gates),
            "registered_seq": self.registered_seq,
            "admitted_seq": self.admitted_seq,
            "gates": copy.deepcopy(self.gates),
            "starts": copy.deepcopy(self.starts),
            "current_start": self.current_start,
            "waves": self.waves,
            "production_snapshot": self.production_snapshot,
            "measurement_ended": copy.deepcopy(self.measurement_ended),
            "restore": copy.deepcopy(self.restore),
            "watch": copy.deepcopy(self.watch),
            "chain_aborted": copy.deepcopy(self.chain_aborted),
            "ending": self.ending,
            "decision": copy.deepcopy(self.decision),
            "interrupted": copy.deepcopy(self.interrupted),
            "open_actions": [dict(v, action_id=k) for k, v in self.open_actions.items()],
            "engine": copy.deepcopy(self.engine),
            "budget": copy.deepcopy(self.budget),
            "stop_admitting": self.stop_admitting,
            "thermal": copy.deepcopy(self.thermal),
            "block_began": dict(self.block_began),
            "dial_backs_recorded": [list(key) for key in sorted(self.dial_backs_recorded)],
            "dial_back_caps": {sid: list(caps) for sid, caps in self.dial_back_caps.items()},
            "clock": dict(self.clock),
        }


class State:
    """The folded state. Treat it as a value: ``fold`` returns a new one."""

    __slots__ = ("_own", "head", "hold", "marker", "placeholders", "production", "size", "windows")

    def __init__(self) -> None:
        self.size = 0
        self.head = "0" * 64
        self.hold: dict[str, Any] | None = None
        self.production: str = "unknown"
        self.marker: dict[str, Any] | None = None
        self.placeholders: dict[str, dict[str, Any]] = {}
        self.windows: dict[str, WindowState] = {}
        self._own: set[str] = set()

    @classmethod
    def empty(cls) -> State:
        return cls()

    def copy(self) -> State:
        """A copy sharing unchanged windows with this state (copy-on-write)."""
        new = State()
        new.size, new.head, new.production = self.size, self.head, self.production
        new.hold = dict(self.hold) if self.hold else None
        new.marker = dict(self.marker) if self.marker else None
        new.placeholders = {host: dict(v) for host, v in self.placeholders.items()}
        new.windows = dict(self.windows)
        self._own = set()  # windows are shared from now on: neither state may mutate them in place
        return new

    def window(self, window_id: str) -> WindowState | None:
        return self.windows.get(window_id)

    def _mutable(self, window_id: str) -> WindowState:
        ws = self.windows.get(window_id)
        if ws is None:
            ws = WindowState(window_id)
        elif window_id not in self._own:
            ws = ws.clone()
        else:
            return ws
        self.windows[window_id] = ws
        self._own.add(window_id)
        return ws

    # ------------------------------------------------------------------ queries

    def live_windows(self) -> list[str]:
        return [wid for wid, ws in self.windows.items() if ws.live]

    def open_actions(self) -> list[dict[str, Any]]:
        """Host actions started and not finished (unknown outcomes), across windows."""
        out = []
        for wid, ws in self.windows.items():
            for action_id, info in ws.open_actions.items():
                out.append(dict(info, action_id=action_id, window=wid))
        return sorted(out, key=lambda item: item["seq"])

    def to_json(self, window: str | None = None) -> dict[str, Any]:
        windows = self.windows if window is None else {k: v for k, v in self.windows.items() if k == window}
        return {
            "ledger": {"size": self.size, "head": self.head},
            "chain": {
                "marker": dict(self.marker) if self.marker else None,
                "placeholders": {host: dict(v) for host, v in sorted(self.placeholders.items())},
            },
            "hold": dict(self.hold) if self.hold else None,
            "production": self.production,
            "windows": {wid: ws.to_json() for wid, ws in windows.items()},
        }

    # ------------------------------------------------------------------ apply

    def apply(self, event: Event, payload: dict[str, Any] | None = None, *,
              typed: Any = None) -> None:
        """Apply one event in place (``fold`` is the pure interface).

        The payload is parsed here without caching it on the event (``Event.payload``
        would keep every parsed payload alive as long as the caller holds the events);
        a caller that has parsed it already passes it in (or what ``typed_payload``
        made of it). Handlers read the typed
        payload (``runner.events.payloads``); a window event whose payload does not
        validate is not applied (the audit reports it: ``event-catalogue``).
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
        ws = self._mutable(typed.window)
        ws.clock["last"] = event.time
        handler(self, ws, event, typed)


def _typed(event: Event, payload: dict[str, Any] | None) -> Any:
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
    try:
        return typed_payload(event.type, payload)
    except FormatError:
        return None


def typed_payload(type_: str, payload: dict[str, Any]) -> Any:
    """What the fold's handler of ``type_`` reads from a checked ``payload`` (``FormatError`` if invalid).

    The typed payload class, except for ``wave.measured``: its four keys (``WaveKeys``).
    """
    validate_payload(type_, payload)
    if type_ == "wave.measured":
        return WaveKeys(payload["window"], payload["start"], payload["cell"], payload["wave"])
    return from_wire(CATALOGUE[type_], payload)


def _advance(ws: WindowState, phase: Phase) -> None:
    """Move forward only; endings and decided are set explicitly."""
    if ws.ending is None and _RANK[phase] > _RANK[ws.phase]:
        ws.phase = phase


def _closing(ws: WindowState) -> None:
    if ws.ending is None and (ws.phase in _LIVE_BEFORE_ENDING or ws.phase == "registered"):
        ws.phase = "closing"


def _registered(s: State, ws: WindowState, e: Event, p: pl.WindowRegistered) -> None:
    if ws.registered_seq is not None:
        ws.extra_registrations.append(e.seq)
        return
    plan = p.plan
    ws.registered_seq = e.seq
    ws.plan_sha256 = p.plan_sha256
    ws.protocol = plan.get("protocol")
    ws.mode = plan.get("mode")
    ws.chain = plan.get("chain", "none")
    ws.commit = plan.get("commit")
    ws.required_gates = tuple((plan.get("gates") or {}).get("required") or ())
    ws.plan_starts = tuple((s_.get("id"), s_.get("arm")) for s_ in plan.get("starts") or ())
    ws.spec_off_roles = frozenset(str(a.get("role")) for a in plan.get("arms") or ()
                                  if isinstance(a, dict) and a.get("speculative") == "none")
    if ws.phase == "unregistered":
        ws.phase = "registered"


def _gate(s: State, ws: WindowState, e: Event, p: pl.GateResult) -> None:
    entry = {"verdict": p.verdict, "seq": e.seq, "commit": p.commit, "summary": p.summary}
    if p.start is not None:
        gate = ws.gates.setdefault(p.gate, {"verdict": "PENDING", "seq": e.seq, "commit": p.commit,
                                            "summary": "", "starts": {}})
        gate.setdefault("starts", {})[p.start] = entry
        planned = [sid for sid, role in ws.plan_starts
                   if not (p.gate == "standard_spec" and role in ws.spec_off_roles)] or list(gate["starts"])
        verdicts = [gate["starts"].get(sid, {}).get("verdict") for sid in planned]
        gate["verdict"] = "FAIL" if "FAIL" in verdicts else "PASS" if all(v == "PASS" for v in verdicts) else "PENDING"
        gate["seq"] = e.seq
        commits = {gate["starts"][sid].get("commit") for sid in planned if sid in gate["starts"]}
        gate["commit"] = commits.pop() if len(commits) == 1 else None
        gate["summary"] = entry["summary"]
    else:
        ws.gates[p.gate] = entry


def _admitted(s: State, ws: WindowState, e: Event, p: pl.WindowAdmitted) -> None:
    if ws.admitted_seq is None:
        ws.admitted_seq = e.seq
        ws.admitted_under_marker = p.under_marker
    _advance(ws, "admitted")


def _hold_opened(s: State, ws: WindowState, e: Event, p: pl.HoldOpened) -> None:
    s.hold = {"owner": p.owner, "seq": e.seq, "time": e.time}
    ws.hold_seq = e.seq
    ws.clock["hold_opened"] = e.time
    _advance(ws, "holding")


def _hold_closed(s: State, ws: WindowState, e: Event, p: pl.HoldClosed) -> None:
    if s.hold is not None and s.hold.get("owner") == p.owner:
        s.hold = None
    ws.hold_seq = None
    _closing(ws)


def _snapshot(s: State, ws: WindowState, e: Event, p: pl.ProductionSnapshot) -> None:
    ws.production_snapshot = p.sha256


def _production(s: State, ws: WindowState, e: Event, p: pl.ProductionState) -> None:
    s.production = p.state


def _host_action(s: State, ws: WindowState, e: Event, p: pl.HostAction) -> None:
    if p.phase == "started":
        ws.actions += 1
        ws.begun[p.action] = ws.begun.get(p.action, 0) + 1
        if ws.clock["first_action"] is None:
            ws.clock["first_action"] = e.time
        ws.open_actions[p.action_id] = {"host": p.host, "action": p.action, "seq": e.seq, "time": e.time,
                                        "probe_of": p.probe_of}
        if p.action in CLOSING_ACTIONS:
            _closing(ws)
    else:
        opened = ws.open_actions.pop(p.action_id, None)
        if p.probe_of is not None:  # a finished re-probe settles the unknown outcome it probed
            ws.open_actions.pop(p.probe_of, None)
        facts = p.detail
        ok = bool(p.ok)
        if facts.get("not_run") is True and opened is not None and ws.begun.get(p.action):
            ws.begun[p.action] -= 1   # recorded as never run (its start could not be recorded in time)
        if p.action == "probe" and facts.get("serving") in ("down", "draining") and ws.not_serving_seq is None:
            ws.not_serving_seq = e.seq
        ws.finished.append({"action": p.action, "host": p.host, "ok": ok, "seq": e.seq, "time": e.time,
                            "start": facts.get("start"), "started_time": opened["time"] if opened else None})
        start = facts.get("start")
        if p.action == "start_arm" and ok and isinstance(start, str) and e.time and start not in ws.block_began:
            ws.block_began[start] = opened["time"] if opened and opened.get("time") else e.time
        _engine(ws, p.action, ok, facts)


ENGINE_REPORTS = ("config_digest", "speculative_config", "identity",
                  "worker_identity", "markov_identity", "experiment_commit", "worker_tree")
"""What a host reports about the engine a ``start_arm`` started (compared by ``start_config``)."""


def _engine(ws: WindowState, action: str, ok: bool, facts: dict[str, Any]) -> None:
    """What the hosts serve, as the window's finished host actions last established it."""
    if action in ("probe", "preflight") and "serving" in facts:
        arm = facts.get("arm")
        before = ws.engine or {}
        # A probe sees which engine serves; which start (and what config it reported) that engine
        # belongs to comes from the start_arm that started it, if it is the same engine: the same
        # arm and, where the site reports one, the same session (a host that rebooted is another).
        session = facts.get("session")
        same = arm is not None and before.get("arm") == arm and (
            session is None or before.get("session") is None or session == before.get("session"))
        ws.engine = {"arm": arm, "role": facts.get("role"), "start": before.get("start") if same else None,
                     "status": facts.get("engine"), "serving": facts.get("serving"), "session": session,
                     **{k: before.get(k) if same else None for k in ENGINE_REPORTS},
                     "reported": before.get("reported", []) if same else []} if arm else None
    elif not ok:
        return
    elif action == "start_arm":
        ws.engine = {"arm": facts.get("arm"), "role": facts.get("role"), "start": facts.get("start"),
                     "status": facts.get("engine") or "ready", "serving": "experiment",
                     "session": facts.get("session"), **{k: facts.get(k) for k in ENGINE_REPORTS},
                     "reported": [k for k in ENGINE_REPORTS if k in facts]}
    elif action in ("stop_arm", "experiment_stop", "drain"):
        ws.engine = None
    elif action == "restore":
        ws.engine = {"arm": facts.get("arm"), "role": "production", "start": None, "status": "ready",
                     "serving": "up", "session": facts.get("session")}


def _start_began(s: State, ws: WindowState, e: Event, p: pl.StartBegan) -> None:
    ws.starts[p.start] = {
        "role": p.role, "status": "began", "clock_cap_mhz": p.clock_cap_mhz,
        "spec_config_sha256": p.spec_config_sha256, "began_seq": e.seq, "began_time": e.time,
        "ended_seq": None, "ok": None,
        "warmup": None, "waves": {}, "truncated": False,
        "clock_problems": list((p.clock or {}).get("problems") or []),
    }
    ws.current_start = p.start
    _advance(ws, "measuring")


def _warmup(s: State, ws: WindowState, e: Event, p: pl.WarmupDone) -> None:
    info = ws.starts.get(p.start)
    if info is not None:
        info["warmup"] = {"cold_ttft_s": p.cold_ttft_s, "warm_ttft_s": p.warm_ttft_s, "seq": e.seq}


def _priming(s: State, ws: WindowState, e: Event, p: pl.PrimingDone) -> None:
    info = ws.starts.get(p.start)
    if info is not None:
        info["priming"] = {"cache_salt": p.cache_salt, "ok": p.ok, "seq": e.seq}


def _start_ended(s: State, ws: WindowState, e: Event, p: pl.StartEnded) -> None:
    info = ws.starts.get(p.start)
    if info is not None:
        info["status"] = "ended"
        info["ended_seq"] = e.seq
        info["ended_time"] = e.time
        info["truncated"] = p.truncated
        info["ok"] = p.ok
    if ws.current_start == p.start:
        ws.current_start = None


def _wave(s: State, ws: WindowState, e: Event, p: WaveKeys | pl.WaveMeasured) -> None:
    ws.waves += 1
    info = ws.starts.get(p.start)
    if info is not None:
        info["waves"].setdefault(p.cell, []).append(p.wave)


def _smoke(s: State, ws: WindowState, e: Event, p: pl.SmokeResult) -> None:
    info = ws.starts.get(p.start)
    if info is not None:  # a tuple: clones share it safely
        info["smoke"] = (*info.get("smoke", ()), p.probe)


def _thermal(s: State, ws: WindowState, e: Event, p: pl.ThermalEvent) -> None:
    ws.thermal.append({"host": p.host, "kind": p.kind, "seq": e.seq,
                       "inside_hold": s.hold is not None and s.hold.get("owner") == ws.id})
    detail = p.detail or {}
    watch_seq = detail.get("watch_seq")
    if isinstance(watch_seq, int):  # a malformed reading is keyed by the host name its line gave
        ws.dial_backs_recorded = ws.dial_backs_recorded | {(str(detail.get("watch_host") or p.host), watch_seq)}
    start = detail.get("start")
    if p.kind in ("dial_back", "malformed") and isinstance(start, str):
        # a malformed reading (a host the site does not have) flags the start, at no cap of its own
        cap = p.clock_cap_mhz if p.kind == "dial_back" else None
        ws.dial_back_caps[start] = (*ws.dial_back_caps.get(start, ()), cap if isinstance(cap, int) else None)


def _measurement_ended(s: State, ws: WindowState, e: Event, p: pl.MeasurementEnded) -> None:
    ws.measurement_ended = {"reason": p.reason, "seq": e.seq}
    ws.clock["measurement_ended"] = e.time
    ws.current_start = None
    _advance(ws, "measurement_ended")


def _budget(s: State, ws: WindowState, e: Event, p: pl.BudgetDecision) -> None:
    ws.budget.append({"action": p.action, "reason": p.reason, "seq": e.seq, "start": p.start, "cell": p.cell})
    if p.action in ("stop_admitting", "begin_restore"):
        ws.stop_admitting = True


def _placeholder_up(s: State, ws: WindowState, e: Event, p: pl.Placeholder) -> None:
    s.placeholders[p.host] = {"window": ws.id, "seq": e.seq}
    if p.host not in ws.placeholders_raised:
        ws.placeholders_raised.append(p.host)
    _closing(ws)


def _placeholder_down(s: State, ws: WindowState, e: Event, p: pl.Placeholder) -> None:
    s.placeholders.pop(p.host, None)
    _closing(ws)


def _marker_set(s: State, ws: WindowState, e: Event, p: pl.ChainMarkerSet) -> None:
    s.marker = {"window": ws.id, "production_snapshot_sha256": p.production_snapshot_sha256, "seq": e.seq}
    ws.marker_set_seq = e.seq
    _closing(ws)


def _marker_cleared(s: State, ws: WindowState, e: Event, p: pl.ChainMarkerCleared) -> None:
    s.marker = None
    ws.marker_cleared_seq = e.seq
    _closing(ws)


def _chain_aborted(s: State, ws: WindowState, e: Event, p: pl.ChainAborted) -> None:
    ws.chain_aborted = {"reason": p.reason, "marker_window": p.marker_window, "seq": e.seq}
    _closing(ws)


def _restore(s: State, ws: WindowState, e: Event, p: pl.RestoreFinished) -> None:
    ws.restore = {"status": p.status, "attempts": p.attempts, "seq": e.seq}
    _closing(ws)


def _watch(s: State, ws: WindowState, e: Event, p: pl.WatchResult) -> None:
    ws.watch = {"verdict": p.verdict, "seq": e.seq}
    _closing(ws)


def _interrupted(s: State, ws: WindowState, e: Event, p: pl.WindowInterrupted) -> None:
    failed = {"append_failed": True} if (p.detail or {}).get("append_failed") is True else {}
    ws.interrupted.append({"reason": p.reason, "signal": p.signal, "seq": e.seq, "phase": ws.phase, **failed})


def _closed(s: State, ws: WindowState, e: Event, p: pl.WindowClosed) -> None:
    if ws.ending is not None:
        return  # a second ending: the audit reports it (one-ending)
    ws.ending = p.ending
    ws.closed_seq = e.seq
    ws.clock["closed"] = e.time
    ws.phase = "decided" if ws.decision is not None else p.ending


def _decision(s: State, ws: WindowState, e: Event, p: pl.DecisionRecorded) -> None:
    result = p.result
    ws.decision = {"rule": p.rule, "result": result.get("decision"), "reasons": result.get("reasons", []),
                   "inputs_digest": p.inputs_digest, "seq": e.seq}
    if ws.ending is not None:
        ws.phase = "decided"


def _archive(s: State, ws: WindowState, e: Event, p: pl.ArchiveControlStart) -> None:
    return


Handler = Callable[[State, WindowState, "Event", Any], None]
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
    "priming.done": _priming,
    "start.ended": _start_ended,
    "wave.measured": _wave,
    "smoke.result": _smoke,
    "thermal.event": _thermal,
    "measurement.ended": _measurement_ended,
    "budget.decision": _budget,
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
    new = State() if state is None else state.copy()
    apply = new.apply
    for event in events:
        apply(event)
    return new


def admission_blockers(state: State, window_id: str) -> list[str]:
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
    if state.marker is not None and state.marker.get("window") != window_id and "chain_prev_ok" not in required:
        required.append("chain_prev_ok")
    blockers = []
    marker_seq = int(state.marker.get("seq") or 0) if state.marker is not None else 0
    for name in required:
        gate = ws.gates.get(name)
        if gate is None:
            blockers.append(f"{name}: no result")
        elif name == "chain_prev_ok" and marker_seq and int(gate.get("seq") or 0) < marker_seq:
            blockers.append(f"chain_prev_ok: its result (seq {gate.get('seq')}) predates the marker (seq {marker_seq})")
        elif gate.get("verdict") != "PASS":
            blockers.append(f"{name}: {gate.get('verdict')} (seq {gate.get('seq')})")
        elif gate.get("commit") != ws.commit:
            blockers.append(f"{name}: PASS at commit {str(gate.get('commit'))[:12]}, not the plan's "
                            f"{str(ws.commit)[:12]}")
    return blockers
