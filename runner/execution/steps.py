"""What a window does next, decided from replayed state only (``docs/window.md``). Pure.

``next_step(ctx)`` looks at the folded state of the ledger (``runner.state.fold``), the plan,
the site's hosts and the budget clock's reading, and names the one step to take now.
The runner performs it, records it, replays, and asks again; a runner killed at any
instant asks the same question on resume and gets the step that brings the window to
a safe, recorded state. The order of steps is the reference sequence of ``docs/window.md``:

    preflight -> snapshot -> restore check (the site's, if it has one) -> drain -> hold.opened
    (under a marker: placeholder proofs, quiet proof, hold.opened, the marker's snapshot, the
    restore check) -> for each start: start_arm,
    clock cap, start.began, start_config, standard_spec (speculative arms), the effective parameters
    attested (params.attested), warm-up (its requests attested served), prefix priming (a plan's
    ``[priming]``), waves, the smoke stage's probes (smoke starts), end of start
    -> the smoke stage of its own (``[smoke] arms``: per arm start_arm, clock cap, start.began, start_config,
    standard_spec, the effective parameters attested, the probes, end of start) -> measurement.ended -> ending
    -> decision

Endings: ``restored`` (restore with retries, watch, [placeholders down, marker
cleared], production up, HOLD closed), ``chained`` (placeholders up before the first
fence, fences, experiment stop, quiet proof, production-down proof, placeholder proofs,
HOLD closed, marker set) and ``aborted`` (a restore that ends in ``window.closed
aborted`` and decision REJECT).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..plan.model import Plan, WaveSpec
from ..state.fold import State
from ..state.touched import touched
from ..state.window import FinishedAction, StartView, WindowState
from .clock import Limit

__all__ = ["MAX_ATTEMPTS", "Context", "Step", "StepKind", "acting_reason", "ending_of", "next_step", "touched"]

MAX_ATTEMPTS = 3  # failures of one host action (a restore: with its watch) before the runner gives up
STOPPING = ("signal", "error")  # interruptions that stop measuring at once
ROLLBACK_FAILED = "rollback preflight failed (the site's restore_check could not show the restore would work)"

StepKind = Literal[
    "probe", "preflight", "placeholder_proof", "quiet_proof", "drain", "hold_open", "snapshot",
    "start_arm", "start_began", "config_gate", "spec_gate", "attest_params", "warmup", "prime", "wave", "smoke",
    "end_start",
    "measurement_end",
    "budget", "chain_abort", "restore", "restore_failed", "watch", "placeholder_down", "marker_clear",
    "restore_close", "close", "placeholder_up", "fence", "experiment_stop",
    "closing_quiet_proof", "production_down_proof", "closing_placeholder_proof", "chained_close", "decide",
    "pair_close", "hold_stash", "commit_close", "restore_check",
    "done", "blocked",
]


@dataclass(frozen=True)
class Step:
    kind: StepKind
    start: str | None = None
    host: str | None = None
    wave: WaveSpec | None = None
    reason: str = ""
    limit: Limit | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    plan: Plan
    state: State
    ws: WindowState
    hosts: tuple[str, ...]
    stop_limit: Limit | None = None      # the budget forbids new waves (stop admitting / restore point)
    block_limit: Limit | None = None     # the running start is over its per-block limit
    site_actions: frozenset[str] = frozenset()   # the site's optional actions (pair_close, hold_stash, ...)


def _finished(ws: WindowState, action: str, *, host: str | None = None, after: int | None = 0,
              start: str | None = None) -> list[FinishedAction]:
    """The window's finished host actions named ``action`` (after seq ``after``, on ``host``, for ``start``)."""
    return [item for item in ws.finished
            if item.action == action and item.seq > (after or 0)
            and (host is None or item.host == host) and (start is None or item.start == start)]


