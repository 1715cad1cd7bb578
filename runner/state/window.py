"""The folded state's values: what the ledger says about a window, and about the ledger's shared parts.

Every value here is a frozen dataclass and every collection in it is read-only (a tuple or
a mapping nobody mutates): the fold (``runner.state.fold``) returns new values and never
changes one it has handed out, so a state can be kept, shared and compared as a value.
Members whose content the hosts or the rules chose (a host's engine reports, the rule's
reasons, a clock reading's problems) are JSON values (``JSONValue``), as recorded.

``to_json()`` of each is its part of ``tally replay state --json`` (``docs/events.md``),
member for member and in the same order as before the state was typed (the golden
outputs in ``tests/fixtures/state_golden`` pin the bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TypeVar

from ..plan.model import Plan
from ..vocabulary import Phase

__all__ = [
    "ENGINE_REPORTS",
    "BudgetEntry",
    "ChainAbort",
    "Clock",
    "DecisionView",
    "EngineView",
    "FinishedAction",
    "GateView",
    "Hold",
    "Interruption",
    "JSONValue",
    "Marker",
    "MeasurementEnd",
    "OpenAction",
    "ParamsView",
    "PlaceholderUp",
    "Priming",
    "RestoreView",
    "StartView",
    "ThermalEntry",
    "Warmup",
    "WatchView",
    "WindowState",
    "evolve",
]

JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | tuple["JSONValue", ...]
"""A value as JSON holds it (the fold keeps what the ledger recorded; tuples print as arrays)."""
JSONObject = dict[str, JSONValue]
V = TypeVar("V", "WindowState", "StartView", "Clock")
EMPTY: Mapping[str, tuple[int, ...]] = MappingProxyType({})

ENGINE_REPORTS = ("config_digest", "speculative_config", "identity",
                  "worker_identity", "markov_identity", "experiment_commit", "worker_tree")
"""What a host reports about the engine a ``start_arm`` started (compared by ``start_config``)."""


def _plain(value: JSONValue) -> JSONValue:
    """A copy of a recorded JSON value sharing nothing (what ``to_json`` hands out)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def evolve(value: V, **changes: object) -> V:
    """A copy of ``value`` with ``changes`` (``dataclasses.replace`` without its per-field calls: the fold makes
    one per event). Only for the values below that keep their members in ``__dict__`` (no slots, no
    ``__post_init__``); a name that is not a member is refused."""
    members = value.__dict__
    if not members.keys() >= changes.keys():
        raise TypeError(f"{type(value).__name__} has no member {sorted(changes.keys() - members.keys())[0]!r}")
    new = object.__new__(type(value))
    new.__dict__.update(members)
    new.__dict__.update(changes)
    return new


# ---------------------------------------------------------------------- the ledger's shared parts


@dataclass(frozen=True, slots=True)
class Hold:
    """The HOLD, while it is open: which window holds it, since which event."""

    owner: str
    seq: int
    time: str

    def to_json(self) -> JSONObject:
        return {"owner": self.owner, "seq": self.seq, "time": self.time}


@dataclass(frozen=True, slots=True)
class Marker:
    """The chain marker: the window that set it, the production snapshot it carries, its seq."""

    window: str
    production_snapshot_sha256: str
    seq: int

    def to_json(self) -> JSONObject:
        return {"window": self.window, "production_snapshot_sha256": self.production_snapshot_sha256,
                "seq": self.seq}


@dataclass(frozen=True, slots=True)
class PlaceholderUp:
    """A placeholder up on a host: which window raised it, at which seq."""

    window: str
    seq: int

    def to_json(self) -> JSONObject:
        return {"window": self.window, "seq": self.seq}


# ---------------------------------------------------------------------- gates


@dataclass(frozen=True, slots=True)
class GateView:
    """A gate's latest result; a gate checked per start (``start_config``, ``standard_spec``) keeps
    each start's result in ``starts`` and its own verdict is theirs combined (FAIL, PASS, PENDING)."""

    verdict: str
    seq: int
    commit: str | None
    summary: str
    starts: Mapping[str, GateView] | None = None

    def of(self, start: str) -> GateView | None:
        """The result recorded for ``start`` (None: none)."""
        return None if self.starts is None else self.starts.get(start)

    def to_json(self) -> JSONObject:
        out: JSONObject = {"verdict": self.verdict, "seq": self.seq, "commit": self.commit, "summary": self.summary}
        if self.starts is not None:
            out["starts"] = {sid: gate.to_json() for sid, gate in self.starts.items()}
        return out


# ---------------------------------------------------------------------- starts


