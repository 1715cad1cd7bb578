"""Recording gate results and admitting a window.

A window is admitted (``window.admitted``, state phase ``admitted``) only when every
gate its plan requires has a latest result PASS at the plan's commit, plus
``chain_prev_ok`` while the chain marker is set (``runner.state.fold.admission_blockers``).
Admission is appended automatically by ``record_gate`` as soon as the last required
gate passes; ``admit`` does the same on demand (``tally window admit``) and refuses
with the list of what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.errors import PolicyError

from ..events import payloads as p
from ..events.catalogue import append_window_event
from ..plan.register import registered_plan
from ..state.fold import State, admission_blockers
from ..state.replay import replay
from ..vocabulary import GateName, GateVerdict

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Blob, Ledger

__all__ = ["Admission", "GateRecord", "admit", "record_gate"]


@dataclass(frozen=True)
class Admission:
    window: str
    seq: int
    already: bool


@dataclass(frozen=True)
class GateRecord:
    event: Event
    admitted: Admission | None


def _admitted_payload(state: State, window: str) -> p.WindowAdmitted:
    ws = state.windows[window]
    gates = {}
    for name, gate in ws.gates.items():
        if gate.verdict == "PASS":
            gates[name] = gate.seq
    marker = state.marker is not None and state.marker.window != window
    return p.WindowAdmitted(commit=str(ws.commit), gates=gates, under_marker=marker)


def admit(ledger: Ledger, signer: Signer, window: str, *, state: State | None = None) -> Admission:
    """Admit ``window`` if every required gate passed; ``PolicyError`` naming what is missing."""
    reg = registered_plan(ledger, window)
    state = state if state is not None else replay(ledger)
    ws = state.windows[window]
    if ws.admitted_seq is not None:
        return Admission(window, ws.admitted_seq, already=True)
    blockers = admission_blockers(state, window)
    if blockers:
        raise PolicyError(f"window {window} is not admitted: " + "; ".join(blockers))
    event = append_window_event(ledger, signer, window, reg.plan_sha256, "window.admitted",
                                _admitted_payload(state, window))
    return Admission(window, event.seq, already=False)


def record_gate(
    ledger: Ledger,
    signer: Signer,
    window: str,
    gate: GateName,
    verdict: GateVerdict,
    evidence: Mapping[str, Any],
    *,
    commit: str | None,
    summary: str = "",
    start: str | None = None,
    blobs: Sequence[Blob] = (),
    auto_admit: bool = True,
) -> GateRecord:
    """Append ``gate.result`` for a registered window; admit it if that was the last gate."""
    reg = registered_plan(ledger, window)
    starts: dict[str, Any] = {"start": start} if start is not None else {}
    payload = p.GateResult(gate=gate, verdict=verdict, evidence=dict(evidence), summary=summary, commit=commit,
                           **starts)
    event = append_window_event(ledger, signer, window, reg.plan_sha256, "gate.result", payload, blobs)
    admitted = None
    if auto_admit and verdict == "PASS":
        state = replay(ledger)
        ws = state.windows.get(window)
        if ws is not None and ws.admitted_seq is None and ws.ending is None and not admission_blockers(state, window):
            admitted = admit(ledger, signer, window, state=state)
    return GateRecord(event, admitted)
