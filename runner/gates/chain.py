"""The chain_prev_ok gate (``docs/gates.md``): did the previous window leave a consistent chain?

From replayed state only. With the chain marker present, the previous window is the one
that set it: it must have closed ``chained`` with its placeholders still up on every
host it raised them on, production down, no HOLD held, and a production snapshot in the
marker; the window being gated must be a chain member (``chain = "chained"`` or
``"last"``). Without a marker, the latest closed window must have restored (restore ok,
watch PASS), and nothing may be held: no HOLD, no placeholders, production not down.

The ledger says what the hosts should be; given a site, :func:`probe_hosts` also asks
them (read-only: ``preflight`` and, under the marker, ``placeholder_proof`` on every host):
a placeholder the ledger says is up but the host does not prove is a refusal, as is
production serving under the marker or a placeholder left up without one.

``check_prev_ok`` is pure. ``run_prev_ok`` records the ``gate.result`` (the probes in its
evidence) and, on a refusal while the marker is present, the chain's abort
(``chain.aborted``); the restore that follows belongs to window execution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..plan.register import WindowNotRegistered
from ..state.fold import State
from ..vocabulary import GateVerdict
from .gate import Finding

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..drivers.base import HostDriver
    from ..plan.model import Plan

__all__ = ["ChainPrevOkGate", "PrevOk", "PrevOkRecord", "check_prev_ok", "probe_hosts", "run_prev_ok"]


@dataclass(frozen=True)
class PrevOk:
    verdict: GateVerdict
    marker_present: bool
    previous: str | None
    evidence: dict[str, Any]
    failures: tuple[str, ...]

    @property
    def summary(self) -> str:
        where = f"previous window {self.previous}" if self.previous else "no previous window"
        marker = "marker set" if self.marker_present else "no marker"
        tail = f"; {'; '.join(self.failures)}" if self.failures else ""
        return f"{self.verdict}: {marker}, {where}{tail}"


def check_prev_ok(state: State, window_id: str) -> PrevOk:
    ws = state.windows.get(window_id)
    if ws is None or ws.registered_seq is None:
        raise WindowNotRegistered(window_id)
    failures: list[str] = []
    marker = state.marker
    previous: str | None = None
    if marker is not None:
        previous = str(marker.window)
        prev = state.windows.get(previous)
        if previous == window_id:
            failures.append("the marker was set by this very window")
        if prev is None:
            failures.append(f"the marker names window {previous}, which is not in the ledger")
        else:
            if prev.ending != "chained":
                failures.append(f"window {previous} set the marker but its ending is {prev.ending or 'none yet'}, "
                                f"not chained")
            missing = [host for host in prev.placeholders_raised if host not in state.placeholders]
            if not state.placeholders:
                failures.append("no placeholder is up while production is left down")
            elif missing:
                failures.append(f"placeholder(s) down on {', '.join(missing)}")
        if not marker.production_snapshot_sha256:
            failures.append("the marker carries no production snapshot")
        if state.production != "down":
            failures.append(f"production is {state.production}, not down as the chain left it")
        if state.hold is not None:
            failures.append(f"the HOLD is held by {state.hold.owner}")
        if ws.chain not in ("chained", "last"):
            failures.append(f"window {window_id} is not a chain member (chain = {ws.chain}) but the marker is set")
    else:
        closed = [w for w in state.windows.values() if w.id != window_id and w.closed_seq is not None]
        if closed:
            prev = max(closed, key=lambda w: w.closed_seq or 0)
            previous = prev.id
            if prev.ending == "chained":
                failures.append(f"window {previous} closed chained but no marker is present")
            if prev.restore is None or prev.restore.status != "ok":
                failures.append(f"window {previous} has no successful restore")
            if prev.watch is None or prev.watch.verdict != "PASS":
                failures.append(f"window {previous} has no watch PASS")
        if state.hold is not None:
            failures.append(f"the HOLD is held by {state.hold.owner}")
        if state.placeholders:
            failures.append(f"placeholder(s) up on {', '.join(sorted(state.placeholders))} without a marker")
        if state.production == "down":
            failures.append("production is down without a marker")
    evidence = {
        "marker": marker.to_json() if marker else None,
        "previous_window": previous,
        "production": state.production,
        "hold": state.hold.to_json() if state.hold else None,
        "placeholders": sorted(state.placeholders),
        "ledger_size": state.size,
        "failures": failures,
    }
    return PrevOk("FAIL" if failures else "PASS", marker is not None, previous, evidence, tuple(failures))


def probe_hosts(driver: HostDriver, window_id: str, marker_present: bool,
                allow_unreachable: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    """What the hosts themselves say (read-only probes through the site), and what contradicts the chain.

    A host in ``allow_unreachable`` (the site's table for the window's mode) whose proof gets no
    answer (timed out, or the site cannot reach it) is noted, not refused.
    """
    from ledger.errors import ExternalError

    failures: list[str] = []
    probes: dict[str, Any] = {}

    def run(action: str, host: str | None) -> dict[str, Any] | None:
        name = action if host is None else f"{action} {host}"
        if action not in driver.actions:
            failures.append(f"the site has no {action} action: the hosts cannot be probed")
            return None
        try:
            result = driver.run(action, host, {"window": window_id})
        except ExternalError as exc:
            probes[name] = {"ok": False, "error": str(exc)[:300]}
            if host in allow_unreachable:
                probes[name]["unreachable_allowed"] = True
            else:
                failures.append(f"{name}: no answer ({str(exc)[:200]})")
            return None
        if result.timed_out and host in allow_unreachable:
            probes[name] = {"ok": False, "timed_out": True, "unreachable_allowed": True}
            return None
        probes[name] = {"ok": result.ok, "exit_code": result.exit_code,
                        "facts": {k: v for k, v in result.facts.items()
                                  if k in ("serving", "placeholders", "fenced", "error", "arm", "engine")}}
        return result.facts if result.ok else {"error": result.facts.get("error") or f"exit {result.exit_code}"}

    seen = run("preflight", None)
    if seen is not None and "error" not in seen:
        serving, up = seen.get("serving"), seen.get("placeholders") or []
        if marker_present and serving != "down":
            failures.append(f"the hosts say production is {serving}, not down as the chain left it")
        if not marker_present and up:
            failures.append(f"the hosts have placeholder(s) up on {', '.join(map(str, up))} without a marker")
    elif seen is not None:
        failures.append(f"preflight failed: {seen['error']}")
    if marker_present:
        for host in driver.hosts:
            proof = run("placeholder_proof", host)
            if proof is None:
                if "placeholder_proof" not in driver.actions:
                    break
                continue
            if "error" in proof:
                failures.append(f"the placeholder on {host} is not up: {proof['error']}")
    return {"site": driver.kind, "hosts": list(driver.hosts), "allow_unreachable": list(allow_unreachable),
            "probes": probes, "failures": list(failures)}, failures


@dataclass(frozen=True)
class PrevOkRecord:
    result: PrevOk
    gate_event: Event
    aborted_event: Event | None


@dataclass(frozen=True)
class ChainPrevOkGate:
    """The gate: the chain as the replayed ledger says it is and, with a ``driver``, as the hosts say it is
    (:func:`probe_hosts`)."""

    driver: HostDriver | None = None

    def prev_ok(self, state: State, plan: Plan) -> PrevOk:
        """The check on replayed ``state``, with the hosts' probes when there is a driver."""
        result = check_prev_ok(state, plan.window_id)
        if self.driver is None:
            return result
        from ..drivers.base import unreachable_allowed

        probed, more = probe_hosts(self.driver, plan.window_id, result.marker_present,
                                   unreachable_allowed(self.driver, plan.mode))
        failures = (*result.failures, *(f"hosts: {f}" for f in more))
        evidence = {**result.evidence, "hosts": probed, "failures": list(failures)}
        return PrevOk("FAIL" if failures else "PASS", result.marker_present, result.previous, evidence, failures)

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        from ..state.replay import replay

        return _finding(self.prev_ok(replay(ledger), plan), plan)