def _done(ws: WindowState, action: str, *, host: str | None = None, after: int = 0, start: str | None = None,
          ok: bool | None = True) -> bool:
    """Has ``action`` finished (``ok``: True succeeded, or could not reach a host the window may lose;
    False: failed; None: either)?"""
    return any(ok is None or item.ok == ok or (ok and item.unreachable)
               for item in _finished(ws, action, host=host, after=after, start=start))


def _passed_unreachable(ws: WindowState, action: str, host: str, after: int) -> bool:
    """Did ``action`` on ``host`` (after seq ``after``) get no answer from a host the window may lose?"""
    return any(item.unreachable for item in _finished(ws, action, host=host, after=after))


def _failures(ws: WindowState, action: str, *, host: str | None = None, after: int | None = 0,
              start: str | None = None) -> int:
    return sum(not item.ok for item in _finished(ws, action, host=host, after=after, start=start))


def _under_foreign_marker(ctx: Context) -> bool:
    marker = ctx.state.marker
    return marker is not None and marker.window != ctx.ws.id


def _aborting(ws: WindowState) -> str | None:
    """Why the window ends aborted (None: it does not)."""
    if ws.chain_aborted is not None:
        return f"chain aborted: {ws.chain_aborted.reason}"
    if any(item.reason == "abort" for item in ws.interrupted):
        return "aborted by the operator (tally window abort)"
    for name in ("start_config", "standard_spec"):
        gate = ws.gates.get(name)
        if gate is not None and gate.verdict == "FAIL":
            failed = [sid for sid, r in (gate.starts or {}).items() if r.verdict == "FAIL"]
            return f"{name} FAIL for start {', '.join(failed) or '?'}"
    return None


def ending_of(plan: Plan, ws: WindowState) -> Literal["restored", "chained", "aborted"]:
    """How this window ends, from what the ledger says about it so far.

    A window that never held the hosts ends aborted (nothing was measured, and it must not
    chain); one that failed restores.
    """
    if _aborting(ws) is not None or ws.clock.hold_opened is None:
        return "aborted"
    failed = ws.measurement_ended is not None and ws.measurement_ended.reason in ("failed", "pressure")
    if plan.chain == "chained" and not failed:
        return "chained"
    return "restored"


def next_step(ctx: Context) -> Step:
    ws, plan = ctx.ws, ctx.plan
    if ws.decision is not None:
        return Step("done")
    if ws.ending is not None:
        return Step("decide", reason=ws.ending)
    if ws.open_actions:
        action_id, info = min(ws.open_actions.items(), key=lambda item: item[1].seq)
        return Step("probe", host=info.host, reason=f"{info.action} started at seq {info.seq} "
                    "has no recorded outcome", args={"probe_of": action_id, "action": info.action})
    if ws.chain_aborted is not None and ws.hold_seq is None and ws.measurement_ended is None:
        return _ending(ctx, "aborted")
    if ws.admitted_seq is None:
        return Step("blocked", reason=f"window {ws.id} is not admitted (phase {ws.phase})")
    if ws.measurement_ended is not None:
        return _ending(ctx, ending_of(plan, ws))
    if ws.hold_seq is None and not ws.starts:
        return _opening(ctx)
    return _measuring(ctx)


# --------------------------------------------------------------------------- opening


def _stopped(ws: WindowState) -> str | None:
    """Why measuring must stop now: a signal, or an error the runner could not get past."""
    for item in ws.interrupted:
        if item.reason in STOPPING:
            return f"interrupted ({item.reason})"
    return None


def acting_reason(other: WindowState) -> str:
    """Why a window cannot open while ``other`` is acting on the site (``State.acting``)."""
    return (f"window {other.id} is acting on the site (phase {other.phase}, {other.actions} host action(s), "
            f"not closed yet): wait for it to end, or `tally window resume {other.id}` if its runner is gone")