@dataclass(frozen=True, slots=True)
class Warmup:
    cold_ttft_s: float | None
    warm_ttft_s: float | None
    seq: int
    failed: str | None = None   # why the server's own counter does not show the warm-up served (None: it does)

    def to_json(self) -> JSONObject:
        out: JSONObject = {"cold_ttft_s": self.cold_ttft_s, "warm_ttft_s": self.warm_ttft_s, "seq": self.seq}
        if self.failed is not None:
            out["failed"] = self.failed
        return out


@dataclass(frozen=True, slots=True)
class ParamsView:
    """A start's ``params.attested``: did what its server reports equal the plan's (and why not)."""

    ok: bool
    none_reported: bool
    failures: tuple[str, ...]
    seq: int

    def to_json(self) -> JSONObject:
        return {"ok": self.ok, "none_reported": self.none_reported, "failures": list(self.failures),
                "seq": self.seq}


@dataclass(frozen=True, slots=True)
class Priming:
    cache_salt: str
    ok: bool
    seq: int

    def to_json(self) -> JSONObject:
        return {"cache_salt": self.cache_salt, "ok": self.ok, "seq": self.seq}


@dataclass(frozen=True)
class StartView:
    """One start (a block): from its ``start.began`` to its ``start.ended``, with what happened in between.

    ``waves``: per cell, the wave numbers measured (in seq order); ``smoke``: the smoke probes
    recorded on it (None: none yet); ``params``: its effective-parameter attestation (None: none
    recorded, as in ledgers older than it); ``later``: the optional members in the order they were
    first recorded (``priming``, ``ended_time``, ``smoke``, ``params``), the order ``to_json`` prints them in.
    """

    role: str
    status: str                      # began | ended
    clock_cap_mhz: int | None
    spec_config_sha256: str
    began_seq: int
    began_time: str
    ended_seq: int | None = None
    ok: bool | None = None
    warmup: Warmup | None = None
    waves: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: EMPTY)
    truncated: bool = False
    clock_problems: tuple[JSONValue, ...] = ()
    priming: Priming | None = None
    ended_time: str | None = None
    smoke: tuple[str, ...] | None = None
    params: ParamsView | None = None
    later: tuple[str, ...] = ()

    def measured(self, cell: str, wave: int) -> bool:
        return wave in self.waves.get(cell, ())

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "role": self.role, "status": self.status, "clock_cap_mhz": self.clock_cap_mhz,
            "spec_config_sha256": self.spec_config_sha256, "began_seq": self.began_seq,
            "began_time": self.began_time, "ended_seq": self.ended_seq, "ok": self.ok,
            "warmup": None if self.warmup is None else self.warmup.to_json(),
            "waves": {cell: list(waves) for cell, waves in self.waves.items()},
            "truncated": self.truncated, "clock_problems": [_plain(p) for p in self.clock_problems],
        }
        for name in self.later:
            if name == "priming":
                out["priming"] = None if self.priming is None else self.priming.to_json()
            elif name == "ended_time":
                out["ended_time"] = self.ended_time
            elif name == "smoke":
                out["smoke"] = tuple(self.smoke or ())
            elif name == "params":
                out["params"] = None if self.params is None else self.params.to_json()
        return out


# ---------------------------------------------------------------------- host actions and the engine


@dataclass(frozen=True, slots=True)
class OpenAction:
    """A host action started and not finished: an unknown outcome until a finished record (or a re-probe)."""

    host: str
    action: str
    seq: int
    time: str
    probe_of: str | None
    action_id: str

    def to_json(self) -> JSONObject:
        return {"host": self.host, "action": self.action, "seq": self.seq, "time": self.time,
                "probe_of": self.probe_of, "action_id": self.action_id}


@dataclass(frozen=True, slots=True)
class FinishedAction:
    """A finished host action: whether it succeeded, for which start, when it started (None: no start record)."""

    action: str
    host: str
    ok: bool
    seq: int
    time: str
    start: JSONValue
    started_time: str | None
    # a per-host action that could not reach a host the HOLD allows unreachable (``detail.unreachable_allowed``):
    # recorded, failed, and counted as done by the step machine
    unreachable: bool = False


@dataclass(frozen=True, slots=True)
class EngineView:
    """What the hosts serve, as the window's finished host actions last established it.

    ``reports`` holds what the host reported about the engine its ``start_arm`` started
    (``ENGINE_REPORTS``; ``reported``: the ones it did report); None after a restore, which
    reports none.
    """

    arm: JSONValue
    role: JSONValue
    start: JSONValue
    status: JSONValue
    serving: JSONValue
    session: JSONValue
    reports: Mapping[str, JSONValue] | None = None
    reported: tuple[str, ...] = ()

    def report(self, name: str) -> JSONValue:
        return None if self.reports is None else self.reports.get(name)

    def to_json(self) -> JSONObject:
        out: JSONObject = {"arm": _plain(self.arm), "role": _plain(self.role), "start": _plain(self.start),
                           "status": _plain(self.status), "serving": _plain(self.serving),
                           "session": _plain(self.session)}
        if self.reports is not None:
            out.update({k: _plain(self.reports.get(k)) for k in ENGINE_REPORTS})
            out["reported"] = list(self.reported)
        return out


