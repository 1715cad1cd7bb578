"""The dry run's window: the step machine over an "everything succeeds" fold. Pure.

``planned_steps`` starts from the ledger's folded state, asks ``next_step`` what the
runner would do, and folds the events that step records when it succeeds (every host
action ok, every gate PASS, the watch PASS, no budget limit reached) through the same
fold the runner replays (``runner.state.fold``); then it asks again, until the window
is decided. The order of a dry run is therefore the runner's order by construction;
``SUCCESS`` says, per step kind, which host actions the step's handler runs and which
events it appends (a test holds it to the handlers: the executed window's host actions
equal the dry run's).

A window not yet admitted is folded as if its gates had passed (and, under another
window's chain marker, as if ``tally chain prev-ok`` had PASSed), so the dry run shows
what ``--execute`` would do once they have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledger.event import Event

from ..events import payloads as p
from ..plan.model import Plan
from ..state.fold import State, WaveKeys, WindowState
from ..vocabulary import GateName
from .opening import HOST_STEP_ACTIONS
from .steps import Context, Step, StepKind, next_step

__all__ = ["SUCCESS", "DryStep", "HostCall", "planned_steps"]

DRY_TIME = "2000-01-01T00:00:00.000000Z"
DRY_SHA = "d" * 64
MAX_STEPS = 100_000  # a step machine that never decides is a bug, not a long window


@dataclass(frozen=True)
class HostCall:
    """One host action the runner would run (``host.action started`` .. ``finished``)."""

    action: str
    host: str
    start: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "host": self.host, "start": self.start}


@dataclass(frozen=True)
class DryStep:
    """One step of the dry run: what the step machine asked for, and what it would do and record."""

    step: Step
    calls: tuple[HostCall, ...] = ()
    events: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        wave = self.step.wave
        return {"step": self.step.kind, "start": self.step.start, "host": self.step.host,
                "wave": None if wave is None else {"cell": wave.cell, "wave": wave.wave, "family": wave.family,
                                                   "seed": wave.seed},
                "host_actions": [c.to_json() for c in self.calls], "events": list(self.events)}


@dataclass
class _Fold:
    """The dry state and the events folded into it so far."""

    plan: Plan
    state: State
    window: str
    hosts: tuple[str, ...]
    actions: frozenset[str] = frozenset()   # the site's actions (read_thermal, the optional close steps)
    calls: list[HostCall] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    _ids: int = 0

    @property
    def ws(self) -> WindowState:
        return self.state.windows[self.window]

    def add(self, type_: str, payload: Any) -> None:
        seq = self.state.size + 1
        event = Event(ledger="dry-run", seq=seq, prev="", stream=f"window/{self.window}", type=type_, time=DRY_TIME,
                      actor="dry-run", payload_json="{}", hash=f"{seq:064x}", sig="")
        self.state = self.state.with_event(event, typed=payload)
        self.types.append(type_)

    def act(self, action: str, host: str | None = None, *, start: str | None = None, probe_of: str | None = None,
            **facts: Any) -> None:
        """A host action that succeeds: ``started`` then ``finished`` with ``facts``."""
        self._ids += 1
        action_id, where = f"dry{self._ids:06d}", host or "site"
        self.calls.append(HostCall(action, where, start))
        self.add("host.action", p.HostAction(window=self.window, host=where, action=action, phase="started",
                                             action_id=action_id, probe_of=probe_of))
        self.add("host.action", p.HostAction(window=self.window, host=where, action=action, phase="finished",
                                             action_id=action_id, ok=True, exit_code=0, probe_of=probe_of,
                                             detail={**facts, "start": start, "timed_out": False}))

    def arm(self, start: str) -> dict[str, Any]:
        role = self.plan.start(start).role
        return {"role": role, "arm": self.plan.arm(role).name}


def _probe(f: _Fold, s: Step) -> None:
    f.act("probe", None, probe_of=s.args.get("probe_of"))


def _preflight(f: _Fold, _s: Step) -> None:
    f.act("preflight")


def _host_step(f: _Fold, s: Step) -> None:
    f.act(HOST_STEP_ACTIONS[s.kind], s.host)


def _drain(f: _Fold, _s: Step) -> None:
    f.act("drain")
    f.add("production.state", p.ProductionState(window=f.window, state="down", proof={"action": "drain"}))


def _hold_open(f: _Fold, s: Step) -> None:
    f.add("hold.opened", p.HoldOpened(window=f.window, owner=f.window, hosts=list(f.hosts),
                                      from_marker=bool(s.args.get("from_marker"))))


def _snapshot(f: _Fold, s: Step) -> None:
    marker = f.state.marker
    if s.args.get("from_marker") and marker is not None:
        f.add("production.snapshot", p.ProductionSnapshot(window=f.window, sha256=marker.production_snapshot_sha256,
                                                          source="marker"))
        return
    f.act("snapshot")
    f.add("production.snapshot", p.ProductionSnapshot(window=f.window, sha256=DRY_SHA, source="drain"))


def _start_arm(f: _Fold, s: Step) -> None:
    assert s.start is not None
    f.act("start_arm", start=s.start, engine="ready", **f.arm(s.start))


def _start_began(f: _Fold, s: Step) -> None:
    assert s.start is not None
    cap = f.plan.production_clock_cap_mhz
    if cap is not None:
        f.act("read_clock_cap", start=s.start, clock_cap_mhz=cap, **f.arm(s.start))
    f.add("start.began", p.StartBegan(window=f.window, start=s.start, role=f.plan.start(s.start).role,
                                      clock_cap_mhz=cap, spec_config_sha256=DRY_SHA))


def _gate(name: GateName) -> Callable[[_Fold, Step], None]:
    def passed(f: _Fold, s: Step) -> None:
        f.add("gate.result", p.GateResult(window=f.window, gate=name, verdict="PASS", evidence={},
                                          commit=f.plan.commit, start=s.start))
    return passed


def _attest_params(f: _Fold, s: Step) -> None:
    assert s.start is not None  # reads of the server's own endpoints, no host action
    f.add("params.attested", p.ParamsAttested(window=f.window, start=s.start, ok=True, reported={},
                                              sampling=f.plan.sampling.engine_fields))


def _warmup(f: _Fold, s: Step) -> None:
    assert s.start is not None
    f.act("warmup", start=s.start, **f.arm(s.start))
    f.add("warmup.done", p.WarmupDone(window=f.window, start=s.start, cold_ttft_s=None, warm_ttft_s=None))


def _prime(f: _Fold, s: Step) -> None:
    assert s.start is not None  # the priming requests are measurement traffic, not host actions
    f.add("priming.done", p.PrimingDone(window=f.window, start=s.start, cache_salt="dry-run", ok=True, requests=[]))


def _smoke(f: _Fold, s: Step) -> None:
    assert s.start is not None and f.plan.smoke is not None  # probes are requests to the engine, no host action
    role = f.plan.start(s.start).role
    for probe in f.plan.smoke.probes:
        f.add("smoke.result", p.SmokeResult(window=f.window, start=s.start, role=role, probe=probe, outcome="pass",
                                            kind=probe, summary="dry run"))


def _thermal_watch(f: _Fold, start: str) -> None:
    """The THERMAL-WATCH read before each wave and at a start's end, where the site has one."""
    if f.plan.production_clock_cap_mhz is not None and "read_thermal" in f.actions:
        f.act("read_thermal", start=start, **f.arm(start))