def _opening(ctx: Context) -> Step:
    ws, state = ctx.ws, ctx.state
    if state.hold is not None and state.hold.owner != ws.id:
        return Step("blocked", reason=f"the HOLD is owned by {state.hold.owner} (seq {state.hold.seq})")
    if _aborting(ws) is not None:
        return _ending(ctx, "aborted")
    marker = _under_foreign_marker(ctx)
    stopped = _stopped(ws)
    if stopped is not None:
        if marker:
            return Step("chain_abort", reason=f"{stopped} before the HOLD under the marker")
        return Step("measurement_end", reason=f"{stopped} before the HOLD", args={"why": "interrupted"})
    if ws.raced_with is not None:
        # It took its first host action while another window was acting (a ledger an older runner raced on):
        # its snapshot may be of hosts the other drained, so it never goes on to a HOLD; it ends, restoring
        # what it touched. The window it raced waits for that (below), and goes on after.
        reason = f"window {ws.raced_with} was acting on the site when this window first acted"
        if marker:
            return Step("chain_abort", reason=reason)
        return Step("measurement_end", reason=reason, args={"why": "failed"})
    other = state.acting(ws.id)
    if other is not None:   # it waits: the site is the other window's until that one is closed
        return Step("blocked", reason=acting_reason(other))
    if not _done(ws, "preflight"):
        if _done(ws, "preflight", ok=False):
            if marker:
                return Step("chain_abort", reason="preflight failed before the HOLD")
            return Step("measurement_end", reason="preflight failed before the HOLD", args={"why": "failed"})
        return Step("preflight")
    if marker:
        marker_seq = ctx.state.marker.seq if ctx.state.marker is not None else 0
        prev_ok = ws.gates.get("chain_prev_ok")
        if prev_ok is None or prev_ok.verdict != "PASS" or prev_ok.seq < marker_seq:
            window = ctx.state.marker.window if ctx.state.marker is not None else None
            return Step("blocked", reason=f"a chain marker (window {window}) is "
                        "present: run `tally chain prev-ok` for this window first")
        for host in ctx.hosts:  # placeholders are probed only while the marker is present
            if not _done(ws, "placeholder_proof", host=host):
                if _done(ws, "placeholder_proof", host=host, ok=False):
                    return Step("chain_abort", reason=f"placeholder proof failed on {host} before the HOLD")
                return Step("placeholder_proof", host=host)
        if not _done(ws, "quiet_proof"):
            if _done(ws, "quiet_proof", ok=False):
                return Step("chain_abort", reason="hosts not proved quiet before the HOLD")
            return Step("quiet_proof")
        return Step("hold_open", args={"from_marker": True})
    # The exact production snapshot comes first, while production serves: whatever happens
    # from here on, there is something to restore to.
    if ws.production_snapshot is None:
        if _failures(ws, "snapshot") >= MAX_ATTEMPTS:
            return Step("measurement_end", reason="no production snapshot could be taken", args={"why": "failed"})
        return Step("snapshot", args={"from_marker": False})
    if "restore_check" in ctx.site_actions and not _done(ws, "restore_check"):
        if _done(ws, "restore_check", ok=False):   # production still serves, untouched: nothing to restore
            return Step("measurement_end", reason=ROLLBACK_FAILED + " before the drain", args={"why": "failed"})
        return Step("restore_check")
    if state.production != "down" or not _done(ws, "drain"):
        if _done(ws, "drain", ok=False):
            return Step("measurement_end", reason="drain failed before the HOLD", args={"why": "failed"})
        return Step("drain")
    return Step("hold_open", args={"from_marker": False})


# --------------------------------------------------------------------------- measuring


