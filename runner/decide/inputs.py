"""Decision inputs from a window's events, and verdict replay (``tally replay verdict``).

``build_input(plan, events, archive)`` turns the recorded measurements of one window
into the JSON input of its rule (docs/rules.md), exactly as the runner did when it
decided, and returns the hashes of the events it used, in seq order:
``inputs_digest`` = SHA-256 over those raw 32-byte hashes. The events used are the
window's ``start.began`` (clock caps), ``wave.measured``, ``thermal.event`` (inside the
HOLD) and, for win2, the ``archive.control_start`` events recorded before the
decision for the same cell, max_tokens and production clock cap (other windows'
control starts: the day-to-day spread).

``replay(plan, events, archive, decision)`` recomputes and compares field by field.
Pure: events in, result out.

The builder is versioned (``INPUT_BUILDERS``): a decision records the ``input_builder`` that
built its input, and replay and audit rebuild with that one, so a ledger written by an
older tally replays to its own recorded input. Builder 1 (decisions without the member)
gave win2-v1 no ``repeats`` param (the rule assumed 3) and kept one pp3-v1 request per
(block, family, context); builder 2 passes the registered repeats and keeps every request;
builder 3 takes win2-v1's archive rows by their comparability key
(``runner.state.archive.comparability_key``: cell, control config digest, production
commit, clock cap, max_tokens), imported rows included, dialled-back starts left out;
builder 4 gives win2-v1 a wave's delivered accepted drafts (``accepted_delivered``,
``docs/measure.md``) as ``accepted``, the server's raw count beside it as
``accepted_counted``, and says so (``accepted_basis``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.errors import PolicyError

from ..events import payloads as p
from ..events import read_payload
from ..state.archive import ARCHIVE_TYPES
from .compare import Difference, diff
from .digest import inputs_digest
from .rules import compute
from .smoke import smoke_tally

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.store import Ledger

    from ..plan.model import Plan

__all__ = [
    "INPUT_BUILDER", "INPUT_BUILDERS", "DecisionInput", "ReplayResult", "abort_reasons", "build_input",
    "decision_for", "pp3_failures", "recorded_builder", "replay", "replay_window", "smoke_findings",
]

# a THERMAL-WATCH line naming a host the site does not have (``malformed``) still reported a
# dial-back: the window cannot show its clocks held, so it counts as one (fail closed)
_DIAL_BACKS = ("dial_back", "malformed")

INPUT_BUILDER = 5
"""The builder new decisions use (recorded as ``decision.recorded.input_builder``).