# ---------------------------------------------------------------------- the window's records


@dataclass(frozen=True, slots=True)
class MeasurementEnd:
    reason: str
    seq: int

    def to_json(self) -> JSONObject:
        return {"reason": self.reason, "seq": self.seq}


@dataclass(frozen=True, slots=True)
class RestoreView:
    status: str
    attempts: int
    seq: int

    def to_json(self) -> JSONObject:
        return {"status": self.status, "attempts": self.attempts, "seq": self.seq}


@dataclass(frozen=True, slots=True)
class WatchView:
    verdict: str
    seq: int

    def to_json(self) -> JSONObject:
        return {"verdict": self.verdict, "seq": self.seq}


@dataclass(frozen=True, slots=True)
class ChainAbort:
    reason: str
    marker_window: str | None
    seq: int

    def to_json(self) -> JSONObject:
        return {"reason": self.reason, "marker_window": self.marker_window, "seq": self.seq}


@dataclass(frozen=True, slots=True)
class Interruption:
    """A ``window.interrupted``: why, by which signal, in which phase; ``append_failed``: an append was refused."""

    reason: str
    signal: str | None
    seq: int
    phase: str
    append_failed: bool = False

    def to_json(self) -> JSONObject:
        out: JSONObject = {"reason": self.reason, "signal": self.signal, "seq": self.seq, "phase": self.phase}
        if self.append_failed:
            out["append_failed"] = True
        return out


@dataclass(frozen=True, slots=True)
class BudgetEntry:
    action: str
    reason: str
    seq: int
    start: str | None
    cell: str | None

    def to_json(self) -> JSONObject:
        return {"action": self.action, "reason": self.reason, "seq": self.seq, "start": self.start, "cell": self.cell}


@dataclass(frozen=True, slots=True)
class ThermalEntry:
    host: str
    kind: str
    seq: int
    inside_hold: bool

    def to_json(self) -> JSONObject:
        return {"host": self.host, "kind": self.kind, "seq": self.seq, "inside_hold": self.inside_hold}


@dataclass(frozen=True, slots=True)
class DecisionView:
    """The recorded decision: the rule, its result's decision and reasons (as the rule wrote them), the digest."""

    rule: str
    result: JSONValue
    reasons: JSONValue
    inputs_digest: str
    seq: int

    @property
    def verdict(self) -> str | None:
        return self.result if isinstance(self.result, str) else None

    @property
    def reason_lines(self) -> tuple[str, ...]:
        return tuple(str(r) for r in self.reasons) if isinstance(self.reasons, list | tuple) else ()

    def to_json(self) -> JSONObject:
        return {"rule": self.rule, "result": _plain(self.result), "reasons": _plain(self.reasons),
                "inputs_digest": self.inputs_digest, "seq": self.seq}


@dataclass(frozen=True)
class Clock:
    """The window's times (the ledger's clock): first host action, HOLD opened, measurement ended, closed, last."""

    first_action: str | None = None
    hold_opened: str | None = None
    measurement_ended: str | None = None
    closed: str | None = None
    last: str | None = None

    def to_json(self) -> JSONObject:
        return {"first_action": self.first_action, "hold_opened": self.hold_opened,
                "measurement_ended": self.measurement_ended, "closed": self.closed, "last": self.last}


# ---------------------------------------------------------------------- the window