def _measuring(ctx: Context) -> Step:
    ws, plan = ctx.ws, ctx.plan
    if ws.hold_seq is None:  # starts exist but the HOLD is gone: nothing may be measured now
        return Step("measurement_end", reason="the HOLD is not open", args={"why": "failed"})
    if ws.production_snapshot is None:
        if _failures(ws, "snapshot", after=ws.hold_seq) >= MAX_ATTEMPTS:
            return Step("measurement_end", reason="no production snapshot could be taken", args={"why": "failed"})
        return Step("snapshot", args={"from_marker": _under_foreign_marker(ctx)})
    if _aborting(ws) is not None:
        return _stop_measuring(ctx, "aborted", _aborting(ws) or "")
    stopped = _stopped(ws)
    if stopped is not None:
        # the ledger refused an append: end by restoring production, whatever the plan's chain
        why = "failed" if any(item.append_failed for item in ws.interrupted) else "interrupted"
        return _stop_measuring(ctx, why, stopped)
    if "restore_check" in ctx.site_actions and not ws.starts and not _done(ws, "restore_check"):
        # a window opened under a chain's marker checks the restore to the marker's snapshot here
        if _done(ws, "restore_check", ok=False):
            return Step("measurement_end", reason=ROLLBACK_FAILED + " before the first start", args={"why": "failed"})
        return Step("restore_check")
    if ws.engine is not None and ws.engine.serving == "up":  # production serves inside our HOLD: the host restarted
        reason = "the hosts serve production inside the HOLD (did a host restart?)"
        if ws.current_start is not None:
            return Step("end_start", start=ws.current_start, reason=reason, args={"truncated": True, "lost": True})
        return Step("measurement_end", reason=reason, args={"why": "failed"})
    failed = [sid for sid, info in ws.starts.items() if info.status == "ended" and info.ok is False
              and not info.truncated]
    if failed:
        return Step("measurement_end", reason=f"start {', '.join(failed)} failed", args={"why": "failed"})
    if ws.pressure:   # seed 003: "abort on unexplained failures/pressure"
        return _stop_measuring(ctx, "pressure", f"pressure: {ws.pressure[0]}")
    if plan.budget.block_overrun == "truncate_experiment":
        over = [b.start for b in ws.budget if b.action == "truncate_block"]
        if over:  # seed 003: "Any block over 11 min: truncate the experiment, preserve raw partials"
            return _stop_measuring(ctx, "truncated", f"block {over[0]} went over its "
                                   f"{plan.budget.per_block_limit_min:g}-minute limit: the experiment is truncated "
                                   "(the remaining blocks do not run; raw partials kept)")
    for start in plan.run_starts:   # the measurement starts, then the smoke stage's own (if registered)
        info = ws.starts.get(start.id)
        if info is not None and info.status == "ended":
            continue
        return _start_step(ctx, start.id, info)
    return Step("measurement_end", reason="every planned wave was measured"
                + (" and the smoke stage ran" if plan.stage_starts else ""), args={"why": "complete"})


def _stop_measuring(ctx: Context, why: str, reason: str) -> Step:
    current = ctx.ws.current_start
    if current is not None:
        return Step("end_start", start=current, reason=reason, args={"truncated": True})
    return Step("measurement_end", reason=reason, args={"why": why})