def _wave(f: _Fold, s: Step) -> None:
    assert s.start is not None and s.wave is not None
    _thermal_watch(f, s.start)
    f.add("wave.measured", WaveKeys(f.window, s.start, s.wave.cell, s.wave.wave))


def _budget(f: _Fold, s: Step) -> None:
    assert s.limit is not None
    f.add("budget.decision", p.BudgetDecision(window=f.window, action=s.limit.action, reason=s.limit.reason,
                                              elapsed_min=s.limit.at_min, limit_min=s.limit.at_min, start=s.start))


def _end_start(f: _Fold, s: Step) -> None:
    assert s.start is not None
    start = f.plan.start(s.start)
    lost = bool(s.args.get("lost"))
    if not lost and f.plan.production_clock_cap_mhz is not None:
        _thermal_watch(f, start.id)
        f.act("read_clock_cap", start=start.id, **f.arm(start.id))
    if not lost:
        f.act("stop_arm", start=start.id, **f.arm(start.id))
    f.add("start.ended", p.StartEnded(window=f.window, start=start.id, role=start.role,
                                      ok=not (lost or s.args.get("failed")), truncated=bool(s.args.get("truncated"))))


def _measurement_end(f: _Fold, s: Step) -> None:
    f.add("measurement.ended", p.MeasurementEnded(window=f.window, reason=s.args.get("why", "complete"),
                                                  waves=f.ws.waves))


def _chain_abort(f: _Fold, s: Step) -> None:
    f.add("chain.aborted", p.ChainAborted(window=f.window, reason=s.reason))


def _restore(f: _Fold, s: Step) -> None:
    f.act("restore", arm="production")
    f.add("restore.finished", p.RestoreFinished(window=f.window, status="ok", attempts=int(s.args.get("attempt", 1))))


def _restore_failed(f: _Fold, s: Step) -> None:
    f.add("restore.finished", p.RestoreFinished(window=f.window, status="failed",
                                                attempts=int(s.args.get("attempts", 0))))


def _watch(f: _Fold, _s: Step) -> None:
    f.act("watch", watch="PASS")
    f.add("watch.result", p.WatchResult(window=f.window, verdict="PASS"))


def _placeholder(f: _Fold, s: Step) -> None:
    assert s.host is not None
    f.act(s.kind, s.host)
    event = "placeholder.up" if s.kind == "placeholder_up" else "placeholder.down"
    f.add(event, p.Placeholder(window=f.window, host=s.host))


def _marker_clear(f: _Fold, s: Step) -> None:
    f.add("chain.marker.cleared", p.ChainMarkerCleared(window=f.window, production_snapshot_sha256=s.args.get("sha"),
                                                       watch_seq=s.args.get("watch_seq")))


