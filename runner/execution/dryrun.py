"""``tally window run --dry-run``: the plan, the gate status, the timeline, the actions; touches nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..gates.budget import budget_report
from ..plan.register import registered_plan
from ..state.fold import admission_blockers
from ..state.replay import replay
from .fit import recorded_fields, unfit

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..drivers.base import HostDriver

__all__ = ["dry_run_report"]


def dry_run_report(ledger: Ledger, window: str, driver: HostDriver, time_scale: float) -> dict[str, Any]:
    """Everything a dry run prints, as data (``lines`` is the text form). Appends nothing."""
    reg = registered_plan(ledger, window)
    plan = reg.plan
    state = replay(ledger)
    ws = state.windows[window]
    blockers = admission_blockers(state, window)
    report = budget_report(plan.budget)
    row = report.rows[0] if report.rows else None
    under_marker = state.marker is not None and state.marker.get("window") != window
    refusals = unfit(plan, driver, production_serves=not under_marker, fields=recorded_fields(ledger, window)) \
        if ws.ending is None and not ws.actions else []
    actions: list[str] = ["preflight (site)"]
    if under_marker:
        actions += [f"placeholder_proof {h}" for h in driver.hosts] + ["quiet_proof (site)"]
    else:
        actions += ["drain (site) -> production.state down"]
    actions += ["hold.opened", "snapshot" if not under_marker else "production.snapshot from the marker"]
    for start in plan.starts:
        waves = plan.waves_of(start.id)
        clocks = plan.production_clock_cap_mhz is not None
        actions += [f"start_arm {start.label} ({plan.arm(start.role).name})",
                    "read_clock_cap -> start.began" if clocks else "start.began (no GPU clocks)",
                    f"start_config gate {start.id}",
                    *([f"standard_spec gate {start.id}"] if plan.arm(start.role).speculates else []), "warmup",
                    f"{len(waves)} waves: " + ", ".join(f"{w.cell}/w{w.wave}/{w.family}/seed {w.seed}"
                                                        for w in waves[:4]) + (" ..." if len(waves) > 4 else ""),
                    *([f"smoke {start.id}: " + ", ".join(plan.smoke.probes) + " -> smoke.result"]
                      if plan.smoke is not None and start.id in plan.smoke.starts else []),
                    *(["read_clock_cap (thermal check)"] if clocks else []), f"stop_arm {start.label}"]
    actions.append("measurement.ended")
    if plan.chain == "chained":
        actions += [f"placeholder_up {h}" for h in driver.hosts] + [f"fence {h}" for h in driver.hosts]
        actions += ["experiment_stop", "quiet_proof", "production_down_proof -> production.state down"]
        actions += [f"placeholder_proof {h}" for h in driver.hosts]
        actions += ["hold.closed", "chain.marker.set", "window.closed chained"]
    else:
        actions += ["restore (up to 3 attempts)", "watch"]
        if under_marker:
            actions += [f"placeholder_down {h}" for h in sorted(state.placeholders)] + ["chain.marker.cleared"]
        actions += ["production.state up", "hold.closed", "window.closed restored"]
    actions.append(f"decision.recorded ({plan.protocol})")
    budget = plan.budget
    lines = [
        f"window {window}: {plan.protocol} {plan.mode}, chain {plan.chain}, commit {plan.commit[:12]}, "
        f"plan {reg.plan_sha256[:16]}",
        f"starts: {' / '.join(s.label for s in plan.starts)}; cells: {', '.join(c.name for c in plan.cells)}; "
        f"{len(plan.waves)} waves",
        f"phase {ws.phase}; gates: " + (", ".join(f"{g} {v.get('verdict')}" for g, v in ws.gates.items()) or "none")
        + ("; ADMITTED" if ws.admitted_seq else f"; not admitted: {'; '.join(blockers)}"),
        f"site: {driver.kind}, hosts {', '.join(driver.hosts)}, serving {driver.serving_url}, "
        f"time scale {time_scale:g}",
        f"timeline (window minutes): stop admitting {budget.stop_admitting_min:g}, measurement end "
        f"{budget.measurement_end_limit_min:g}, restore reserve {budget.restore_reserve_min:g}, hard ceiling "
        f"{budget.hard_ceiling_min:g}" + (f"; estimated ({row.label}) total {row.to_json()['total']}, "
                                          f"measurement end {row.to_json()['measurement_end']}" if row else ""),
        f"budget gate would say: {report.verdict}: {report.summary}",
        *(f"REFUSED: {reason}" for reason in refusals),
        "would execute:" if not refusals else "would refuse to execute; the steps it would take:",
        *(f"  {i + 1:>3}. {a}" for i, a in enumerate(actions)),
    ]
    return {"window": window, "plan_sha256": reg.plan_sha256, "admitted": ws.admitted_seq is not None,
            "blockers": blockers, "refusals": refusals, "under_marker": under_marker, "actions": actions,
            "lines": lines,
            "budget": {"verdict": report.verdict, "summary": report.summary,
                       "rows": [r.to_json() for r in report.rows]}}