def _start_step(ctx: Context, start_id: str, info: StartView | None) -> Step:
    ws, plan = ctx.ws, ctx.plan
    engine = ws.engine
    running = engine is not None and engine.start == start_id and engine.status in ("ready", "starting", None) \
        and engine.arm == plan.arm(plan.start(start_id).role).name
    if info is None:
        if ctx.stop_limit is not None:
            return _budget_or_end(ctx, ctx.stop_limit, None)
        if not running:
            if _failures(ws, "start_arm", start=start_id) >= 2:
                return Step("measurement_end", reason=f"start_arm failed twice for {start_id}", args={"why": "failed"})
            return Step("start_arm", start=start_id)
        if _failures(ws, "read_clock_cap", start=start_id) >= MAX_ATTEMPTS:
            # The start never began: nothing to end; the ending's restore replaces its engine.
            return Step("measurement_end", reason=f"the clock cap of {start_id} could not be read",
                        args={"why": "failed"})
        return Step("start_began", start=start_id)
    if not running:  # began, and the engine is gone (a crash took it, or it never came back)
        return Step("end_start", start=start_id, reason="the engine of this start is not running",
                    args={"truncated": True, "lost": True})
    if ctx.block_limit is not None:
        return _budget_or_end(ctx, ctx.block_limit, start_id)
    if ctx.stop_limit is not None:
        return _budget_or_end(ctx, ctx.stop_limit, start_id)
    config = ws.gates.get("start_config")
    if config is None or config.of(start_id) is None:
        return Step("config_gate", start=start_id)
    standard = ws.gates.get("standard_spec")
    spec = None if standard is None else standard.of(start_id)
    if spec is None and plan.arm(plan.start(start_id).role).speculates:
        return Step("spec_gate", start=start_id)
    # A start whose warm-up an older runner recorded without attesting its parameters goes on as it did.
    if info.warmup is None and info.params is None:
        return Step("attest_params", start=start_id)
    if info.params is not None and not info.params.ok:
        return Step("end_start", start=start_id, args={"failed": True},
                    reason="effective parameters not attested: " + "; ".join(info.params.failures[:3]))
    staged = plan.smoke is not None and plan.smoke.own_stage and start_id in plan.smoke.starts
    if staged:   # the smoke stage's own start measures nothing: no warm-up, priming or wave, its probes only
        if not info.smoke:
            return Step("smoke", start=start_id, reason="the smoke stage of its own: the probes on this arm's engine")
        return Step("end_start", start=start_id, reason="the smoke stage's probes ran on this arm's engine")
    if info.warmup is None:
        if _failures(ws, "warmup", start=start_id) >= MAX_ATTEMPTS:
            return Step("end_start", start=start_id, reason="warm-up failed", args={"failed": True})
        return Step("warmup", start=start_id)
    if info.warmup.failed is not None:
        return Step("end_start", start=start_id, reason=f"warm-up not served: {info.warmup.failed}",
                    args={"failed": True})
    if plan.priming is not None and info.priming is None:
        return Step("prime", start=start_id)
    for wave in plan.waves_of(start_id):
        if not info.measured(wave.cell, wave.wave):
            return Step("wave", start=start_id, wave=wave)
    if plan.smoke is not None and start_id in plan.smoke.starts and not info.smoke:
        return Step("smoke", start=start_id, reason="the smoke stage's probes, after the start's waves")
    return Step("end_start", start=start_id, reason="every wave of the start was measured")


def _budget_or_end(ctx: Context, limit: Limit, start_id: str | None) -> Step:
    """Record the budget's decision once, then act on it."""
    ws = ctx.ws
    if not any(b.action == limit.action and b.start == start_id for b in ws.budget):
        return Step("budget", start=start_id, limit=limit, reason=limit.reason)
    if start_id is not None:
        return Step("end_start", start=start_id, reason=limit.reason, args={"truncated": True})
    why = "hard_limit" if limit.action == "begin_restore" else "stop_admitting"
    return Step("measurement_end", reason=limit.reason, args={"why": why})


# --------------------------------------------------------------------------- endings


def _ending(ctx: Context, ending: str) -> Step:
    if ending == "chained":
        return _chained_close(ctx)
    return _restore_ending(ctx, ending)


def _touched(ctx: Context) -> bool:
    return touched(ctx.state, ctx.ws)


