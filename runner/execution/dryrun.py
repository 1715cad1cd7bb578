"""``tally window run --dry-run``: the plan, the gate status, the timeline, the actions; touches nothing.

The actions are the step machine's, over an "everything succeeds" fold (``dryfold``): the
order printed is the order ``--execute`` takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..gates.budget import budget_report
from ..plan.register import registered_plan
from ..state.fold import admission_blockers
from ..state.replay import replay
from .dryfold import DryStep, planned_steps
from .fit import recorded_fields, unfit

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..drivers.base import HostDriver
    from ..plan.model import Plan

__all__ = ["action_lines", "dry_run_report"]


def _line(plan: Plan, item: DryStep) -> str:
    """One step as a line: what it runs on which host, and what it records."""
    step = item.step
    label: str = step.kind
    if step.start is not None:
        start = plan.start(step.start)
        label += f" {start.label} ({plan.arm(start.role).name})"
    if step.host is not None:
        label += f" {step.host}"
    if step.kind == "decide":
        label += f" ({plan.protocol})"
    calls = [c.action + ("" if c.host == "site" else f" {c.host}") for c in item.calls]
    if len(item.calls) == 1 and item.calls[0].action == step.kind and item.calls[0].host in ("site", step.host):
        label += " (site)" if item.calls[0].host == "site" else ""
    elif calls:
        label += ": " + ", ".join(calls)
    records = ", ".join(dict.fromkeys(t for t in item.events if t != "host.action"))
    return label + (f" -> {records}" if records else "")


def action_lines(plan: Plan, steps: list[DryStep]) -> list[str]:
    """The dry run's steps as lines, a start's run of waves folded into one."""
    lines: list[str] = []
    index = 0
    while index < len(steps):
        step = steps[index].step
        if step.kind != "wave":
            lines.append(_line(plan, steps[index]))
            index += 1
            continue
        waves = []
        while index < len(steps) and steps[index].step.kind == "wave" and steps[index].step.start == step.start:
            wave = steps[index].step.wave
            assert wave is not None
            waves.append(f"{wave.cell}/w{wave.wave}/{wave.family}/seed {wave.seed}")
            index += 1
        label = plan.start(step.start).label if step.start is not None else "?"
        lines.append(f"{len(waves)} waves of {label} -> wave.measured: " + ", ".join(waves[:4])
                     + (" ..." if len(waves) > 4 else ""))
    return lines


def dry_run_report(ledger: Ledger, window: str, driver: HostDriver, time_scale: float) -> dict[str, Any]:
    """Everything a dry run prints, as data (``lines`` is the text form). Appends nothing."""
    reg = registered_plan(ledger, window)
    plan = reg.plan
    state = replay(ledger)
    ws = state.windows[window]
    blockers = admission_blockers(state, window)
    report = budget_report(plan.budget)
    row = report.rows[0] if report.rows else None
    under_marker = state.marker is not None and state.marker.window != window
    refusals = unfit(plan, driver, production_serves=not under_marker, fields=recorded_fields(ledger, window)) \
        if ws.ending is None and not ws.actions else []
    # whether the fit check can hold the plan's arms against the site's (the simulator lists its own)
    arms_checked = None if ws.ending is not None or ws.actions else (driver.kind == "sim"
                                                                      or "list_arms" in driver.actions)
    power_line = None  # the power gate: its recorded result, else what the archive says now
    if "power" in plan.required_gates:
        recorded = ws.gates.get("power")
        if recorded is not None:
            power_line = f"power gate: {recorded.verdict} (seq {recorded.seq}): {recorded.summary}"
        else:
            from ..gates.power import check_power

            power_line = f"power gate would say: {check_power(ledger, plan, until=ledger.size(), search=False).summary}"
    steps, stops = planned_steps(plan, state, window, driver.hosts, frozenset(driver.actions))
    actions = action_lines(plan, steps)
    if stops is not None:
        actions.append(f"stops: {stops}")
    elif not steps:
        actions.append(f"nothing: the window is {ws.phase}")
    budget = plan.budget
    lines = [
        f"window {window}: {plan.protocol} {plan.mode}, chain {plan.chain}, commit {plan.commit[:12]}, "
        f"plan {reg.plan_sha256[:16]}",
        f"starts: {' / '.join(s.label for s in plan.starts)}; cells: {', '.join(c.name for c in plan.cells)}; "
        f"{len(plan.waves)} waves"
        + (f"; then the smoke stage of its own: {' / '.join(s.label for s in plan.stage_starts)} "
           f"({plan.budget.stage_minutes('smoke'):g} min)" if plan.stage_starts else ""),
        f"phase {ws.phase}; gates: " + (", ".join(f"{g} {v.verdict}" for g, v in ws.gates.items()) or "none")
        + ("; ADMITTED" if ws.admitted_seq else f"; not admitted: {'; '.join(blockers)}"),
        f"site: {driver.kind}, hosts {', '.join(driver.hosts)}, serving {driver.serving_url}, "
        f"time scale {time_scale:g}",
        f"timeline (window minutes): stop admitting {budget.stop_admitting_min:g}, measurement end "
        f"{budget.measurement_end_limit_min:g}, restore reserve {budget.restore_reserve_min:g}, hard ceiling "
        f"{budget.hard_ceiling_min:g}" + (f"; estimated ({row.label}) total {row.to_json()['total']}, "
                                          f"measurement end {row.to_json()['measurement_end']}" if row else ""),
        f"budget gate would say: {report.verdict}: {report.summary}",
        *([power_line] if power_line is not None else []),
        *(["arms: not checked before the drain (the site cannot list what its start_arm starts; a command "
            "site can, with a list_arms action): a start of an arm it lacks fails after the HOLD"]
          if arms_checked is False else []),
        *(f"REFUSED: {reason}" for reason in refusals),
        "would execute:" if not refusals else "would refuse to execute; the steps it would take:",
        *(f"  {i + 1:>3}. {a}" for i, a in enumerate(actions)),
    ]
    return {"window": window, "plan_sha256": reg.plan_sha256, "admitted": ws.admitted_seq is not None,
            "blockers": blockers, "refusals": refusals, "under_marker": under_marker, "actions": actions,
            "arms_checked": arms_checked,
            "lines": lines, "steps": [item.to_json() for item in steps],
            "host_actions": [call.to_json() for item in steps for call in item.calls], "stops": stops,
            "budget": {"verdict": report.verdict, "summary": report.summary,
                       "rows": [r.to_json() for r in report.rows]}} | (
        {"power": power_line} if power_line is not None else {})
