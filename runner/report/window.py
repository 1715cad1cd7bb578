"""``tally window report``: the report of a decided window, from its recorded decision."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import PolicyError

from ..events import payloads as pl
from ..events import read_payload
from ..plan.register import registered_plan

if TYPE_CHECKING:
    from ledger.store import Ledger

__all__ = ["ending_lines", "window_report"]


def ending_lines(ending: str | None, causes: Sequence[str] = ()) -> list[str]:
    """How the window ended, said first under the decision, then its causes (a failed step and its error,
    an interrupt and when: ``runner.state.ending_causes``) as the window's events record them."""
    if ending is None:
        head = "Ending: the window is not closed yet"
    else:
        meaning = {"restored": "production restored and watched", "chained": "production left down for the next "
                   "chained window", "aborted": "aborted: production restored, decision REJECT"}
        head = f"Ending: {ending} ({meaning.get(ending, ending)})"
    return [head, *(f"Cause: {cause}" for cause in causes)]


def window_report(ledger: Ledger, window: str, out: Path) -> dict[str, Any]:
    """Write report.html and report.md for ``window``; returns their paths and the decision."""
    from .write import write_report

    reg = registered_plan(ledger, window)
    decision = None
    closed = None
    for event in ledger.events(stream=f"window/{window}", types=["decision.recorded", "window.closed"]):
        if event.type == "decision.recorded" and decision is None:
            decision = event
        elif event.type == "window.closed" and closed is None:
            closed = event
    if decision is None:
        raise PolicyError(f"window {window} has no recorded decision yet")
    made = read_payload(decision, pl.DecisionRecorded)
    ending = read_payload(closed, pl.WindowClosed).ending if closed else None
    context = {
        "window": window, "plan_sha256": reg.plan_sha256, "protocol": reg.plan.protocol, "mode": reg.plan.mode,
        "registered_seq": reg.seq, "decision_seq": decision.seq, "decision_hash": decision.hash,
        "inputs_digest": made.inputs_digest, "ending": ending,
        "ledger": ledger.info.origin,
    }
    result = made.result
    if result.get("decision") == "REJECT" and result.get("rule") and "cells" not in result and "per_pair" not in result:
        # An aborted window: render what the rule computes from the recorded input, headed by the REJECT.
        from ..decide import compute

        computed = compute(made.input)
        computed["decision"] = "REJECT"
        computed["reasons"] = list(result.get("reasons", [])) + computed.get("reasons", [])
        result = computed
    from ..state import ending_causes
    from .evidence import window_evidence
    from .power import power_head

    events = list(ledger.events(stream=f"window/{window}"))
    evidence = window_evidence(reg.plan, events)
    paths = write_report(made.input, result, out, title=f"tally window {window}", context=context,
                         banners=[*evidence.head_sections(), *power_head(reg.plan, made.input, result, events)],
                         appendix=evidence.sections(), ending=ending_lines(ending, ending_causes(events)))
    return {**paths.to_json(), "decision": made.result.get("decision")}