def _restore_ending(ctx: Context, ending: str) -> Step:
    ws, state = ctx.ws, ctx.state
    if ending == "aborted" and ws.chain_aborted is None and _under_foreign_marker(ctx) and ws.hold_seq is None:
        return Step("chain_abort", reason=_aborting(ws) or "aborted before the HOLD under the marker")
    if ending == "aborted" and not _touched(ctx):
        return Step("close", args={"ending": "aborted",
                                   "summary": "ABORTED before touching production: nothing to restore"})
    since = max(ws.measurement_ended.seq if ws.measurement_ended else 0,
                ws.chain_aborted.seq if ws.chain_aborted else 0)
    latest = ws.restore if ws.restore is not None and ws.restore.seq > since else None
    # An escalated (failed) restore ends a run; a resumed run tries again from there.
    base = latest.seq if latest is not None and latest.status == "failed" else since
    restored = latest if latest is not None and latest.status == "ok" else None
    failures = _failures(ws, "restore", after=base) + _failures(ws, "watch", after=base)
    watch = ws.watch if ws.watch is not None and restored is not None and ws.watch.seq > restored.seq else None
    if restored is None or (watch is not None and watch.verdict != "PASS"):
        if failures >= MAX_ATTEMPTS:
            return Step("restore_failed", reason=f"restore did not hold after {failures} attempts",
                        args={"attempts": failures})
        return Step("restore", args={"attempt": failures + 1})
    if watch is None:
        return Step("watch")
    marker = state.marker
    # Placeholders come down after the watch PASSes: all of them at the end of a chain, and
    # in any case those this window raised (an aborted chained close, say).
    for host in sorted(state.placeholders):
        if _passed_unreachable(ws, "placeholder_down", host, watch.seq):
            continue   # the host may be lost (allow_unreachable): its placeholder stays on record as up
        if marker is not None or state.placeholders[host].window == ws.id:
            if _failures(ws, "placeholder_down", host=host, after=watch.seq) >= MAX_ATTEMPTS:
                return Step("blocked", reason=f"placeholder_down failed {MAX_ATTEMPTS} times on {host}: escalate")
            return Step("placeholder_down", host=host)
    if marker is not None:
        return Step("marker_clear", args={"watch_seq": watch.seq, "sha": marker.production_snapshot_sha256})
    summary = ("ABORTED: production restored, watch PASS" if ending == "aborted"
               else "RESTORED: production up, watch PASS")
    return Step("restore_close", args={"ending": ending, "summary": summary, "watch_seq": watch.seq,
                                       "production_up": state.production != "up",
                                       "hold": state.hold is not None and state.hold.owner == ws.id})


def _chained_close(ctx: Context) -> Step:
    ws, state, hosts = ctx.ws, ctx.state, ctx.hosts
    since = ws.measurement_ended.seq if ws.measurement_ended else 0
    for host in hosts:  # this window raises placeholders on every host before the first fence
        raised = state.placeholders.get(host)
        if (raised is None or raised.window != ws.id) and not _passed_unreachable(ws, "placeholder_up", host, since):
            if _failures(ws, "placeholder_up", host=host, after=since) >= MAX_ATTEMPTS:
                return Step("blocked", reason=f"placeholder_up failed {MAX_ATTEMPTS} times on {host} before the "
                            "first fence; production is down and the HOLD stays ours: escalate, or "
                            "`tally window abort` to restore production")
            return Step("placeholder_up", host=host)
    if not any((raised := state.placeholders.get(host)) is not None and raised.window == ws.id for host in hosts):
        return Step("blocked", reason="no placeholder could be raised on any host (each was unreachable): a chain "
                    "cannot leave production down holding nothing; the HOLD stays ours: escalate, or "
                    "`tally window abort` to restore production")
    optional = ctx.site_actions
    sequence: Sequence[tuple[StepKind, str, str | None]] = (
        *(("fence", "fence", h) for h in hosts),
        *((("pair_close", "pair_close", None),) if "pair_close" in optional else ()),
        ("experiment_stop", "experiment_stop", None),
        ("closing_quiet_proof", "quiet_proof", None),
        ("production_down_proof", "production_down_proof", None),
        *(("closing_placeholder_proof", "placeholder_proof", h) for h in hosts),
        *((kind, kind, None) for kind in ("hold_stash", "commit_close") if kind in optional),
    )
    for kind, action, target in sequence:
        if not _done(ws, action, host=target, after=since):
            if _failures(ws, action, host=target, after=since) >= MAX_ATTEMPTS:
                return Step("blocked", reason=f"{action} failed {MAX_ATTEMPTS} times during the chained "
                            "close; production is down and the HOLD stays ours: escalate")
            return Step(kind, host=target)
    if state.production != "down":
        return Step("production_down_proof")
    # HOLD closed, marker set and window closed in one transaction: no instant in which
    # production is down with neither a HOLD nor a marker.
    return Step("chained_close", args={"hold": state.hold is not None and state.hold.owner == ws.id,
                                       "summary": "CHAINED: production left down"})