def _closed(f: _Fold, s: Step, ending: Any) -> None:
    f.add("window.closed", p.WindowClosed(window=f.window, ending=ending, summary=s.args.get("summary", "")))


def _restore_close(f: _Fold, s: Step) -> None:
    if s.args.get("production_up"):
        f.add("production.state", p.ProductionState(window=f.window, state="up", proof={}))
    if s.args.get("hold"):
        f.add("hold.closed", p.HoldClosed(window=f.window, owner=f.window, reason=s.args["ending"]))
    _closed(f, s, s.args["ending"])


def _close(f: _Fold, s: Step) -> None:
    _closed(f, s, s.args["ending"])


def _production_down_proof(f: _Fold, _s: Step) -> None:
    f.act("production_down_proof")
    f.add("production.state", p.ProductionState(window=f.window, state="down", proof={}))


def _chained_close(f: _Fold, s: Step) -> None:
    if s.args.get("hold"):
        f.add("hold.closed", p.HoldClosed(window=f.window, owner=f.window, reason="chained"))
    sha = f.ws.production_snapshot or (f.state.marker.production_snapshot_sha256 if f.state.marker else "") or DRY_SHA
    f.add("chain.marker.set", p.ChainMarkerSet(window=f.window, production_snapshot_sha256=sha, hosts=list(f.hosts)))
    _closed(f, s, "chained")


def _decide(f: _Fold, _s: Step) -> None:
    f.add("decision.recorded", p.DecisionRecorded(window=f.window, rule=f.plan.protocol, params={},
                                                  inputs_digest=DRY_SHA, input={}, result={"decision": None}))


# What each step kind's handler does when everything succeeds: its host actions and events.
SUCCESS: dict[StepKind, Callable[[_Fold, Step], None]] = {
    "probe": _probe, "preflight": _preflight, "placeholder_proof": _host_step, "quiet_proof": _host_step,
    "drain": _drain, "hold_open": _hold_open, "snapshot": _snapshot,
    "start_arm": _start_arm, "start_began": _start_began, "config_gate": _gate("start_config"),
    "spec_gate": _gate("standard_spec"), "attest_params": _attest_params, "warmup": _warmup, "prime": _prime,
    "wave": _wave, "smoke": _smoke,
    "budget": _budget,
    "end_start": _end_start, "measurement_end": _measurement_end,
    "chain_abort": _chain_abort, "restore": _restore, "restore_failed": _restore_failed, "watch": _watch,
    "placeholder_down": _placeholder, "marker_clear": _marker_clear, "restore_close": _restore_close,
    "close": _close, "placeholder_up": _placeholder, "fence": _host_step, "experiment_stop": _host_step,
    "closing_quiet_proof": _host_step, "production_down_proof": _production_down_proof,
    "closing_placeholder_proof": _host_step, "pair_close": _host_step, "hold_stash": _host_step,
    "commit_close": _host_step, "chained_close": _chained_close, "decide": _decide, "restore_check": _host_step,
}


def _admitted(f: _Fold) -> None:
    """Fold the gates and the admission the window still lacks, as if they had passed."""
    ws, marker = f.ws, f.state.marker
    if ws.ending is not None:
        return
    if marker is not None and marker.window != f.window:
        prev_ok = ws.gates.get("chain_prev_ok")
        if prev_ok is None or prev_ok.verdict != "PASS" or prev_ok.seq < marker.seq:
            f.add("gate.result", p.GateResult(window=f.window, gate="chain_prev_ok", verdict="PASS", evidence={},
                                              commit=f.plan.commit))
    if ws.admitted_seq is None:
        f.add("window.admitted", p.WindowAdmitted(window=f.window, commit=f.plan.commit, gates={},
                                                  under_marker=marker is not None and marker.window != f.window))


def planned_steps(plan: Plan, state: State, window: str, hosts: tuple[str, ...],
                  actions: frozenset[str] = frozenset()) -> tuple[list[DryStep], str | None]:
    """The steps ``--execute`` would take from ``state`` if everything succeeded, and why it would
    stop short of a decision (None: it decides). ``state`` is not changed. ``actions``: the site's
    actions (its thermal watch and optional close steps are steps too)."""
    from ..drivers.base import PLANNED_OPTIONAL_ACTIONS

    f = _Fold(plan, state, window, hosts, frozenset(actions))
    _admitted(f)
    steps: list[DryStep] = []
    for _ in range(MAX_STEPS):
        step = next_step(Context(plan, f.state, f.ws, hosts, site_actions=f.actions & PLANNED_OPTIONAL_ACTIONS))
        if step.kind == "done":
            return steps, None
        if step.kind == "blocked":
            return steps, step.reason
        effect = SUCCESS.get(step.kind)
        if effect is None:
            return steps, f"step {step.kind}: the dry run does not know what it does"
        calls, types = len(f.calls), len(f.types)
        effect(f, step)
        steps.append(DryStep(step, tuple(f.calls[calls:]), tuple(f.types[types:])))
    return steps, f"no decision after {MAX_STEPS} steps"
