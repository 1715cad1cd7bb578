"""One smoke reading (runner.decide.smoke) behind the decision input, the audit and the report.

Each reader's output is compared with what its own former code produced (kept here as the
reference), over results that pass, fail, tie within the margin (rejecting or not), probes
that did not run, and a stage the plan only implies.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from runner.audit.invariants import _check_smoke
from runner.decide.inputs import smoke_findings
from runner.decide.smoke import smoke_tally
from runner.plan.model import Smoke
from runner.report.evidence import _clip, _smoke


@dataclass
class _Event:
    seq: int
    type: str
    payload: dict[str, Any]


@dataclass
class _Flags:
    violations: list[tuple[str, int, str, str | None]] = field(default_factory=list)

    def flag(self, invariant: str, event: Any, message: str, window: str | None) -> None:
        self.violations.append((invariant, event.seq, message, window))


def _old_findings(smoke: Smoke, events: list[_Event]) -> tuple[list[str], list[str]]:
    failures: list[str] = []
    ran: set[tuple[str, str]] = set()
    for event in events:
        if event.type != "smoke.result":
            continue
        p = event.payload
        ran.add((str(p.get("start")), str(p.get("probe"))))
        if p.get("outcome") == "fail" or (p.get("outcome") == "near_tie" and smoke.near_tie_rejects):
            failures.append(f"{p.get('kind')}: {p.get('summary')}")
    missing = [f"smoke probe {probe} did not run on {start}" for start in smoke.starts for probe in smoke.probes
               if (start, probe) not in ran]
    return failures, missing


def _old_report(smoke: Smoke, events: list[_Event]) -> tuple[list[tuple[str, ...]], list[str]]:
    rows: list[tuple[str, ...]] = []
    ran: set[tuple[str, str]] = set()
    banners: list[str] = []
    for e in events:
        if e.type != "smoke.result":
            continue
        p = e.payload
        ran.add((str(p.get("start")), str(p.get("probe"))))
        margin = p.get("margin")
        rows.append((str(p.get("start")), str(p.get("probe")), str(p.get("outcome")), str(p.get("kind")),
                     "-" if p.get("position") is None else str(p.get("position")),
                     "-" if not isinstance(margin, int | float) else f"{margin:.4f}", str(e.seq),
                     _clip(str(p.get("summary") or ""))))
        if p.get("outcome") in ("fail", "near_tie"):
            what = "near tie" if p.get("outcome") == "near_tie" else f"{p.get('kind')} failure"
            banners.append(f"smoke {what}: {_clip(str(p.get('summary') or ''))}")
    if smoke.declared or rows:
        missing = [f"{probe} on {start}" for start in smoke.starts for probe in smoke.probes
                   if (start, probe) not in ran]
        if missing:
            banners.append(f"registered smoke probes that did not run: {', '.join(missing)}")
    return rows, banners


def _old_audit(smoke: Smoke, events: list[_Event], decision: _Event, window: str) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    results = [x for x in events if x.type == "smoke.result"]
    if not smoke.declared and not results:
        return out
    ran: dict[str, tuple[str, ...]] = {}
    for x in results:  # what the fold kept per start
        ran[x.payload["start"]] = (*ran.get(x.payload["start"], ()), x.payload["probe"])
    verdict = decision.payload["result"]["decision"]
    missing = [f"{probe} on {start}" for start in smoke.starts for probe in smoke.probes
               if probe not in ran.get(start, ())]
    if missing:
        out.append(("smoke-before-decision", decision.seq, f"decision {verdict} of window {window} depends on smoke "
                    f"probes that did not run: {', '.join(missing)}", window))
    failed = [f"{x.payload.get('probe')} on {x.payload.get('start')}" for x in results
              if x.payload.get("outcome") == "fail"
              or (x.payload.get("outcome") == "near_tie" and smoke.near_tie_rejects)]
    if failed:
        out.append(("smoke-before-decision", decision.seq, f"decision {verdict} of window {window} despite failed "
                    f"smoke probes: {', '.join(failed)}", window))
    return out


OUTCOMES = [
    ("pass", "greedy-identity", None, None, "identical"),
    ("fail", "grammar", None, None, "the output is not the schema's " + "x" * 250),
    ("near_tie", "greedy-identity", 3, 0.0123, "B1 diverges from A1 at position 3 (a near tie)"),
]


def _events(chosen: tuple[tuple[str, str, tuple[Any, ...]], ...]) -> list[_Event]:
    events = [_Event(1, "start.began", {"start": "A1"})]
    for start, probe, (outcome, kind, position, margin, summary) in chosen:
        events.append(_Event(len(events) + 1, "smoke.result", {
            "window": "w", "plan_sha256": "0" * 64, "start": start, "role": start[0], "probe": probe,
            "outcome": outcome, "kind": kind, "position": position, "margin": margin, "summary": summary}))
    return events


CASES = [
    combo
    for n in range(0, 4)
    for combo in itertools.combinations(
        [(s, pr, o) for s in ("A1", "B1") for pr in ("greedy_identity", "structured") for o in OUTCOMES][::3], n)
]


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("rejects", [True, False])
@pytest.mark.parametrize("chosen", CASES)
def test_the_input_the_audit_and_the_report_read_the_smoke_stage_as_before(
        chosen: tuple[Any, ...], rejects: bool, declared: bool) -> None:
    smoke = Smoke(starts=("A1", "B1"), probes=("greedy_identity", "structured"), near_tie_rejects=rejects,
                  declared=declared)
    plan: Any = SimpleNamespace(smoke=smoke, protocol="pp3-v1")
    events = _events(chosen)
    assert smoke_findings(plan, events) == _old_findings(smoke, events)  # type: ignore[arg-type]
    assert _smoke(plan, events) == _old_report(smoke, events)  # type: ignore[arg-type]
    decision = _Event(len(events) + 1, "decision.recorded", {"result": {"decision": "CANDIDATE"}})
    flags = _Flags()
    _check_smoke(flags, decision, decision.payload, SimpleNamespace(id="w"),  # type: ignore[arg-type]
                 SimpleNamespace(plan=plan, events=events))  # type: ignore[arg-type]
    assert flags.violations == _old_audit(smoke, events, decision, "w")
    assert smoke_tally(plan, events).counts == (declared or any(e.type == "smoke.result" for e in events))


def test_a_rejected_near_tie_is_a_failure_everywhere_and_a_reported_one_only_in_the_report() -> None:
    near = (("B1", "greedy_identity", OUTCOMES[2]),)
    for rejects in (True, False):
        plan: Any = SimpleNamespace(smoke=Smoke(starts=("B1",), near_tie_rejects=rejects), protocol="pp3-v1")
        events = _events(near)
        assert bool(smoke_tally(plan, events).failed) is rejects
        assert bool(smoke_findings(plan, events)[0]) is rejects  # type: ignore[arg-type]
        assert _smoke(plan, events)[1] == [f"smoke near tie: {OUTCOMES[2][4]}"]  # type: ignore[arg-type]