1: the first; 2: pp3 keeps each prompt of a frozen order, win2 carries ``repeats``;
3: pp3 carries ``clocks`` (the blocks' clock caps, dial-backs inside the HOLD) and
``incomplete`` (priming that did not verify), as win2 reads clocks; win2 takes archive
entries by their comparability key (``runner.state.archive``); 4: win2's ``accepted`` is
the delivered figure (``counters.accepted_delivered``: vLLM counts drafts accepted past
max_tokens, which the request discards), the raw counter kept as ``accepted_counted``;
5: pp3 carries ``diagnostics.accepted_per_round`` (per arm, from its blocks' waves' engine
counters: seed 003 asks for it as a diagnostic that cannot override the decision)."""
INPUT_BUILDERS = (1, 2, 3, 4, 5)
ACCEPTED_BASIS = ("delivered: each wave's accepted is counters.accepted_delivered (the server's accepted drafts "
                  "capped at generation tokens - first tokens - rounds: drafts accepted past max_tokens, EOS or a "
                  "stop token are counted and discarded); accepted_counted is the raw counter; a wave recorded "
                  "without accepted_delivered keeps its raw count")


def recorded_builder(decision: Event) -> int:
    """The input builder a recorded decision names (1 when it predates the member)."""
    builder = read_payload(decision, p.DecisionRecorded).input_builder
    if builder is None:
        return 1
    if builder not in INPUT_BUILDERS:
        raise PolicyError(f"decision at seq {decision.seq} was built by input builder {builder!r}; "
                         f"this tally knows builders {', '.join(map(str, INPUT_BUILDERS))}")
    return int(builder)

@dataclass(frozen=True)
class DecisionInput:
    input: dict[str, Any]
    used: tuple[str, ...]  # event hashes, seq order

    @property
    def digest(self) -> str:
        return inputs_digest(list(self.used))


def _keyed_archive_entries(plan: Plan, events: Sequence[Event], archive: Iterable[Event],
                           before: int | None) -> tuple[list[dict[str, Any]], list[Event]]:
    """Builder 3: the rows whose comparability key is this window's, per decision cell."""
    from ..plan.model import CONTROL_ROLE
    from ..state.archive import ArchiveKey, archive_rows, day_to_day_rows, production_commit

    held = [e for e in archive if before is None or e.seq < before]
    rows = archive_rows(held)
    snapshot = next((read_payload(e, p.ProductionSnapshot) for e in events if e.type == "production.snapshot"), None)
    commit = production_commit(snapshot.identity if snapshot is not None else None)
    control = plan.arm(CONTROL_ROLE[plan.mode]).config_digest
    entries: list[dict[str, Any]] = []
    seqs: set[int] = set()
    for cell in (c.name for c in plan.cells if c.decision):
        key = ArchiveKey(cell, control, commit, plan.production_clock_cap_mhz, plan.sampling.max_tokens)
        for row in day_to_day_rows(rows, key, exclude_window=plan.window_id):
            assert row.pooled_rate_tps is not None
            entries.append({"cell": cell, "pooled_rate_tps": row.pooled_rate_tps, "window": row.window,
                            "start": row.start, "clock_cap_mhz": row.key.clock_cap_mhz})
            seqs.add(row.seq)
    return entries, [e for e in held if e.seq in seqs]


def _archive_entries(
    plan: Plan, archive: Iterable[Event], before: int | None
) -> tuple[list[dict[str, Any]], list[Event]]:
    entries, used = [], []
    for event in archive:
        if before is not None and event.seq >= before:
            continue
        if event.type != "archive.control_start":
            continue
        row = read_payload(event, p.ArchiveControlStart)
        if row.window == plan.window_id:
            continue
        if row.max_tokens != plan.sampling.max_tokens or row.clock_cap_mhz != plan.production_clock_cap_mhz:
            continue
        if row.cell not in {c.name for c in plan.cells if c.decision}:
            continue
        rate = (row.figures or {}).get("pooled_rate_tps")
        if not isinstance(rate, int | float) or isinstance(rate, bool):
            continue
        entries.append({"cell": row.cell, "pooled_rate_tps": float(rate), "window": row.window,
                        "start": row.start, "clock_cap_mhz": row.clock_cap_mhz})
        used.append(event)
    return entries, used


def _not_counted(wave: p.WaveMeasured) -> str:
    """Why a wave does not count for win2 ('' when it does)."""
    reasons = [] if wave.complete else list(wave.incomplete_reasons or ["incomplete"])
    censored = wave.client.censored
    if censored:
        reasons.append(f"{censored} request(s) censored by a deadline")
    return "; ".join(reasons)


def _served_by_its_engine(wave: p.WaveMeasured) -> bool:
    """The wave's engine attestation (absent in ledgers older than it) says its start's engine served it."""
    engine = wave.engine
    if not isinstance(engine, dict):
        return True
    return all(isinstance(seen, dict) and seen.get("ok") for seen in engine.values())


def _dial_backs_in_hold(events: Sequence[Event]) -> list[Event]:
    """The thermal dial-backs recorded inside the HOLD."""
    return [e for e in _in_hold(events)
            if e.type == "thermal.event" and read_payload(e, p.ThermalEvent).kind in _DIAL_BACKS]


def _in_hold(events: Sequence[Event]) -> list[Event]:
    inside, out = False, []
    for event in events:
        if event.type == "hold.opened":
            inside = True
        elif event.type == "hold.closed":
            inside = False
        elif inside:
            out.append(event)
    return out


def pp3_failures(events: Sequence[Event]) -> list[str]:
    """Failure kinds observed in the window's events (REJECT reasons of pp3-v1)."""
    failures: list[str] = []
    for event in events:
        if event.type == "restore.finished" and read_payload(event, p.RestoreFinished).status == "failed":
            failures.append("recovery: restore failed")
        elif event.type == "start.ended":
            ended = read_payload(event, p.StartEnded)
            if not ended.ok and not ended.truncated:
                failures.append(f"lifecycle: start {ended.start} {ended.reason or 'failed'}")
    return failures


def pressure_findings(events: Sequence[Event]) -> tuple[list[str], list[Event]]:
    """What the window's ``pressure.crossed`` events said (one line per wave) and the events themselves."""
    used = [e for e in events if e.type == "pressure.crossed"]
    return [read_payload(event, p.PressureCrossed).line for event in used], used


def smoke_findings(plan: Plan, events: Sequence[Event]) -> tuple[list[str], list[str]]:
    """The smoke stage's failures (named by kind) and its registered probes that did not run.

    A near tie is a failure only when the plan registers ``near_tie_rejects`` (``runner.decide.smoke``).
    """
    if plan.smoke is None:
        return [], []
    tally = smoke_tally(plan, events)
    failures = [f"{r.recorded.kind}: {r.recorded.summary}" for r in tally.failed]
    missing = [f"smoke probe {probe} did not run on {start}" for start, probe in tally.missing]
    return failures, missing


def _smoke_counts(plan: Plan, events: Sequence[Event]) -> bool:
    """Does the smoke stage enter the decision input? (A declared stage, or one that recorded results:
    windows recorded before the stage existed rebuild to their own input.)"""
    return smoke_tally(plan, events).counts


def build_input(plan: Plan, events: Sequence[Event], archive: Iterable[Event] = (),
                before: int | None = None, builder: int = INPUT_BUILDER) -> DecisionInput:
    """The rule input of ``plan``'s window from its events (those with seq < ``before``)."""
    if builder not in INPUT_BUILDERS:
        raise ValueError(f"unknown input builder {builder}")
    window_events = [e for e in events if before is None or e.seq < before]
    if plan.protocol == "win2-v1":
        return _win2(plan, window_events, archive, before, builder)
    return _pp3(plan, window_events, builder)


def _params(plan: Plan, builder: int) -> dict[str, Any]:
    params: dict[str, Any] = dict(plan.decision_params)
    if builder >= 2 and plan.protocol == "win2-v1":
        params["repeats"] = plan.measurement.repeats
    return params


def _win2(plan: Plan, events: Sequence[Event], archive: Iterable[Event], before: int | None,
          builder: int) -> DecisionInput:
    used: list[Event] = []
    starts: dict[str, dict[str, Any]] = {}
    waves: list[dict[str, Any]] = []
    incomplete: list[str] = []
    for event in events:
        if event.type == "start.began":
            began = read_payload(event, p.StartBegan)
            if began.start in plan.smoke_stage_ids:
                continue   # the smoke stage's own start measures nothing: no start of the rule's
            starts[began.start] = {"role": began.role, "clock_cap_mhz": began.clock_cap_mhz}
            used.append(event)
        elif event.type == "wave.measured":
            used.append(event)
            w = read_payload(event, p.WaveMeasured)
            why = _not_counted(w)
            if why:
                # A wave the client marked incomplete (failed, timed-out or cancelled requests,
                # unreadable counters), or one with requests cut short by a deadline (no longer
                # the registered forced length), is not a measurement: its repeat lacks data.
                incomplete.append(f"{w.start}/{w.cell}/wave {w.wave}: {why}")
                continue
            counters, client = w.counters, w.client
            row = {
                "start": w.start, "cell": w.cell, "repeat": w.repeat, "family": w.family,
                "wave": w.wave, "seed": w.seed,
                "rounds": counters.rounds, "accepted": counters.accepted,
                "decode_s": counters.decode_s, "ttft_s": list(client.ttft_s or []),
                "client_tokens_after_first": client.tokens_after_first,
                "client_decode_s": client.decode_s,
            }
            if builder >= 4:
                row["accepted_counted"] = row["accepted"]
                if counters.accepted_delivered is not None:
                    row["accepted"] = counters.accepted_delivered
            waves.append(row)
    thermal = _dial_backs_in_hold(events)
    used.extend(thermal)
    for start in plan.starts:  # a start that never began still appears, with no clock cap
        starts.setdefault(start.id, {"role": start.role, "clock_cap_mhz": None})
    # Other windows' control starts recorded before this window closed: a bound both the
    # runner (deciding right after the close) and a later replay see the same way.
    closed = next((e.seq for e in events if e.type == "window.closed"), None)
    bound = closed if closed is not None else before
    entries, archive_used = (_keyed_archive_entries(plan, events, archive, bound) if builder >= 3
                             else _archive_entries(plan, archive, bound))
    used.extend(archive_used)
    data = {
        "rule": "win2-v1",
        "params": _params(plan, builder),
        "decision_cells": [c.name for c in plan.cells if c.decision],
        "production_clock_cap_mhz": plan.production_clock_cap_mhz,
        "starts": starts,
        "thermal_dialbacks_in_hold": len(thermal),
        "waves": waves,
        "archive": entries,
    }
    if builder >= 4:
        data["accepted_basis"] = ACCEPTED_BASIS
    if incomplete:
        data["excluded_waves"] = incomplete
    pressure, pressure_events = pressure_findings(events)
    if pressure:   # a plan's [pressure] limit crossed: measuring stopped there (absent in older windows)
        data["pressure"] = pressure
        used.extend(pressure_events)
    if plan.smoke is not None and plan.smoke.win2_effect == "inconclusive" and _smoke_counts(plan, events):
        failures, missing = smoke_findings(plan, events)
        used.extend(e for e in events if e.type == "smoke.result")
        if failures or missing:
            data["smoke_failures"] = failures + [f"incomplete: {m}" for m in missing]
    return DecisionInput(data, tuple(e.hash for e in sorted(used, key=lambda e: e.seq)))


def _pp3(plan: Plan, events: Sequence[Event], builder: int) -> DecisionInput:
    used: list[Event] = []
    context_of = {c.name: c.context for c in plan.cells}
    role_of = {s.id: s.role for s in plan.starts}
    # Builder 1 keyed a request by (block, family, context) alone, so a wave of several prompts
    # kept only its last; builder 2 keeps each prompt of the frozen order.
    seen: dict[tuple[str, ...], dict[str, Any]] = {}
    tpot_guard = plan.decision.get("guard") == "tpot_ms"
    counted: dict[str, list[float]] = {role: [0.0, 0.0] for role in sorted(set(role_of.values()))}  # accepted, rounds
    for event in events:
        if event.type != "wave.measured":
            continue
        w = read_payload(event, p.WaveMeasured)
        used.append(event)
        if not _served_by_its_engine(w):
            continue  # not an observation of its block's arm: its requests count as not recorded
        rounds, accepted = w.counters.rounds, w.counters.accepted_delivered
        accepted = w.counters.accepted if accepted is None else accepted
        if rounds and accepted is not None and w.start in role_of:
            counted[role_of[w.start]][0] += accepted
            counted[role_of[w.start]][1] += rounds
        for record in w.requests:
            key: tuple[str, ...] = (w.start, w.family, context_of.get(w.cell, w.cell))
            if builder >= 2:
                key += (str(record.prompt_id),)
            seen[key] = {
                "block": w.start, "arm": role_of.get(w.start, "?"), "family": w.family,
                "context": key[2], "status": record.status, "delivered_tokens": record.delivered_tokens,
                "decode_s": record.decode_s, "ttft_s": record.ttft_s, "round_ms_p95": record.round_ms_p95,
                "prompt_id": record.prompt_id,
            }
            if tpot_guard:  # the plan's guard compares TPOT (chunks are not engine steps on its server)
                seen[key]["tpot_ms"] = record.tpot_ms
    stopped = any(e.type in ("budget.decision", "window.interrupted", "chain.aborted", "pressure.crossed")
                  for e in events)
    requests = []
    for wave in plan.waves:
        base = (wave.start, wave.family, context_of[wave.cell])
        planned: list[tuple[tuple[str, ...], str | None]] = (
            [((*base, pid), pid) for pid in wave.prompt_ids] if builder >= 2 else [(base, None)])
        for key, prompt_id in planned:
            if key in seen:
                requests.append(seen[key])
                continue
            # planned, never recorded: cancelled by a recorded stop, else lost
            missing: dict[str, Any] = {
                "block": wave.start, "arm": wave.role, "family": wave.family, "context": base[2],
                "status": "cancelled" if stopped else "lost", "delivered_tokens": None,
                "decode_s": None, "ttft_s": None, "round_ms_p95": None}
            if prompt_id is not None:
                missing["prompt_id"] = prompt_id
            if tpot_guard:
                missing["tpot_ms"] = None
            requests.append(missing)
    gate_events = [e for e in events if e.type == "window.admitted"]
    failure_events = [e for e in events if e.type in ("restore.finished", "start.ended")]
    failures = pp3_failures(failure_events)
    used.extend(gate_events + [e for e in failure_events if pp3_failures([e])])
    data: dict[str, Any] = {
        "rule": "pp3-v1",
        "params": _params(plan, builder),
        "gates_passed": bool(gate_events),
        "failures": failures,
        "requests": requests,
    }
    if builder >= 3:
        data["clocks"], clock_events = _pp3_clocks(plan, events)
        incomplete, priming_events = _pp3_priming(events)
        pressure, pressure_events = pressure_findings(events)
        incomplete += [f"pressure: {line}" for line in pressure]
        used.extend(clock_events + priming_events + pressure_events)
        if incomplete:
            data["incomplete"] = incomplete
    if builder >= 5:   # a diagnostic (seed 003: "report as a diagnostic; it cannot override")
        data["diagnostics"] = {"accepted_per_round": {
            role: round(a / r, 6) if r else None for role, (a, r) in counted.items()}}
    if _smoke_counts(plan, events):
        smoke_failed, smoke_missing = smoke_findings(plan, events)
        failures.extend(smoke_failed)
        used.extend(e for e in events if e.type == "smoke.result")
        if smoke_missing:
            data["smoke_missing"] = smoke_missing
    unique = {e.seq: e for e in used}  # a start.began used for its clock cap and its waves' roles once
    return DecisionInput(data, tuple(unique[seq].hash for seq in sorted(unique)))


def _pp3_clocks(plan: Plan, events: Sequence[Event]) -> tuple[dict[str, Any], list[Event]]:
    """The blocks' recorded clock caps and the thermal dial-backs inside the HOLD (as win2-v1 reads them)."""
    blocks: dict[str, int | None] = {start.id: None for start in plan.starts}
    used: list[Event] = []
    for event in events:
        if event.type == "start.began":
            began = read_payload(event, p.StartBegan)
            if began.start in blocks:
                blocks[began.start] = began.clock_cap_mhz
                used.append(event)
    thermal = _dial_backs_in_hold(events)
    return ({"production_clock_cap_mhz": plan.production_clock_cap_mhz, "blocks": blocks,
             "thermal_dialbacks_in_hold": len(thermal)}, used + thermal)


def _pp3_priming(events: Sequence[Event]) -> tuple[list[str], list[Event]]:
    """Priming that did not verify (``priming.done`` with ``ok`` false): the pairs were not measured as registered."""
    reasons: list[str] = []
    used: list[Event] = []
    for event in events:
        if event.type != "priming.done":
            continue
        primed = read_payload(event, p.PrimingDone)
        if not primed.ok:
            used.append(event)
            reasons += [f"priming in block {primed.start}: {why}" for why in primed.failures or ["priming failed"]]
    return reasons, used


def abort_reasons(events: Sequence[Event]) -> list[str]:
    """Why a window that closed ``aborted`` was aborted (its decision is REJECT)."""
    reasons = []
    for event in events:
        if event.type == "chain.aborted":
            reasons.append(f"chain aborted: {read_payload(event, p.ChainAborted).reason}")
        elif event.type == "window.interrupted" and read_payload(event, p.WindowInterrupted).reason == "abort":
            reasons.append("aborted by the operator")
        elif event.type == "gate.result":
            gate = read_payload(event, p.GateResult)
            if gate.gate == "standard_spec" and gate.verdict == "FAIL":
                reasons.append(f"standard_spec FAIL for start {gate.start}: {gate.summary or 'not standard'}")
            elif gate.gate == "start_config" and gate.verdict == "FAIL":
                reasons.append(f"start_config FAIL for start {gate.start}: {gate.summary or 'not the declared arm'}")
        elif event.type == "measurement.ended" and not any(e.type == "hold.opened" for e in events):
            why = read_payload(event, p.MeasurementEnded).reason
            reasons.append(f"the window ended before it held the hosts ({why})")
    return reasons or ["window aborted"]


def decision_for(plan: Plan, events: Sequence[Event], archive: Iterable[Event] = (),
                 before: int | None = None,
                 builder: int = INPUT_BUILDER) -> tuple[DecisionInput, dict[str, Any]]:
    """The input and the result a window's decision must record.

    A window that closed ``aborted`` is decided REJECT (``docs/window.md``, endings) with the reasons its
    events give; otherwise the registered rule decides from the rebuilt input.
    """
    window_events = [e for e in events if before is None or e.seq < before]
    built = build_input(plan, window_events, archive, before, builder)
    ending = next((read_payload(e, p.WindowClosed).ending for e in window_events if e.type == "window.closed"), None)
    if ending == "aborted":
        result = {"rule": plan.protocol, "decision": "REJECT", "reasons": abort_reasons(window_events),
                  "params": built.input["params"]}
        return built, result
    return built, compute(built.input)


@dataclass(frozen=True)
class ReplayResult:
    window: str
    decision_seq: int
    recorded: dict[str, Any]
    recomputed: dict[str, Any]
    differences: tuple[Difference, ...]

    @property
    def match(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window, "decision_seq": self.decision_seq,
            "verdict": "MATCH" if self.match else "MISMATCH",
            "recorded_decision": self.recorded.get("result", {}).get("decision"),
            "recomputed_decision": self.recomputed.get("result", {}).get("decision"),
            "differences": [d.to_json() for d in self.differences],
        }


def replay(plan: Plan, events: Sequence[Event], archive: Iterable[Event], decision: Event) -> ReplayResult:
    """Rebuild the decision from the events before it and compare with what was recorded.

    Compared: the rule, its params, the inputs digest, the input itself and the result.
    """
    rebuilt, outcome = decision_for(plan, events, archive, before=decision.seq, builder=recorded_builder(decision))
    recomputed = {
        "rule": rebuilt.input["rule"],
        "params": rebuilt.input["params"],
        "inputs_digest": rebuilt.digest,
        "input": rebuilt.input,
        "result": outcome,
    }
    made = read_payload(decision, p.DecisionRecorded)
    recorded = {"rule": made.rule, "params": made.params, "inputs_digest": made.inputs_digest, "input": made.input,
                "result": made.result}
    differences = tuple(diff(recorded, recomputed))
    return ReplayResult(plan.window_id, decision.seq, recorded, recomputed, differences)


def replay_window(ledger: Ledger, window: str) -> ReplayResult:
    """``tally replay verdict``: the window's first decision, rebuilt and compared."""
    from ..plan.register import registered_plan

    reg = registered_plan(ledger, window)
    events = list(ledger.events(stream=f"window/{window}"))
    decision = next((e for e in events if e.type == "decision.recorded"), None)
    if decision is None:
        raise PolicyError(f"window {window} has no recorded decision")
    archive = list(ledger.events(stream="archive", types=list(ARCHIVE_TYPES), until=decision.seq))
    return replay(reg.plan, events, archive, decision)