def _finding(result: PrevOk, plan: Plan) -> Finding:
    return Finding("chain_prev_ok", result.verdict, result.summary, result.evidence, commit=plan.commit)


def run_prev_ok(ledger: Ledger, signer: Signer, window_id: str, driver: HostDriver | None = None) -> PrevOkRecord:
    """Check (:class:`ChainPrevOkGate`), record ``gate.result chain_prev_ok``, and record the chain's abort on
    refusal.

    With a ``driver`` the hosts are probed too (:func:`probe_hosts`): the ledger and the hosts
    must both say the chain is consistent.
    """
    from ..events import payloads as p
    from ..events.catalogue import append_window_event
    from ..plan.register import registered_plan
    from ..state.replay import replay
    from .record import record_finding

    plan = registered_plan(ledger, window_id).plan
    state = replay(ledger)
    result = ChainPrevOkGate(driver).prev_ok(state, plan)
    record = record_finding(ledger, signer, window_id, _finding(result, plan)).record
    ws = state.windows[window_id]
    aborted = None
    if result.verdict == "FAIL" and result.marker_present and ws.chain_aborted is None:
        aborted = append_window_event(ledger, signer, window_id, str(ws.plan_sha256), "chain.aborted", p.ChainAborted(
            reason="chain_prev_ok refused: " + "; ".join(result.failures), marker_window=result.previous))
    return PrevOkRecord(result, record.event, aborted)