@dataclass(frozen=True)
class WindowState:
    """What the ledger says about one window (a value: the fold returns a new one per event)."""

    id: str
    phase: Phase = "unregistered"
    plan_sha256: str | None = None
    plan_json: Mapping[str, JSONValue] | None = None   # the registered plan as recorded (``plan`` parses it)
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
    gates: Mapping[str, GateView] = field(default_factory=lambda: MappingProxyType({}))
    starts: Mapping[str, StartView] = field(default_factory=lambda: MappingProxyType({}))
    current_start: str | None = None
    waves: int = 0
    hold_seq: int | None = None
    production_snapshot: str | None = None
    measurement_ended: MeasurementEnd | None = None
    restore: RestoreView | None = None
    watch: WatchView | None = None
    placeholders_raised: tuple[str, ...] = ()
    marker_set_seq: int | None = None
    marker_cleared_seq: int | None = None
    chain_aborted: ChainAbort | None = None
    ending: str | None = None
    closed_seq: int | None = None
    decision: DecisionView | None = None
    interrupted: tuple[Interruption, ...] = ()
    open_actions: Mapping[str, OpenAction] = field(default_factory=lambda: MappingProxyType({}))
    finished: tuple[FinishedAction, ...] = ()
    engine: EngineView | None = None
    actions: int = 0
    budget: tuple[BudgetEntry, ...] = ()
    stop_admitting: bool = False
    thermal: tuple[ThermalEntry, ...] = ()
    # per start: when its block began (the started time of its first ok start_arm; ledgers older
    # than ``started_time``: when it finished); a start with none begins at its start.began
    block_began: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # the THERMAL-WATCH entries already recorded as thermal.event: (host, the log's watch_seq)
    dial_backs_recorded: frozenset[tuple[str, int]] = frozenset()
    # per start: the clock caps (MHz) its recorded dial-backs fell to, in seq order (None: a malformed reading)
    dial_back_caps: Mapping[str, tuple[int | None, ...]] = field(default_factory=lambda: MappingProxyType({}))
    clock: Clock = Clock()
    extra_registrations: tuple[int, ...] = ()
    # per host action name: how many of its starts were recorded, less those whose finished record
    # says the action never ran (``detail.not_run``); the step machine's "touched" test reads it
    begun: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # the seq of the first finished ``probe`` whose facts said production is not serving (down, draining)
    not_serving_seq: int | None = None
    # what each recorded ``pressure.crossed`` said, in seq order: measuring stops at the first
    pressure: tuple[str, ...] = ()
    # the hosts this window's HOLD allows unreachable (``hold.opened`` allow_unreachable, the site's table
    # for the window's mode): a per-host step that cannot reach one of them is recorded and passed
    unreachable_allowed: tuple[str, ...] = ()
    # per role: the first start of it whose start_arm succeeded, and the identity its host reported then
    # (arm equivalence compares each role's first start with the plan's first start's)
    first_identity: Mapping[str, tuple[str, JSONValue]] = field(default_factory=lambda: MappingProxyType({}))
    # the window that had acted, and was not closed, when this one took its first host action (a ledger an
    # older runner raced on): this window's snapshot may be of hosts the other drained, so it never goes on
    # to a HOLD (``State.acting``)
    raced_with: str | None = None

    @property
    def closed(self) -> bool:
        return self.ending is not None

    @cached_property
    def plan(self) -> Plan | None:
        """The registered plan, parsed once, when first read (None: not registered, or it does not parse: the
        audit says why). Later states of the window share it: registration is the plan's only event."""
        if self.plan_json is None:
            return None
        from ledger.errors import TallyError

        from ..plan.parse import parse_plan

        try:
            return parse_plan(self.plan_json, path="registered plan")
        except (TallyError, TypeError, ValueError):
            return None

    @property
    def live(self) -> bool:
        """Registered, not closed."""
        return self.ending is None and self.phase != "unregistered"

    def gate(self, name: str) -> GateView | None:
        return self.gates.get(name)

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "phase": self.phase,
            "plan_sha256": self.plan_sha256,
            "protocol": self.protocol,
            "mode": self.mode,
            "chain": self.chain,
            "commit": self.commit,
            "required_gates": list(self.required_gates),
            "registered_seq": self.registered_seq,
            "admitted_seq": self.admitted_seq,
            "gates": {name: gate.to_json() for name, gate in self.gates.items()},
            "starts": {sid: start.to_json() for sid, start in self.starts.items()},
            "current_start": self.current_start,
            "waves": self.waves,
            "production_snapshot": self.production_snapshot,
            "measurement_ended": None if self.measurement_ended is None else self.measurement_ended.to_json(),
            "restore": None if self.restore is None else self.restore.to_json(),
            "watch": None if self.watch is None else self.watch.to_json(),
            "chain_aborted": None if self.chain_aborted is None else self.chain_aborted.to_json(),
            "ending": self.ending,
            "decision": None if self.decision is None else self.decision.to_json(),
            "interrupted": [i.to_json() for i in self.interrupted],
            "open_actions": [a.to_json() for a in self.open_actions.values()],
            "engine": None if self.engine is None else self.engine.to_json(),
            "budget": [b.to_json() for b in self.budget],
            "stop_admitting": self.stop_admitting,
            "thermal": [t.to_json() for t in self.thermal],
            "block_began": dict(self.block_began),
            "dial_backs_recorded": [list(key) for key in sorted(self.dial_backs_recorded)],
            "dial_back_caps": {sid: list(caps) for sid, caps in self.dial_back_caps.items()},
            "clock": self.clock.to_json(),
        }
        if self.pressure:   # only when recorded: older states' JSON is unchanged
            out["pressure"] = list(self.pressure)
        if self.raced_with is not None:   # the same
            out["raced_with"] = self.raced_with
        return out
