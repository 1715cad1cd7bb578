"""Protocol audit: clean scripted windows pass every invariant; one crafted ledger per violation fails it at its seq."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from ledger.event import format_time
from ledger.store import NewEvent
from runner.audit.invariants import INVARIANTS, Violation, audit_protocol, audit_report
from runner.plan.model import Plan

from .conftest import Site
from .script import BASE_TIME, SIMPLE_PP3_NAME, Script, edit, example_plan, find


def _audit(script: Script, items: Sequence[NewEvent] | None = None, **kwargs: Any) -> list[Violation]:
    return audit_protocol(script.materialize(items), **kwargs)


def _restoring() -> tuple[Script, Plan]:
    script = Script()
    return script, script.restoring_window()


def _chain(count: int = 2) -> tuple[Script, list[Plan]]:
    script = Script()
    return script, script.chain(count)


def _abort_chain() -> tuple[Script, list[Plan]]:
    """A chained window, then a window whose chain_prev_ok refuses: chain abort, restore, REJECT."""
    script = Script()
    plan1, fam1, src1 = example_plan("seed000-production-policy", window_id="chain-1", chain="chained")
    script.register(plan1, fam1, src1)
    script.admit(plan1)
    script.open_hold(plan1)
    script.measure(plan1)
    script.chained_close(plan1)
    script.decide(plan1)
    plan2, fam2, src2 = example_plan("seed000-controlled", window_id="chain-2", chain="last")
    script.register(plan2, fam2, src2)
    script.gate(plan2, "chain_prev_ok", "FAIL")
    script.add(plan2, "chain.aborted", {"reason": "chain_prev_ok refused", "marker_window": "chain-1"})
    script.restore(plan2, end_chain=True, ending="aborted")
    script.decide(plan2, "REJECT")
    return script, [plan1, plan2]


# ---------------------------------------------------------------------- clean windows


@pytest.mark.parametrize("build", [
    pytest.param(_restoring, id="restoring-window"),
    pytest.param(lambda: _chain(3), id="three-window-chain"),
    pytest.param(_abort_chain, id="chain-abort"),
    pytest.param(lambda: (s := Script(), s.restoring_window(SIMPLE_PP3_NAME)), id="pp3-abba"),
])
def test_clean_scripted_window_passes_every_invariant(build: Callable[[], tuple[Script, Any]]) -> None:
    script, _ = build()
    recorded = {"calls": 0}

    def recompute(plan: Plan, events: Sequence[Any], decision: Any) -> dict[str, Any]:
        recorded["calls"] += 1
        assert all(e.payload["window"] == plan.window_id for e in events)
        return dict(decision.payload["result"])

    report = audit_report(script.materialize(), recompute=recompute)
    assert report.ok, [str(v) for v in report.violations]
    assert recorded["calls"] == report.windows and report.skipped == ()


def test_clean_window_on_a_real_ledger(site: Site) -> None:
    script = Script()
    script.chain(2)
    script.append_to(site.book, site.signer)
    report = audit_report(site.book.events())
    assert report.ok, [str(v) for v in report.violations]
    assert report.events == site.size() and report.windows == 2
    assert report.skipped  # no hook: decision-recomputes checked the rule only


def test_invariant_names_are_the_issue_s() -> None:
    assert set(INVARIANTS) >= {
        "gate-before-host-contact", "single-hold", "hold-closed", "measure-inside-hold", "stop-admitting-respected",
        "marker-set-by-chained-close", "marker-cleared-after-watch-pass", "prev-ok-under-marker", "one-ending",
        "chain-ends-restored", "order-seeds-families-match-plan", "clock-cap-recorded", "decision-recomputes"}


# ---------------------------------------------------------------------- crafted ledgers


def _expect(violations: list[Violation], invariant: str, seq: int) -> Violation:
    hits = [v for v in violations if v.invariant == invariant]
    assert hits, f"{invariant} not reported; got {[str(v) for v in violations]}"
    assert hits[0].seq == seq, f"{invariant} at seq {hits[0].seq}, expected {seq}: {hits[0]}"
    return hits[0]


def test_unknown_event_type_in_window_stream() -> None:
    script, plan = _restoring()
    items = list(script.items)
    at = find(items, "hold.opened") + 1
    items.insert(at, NewEvent(f"window/{plan.window_id}", "window.teleported",
                              {"window": plan.window_id, "plan_sha256": plan.sha256}))
    _expect(_audit(script, items), "event-catalogue", at + 1)


def test_payload_missing_member() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "wave.measured", 3)
    items[at] = NewEvent(items[at].stream, items[at].type, {k: v for k, v in items[at].payload.items() if k != "seed"})
    assert "payload.seed: required" in _expect(_audit(script, items), "event-catalogue", at + 1).message


def test_event_for_unregistered_window() -> None:
    script, plan = _restoring()
    items = list(script.items)
    items.insert(5, NewEvent("window/ghost", "hold.closed", {"window": "ghost", "plan_sha256": plan.sha256,
                                                             "owner": "ghost"}))
    _expect(_audit(script, items), "plan-binding", 6)


def test_plan_sha256_swapped() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "start.began", 1)
    items[at] = edit(items[at], plan_sha256="ee" * 32)
    _expect(_audit(script, items), "plan-binding", at + 1)


def test_plan_edited_after_registration() -> None:
    """The registered plan no longer hashes to its plan_sha256 (bar lowered, digest kept)."""
    script, _ = _restoring()
    items = list(script.items)
    plan_json = dict(items[0].payload["plan"], decision={"bar": 0.01, "confidence": 0.95, "guard_min_repeats": 2})
    items[0] = edit(items[0], plan=plan_json)
    assert "is not the SHA-256" in _expect(_audit(script, items), "plan-binding", 1).message


def test_registered_twice() -> None:
    script, _ = _restoring()
    items = list(script.items)
    items.insert(3, items[0])
    _expect(_audit(script, items), "plan-binding", 4)


def test_host_action_before_admission() -> None:
    script, _ = _restoring()
    items = list(script.items)
    admitted = find(items, "window.admitted")
    moved = items.pop(admitted)
    first_action = find(items, "host.action")
    items.insert(first_action + 4, moved)  # after preflight and one drain
    _expect(_audit(script, items), "gate-before-host-contact", first_action + 1)


def test_admitted_with_a_failed_gate() -> None:
    script, _ = _restoring()
    items = list(script.items)
    rng = find(items, "gate.result", gate="rng")
    items[rng] = edit(items[rng], verdict="FAIL")
    v = _expect(_audit(script, items), "gate-before-host-contact", find(items, "window.admitted") + 1)
    assert "rng: FAIL" in v.message


def test_second_hold_while_one_is_open() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "hold.opened")
    items.insert(at + 3, items[at])
    _expect(_audit(script, items), "single-hold", at + 4)


def test_closed_with_hold_open() -> None:
    script, _ = _restoring()
    items = list(script.items)
    del items[find(items, "hold.closed")]
    _expect(_audit(script, items), "hold-closed", find(items, "window.closed") + 1)


def test_wave_outside_hold() -> None:
    script, _ = _restoring()
    items = list(script.items)
    last_wave = items[find(items, "wave.measured", -1)]
    at = find(items, "hold.closed") + 1
    items.insert(at, last_wave)
    _expect(_audit(script, items), "measure-inside-hold", at + 1)


def test_wave_after_stop_admitting() -> None:
    script, plan = _restoring()
    items = list(script.items)
    at = find(items, "wave.measured", -1)
    late = format_time(BASE_TIME + timedelta(minutes=plan.budget.stop_admitting_min + 5))
    items[at] = edit(items[at], started_at=late, ended_at=late)
    _expect(_audit(script, items), "stop-admitting-respected", at + 1)


def test_wave_after_stop_admitting_decision() -> None:
    script, plan = _restoring()
    items = list(script.items)
    at = find(items, "wave.measured", 30)
    items.insert(at, NewEvent(f"window/{plan.window_id}", "budget.decision", {
        "window": plan.window_id, "plan_sha256": plan.sha256, "action": "stop_admitting",
        "reason": "scripted", "elapsed_min": 60.0, "limit_min": 73.0}))
    # the wave right after the decision began at the decision's own instant (allowed); the next one is late
    _expect(_audit(script, items), "stop-admitting-respected", at + 3)


def test_marker_set_by_restoring_window() -> None:
    script, plan = _restoring()
    items = list(script.items)
    at = find(items, "hold.closed") + 1
    items.insert(at, NewEvent(f"window/{plan.window_id}", "chain.marker.set", {
        "window": plan.window_id, "plan_sha256": plan.sha256,
        "production_snapshot_sha256": hashlib.sha256(b"production").hexdigest()}))
    v = _expect(_audit(script, items), "marker-set-by-chained-close", at + 1)
    assert "not chained" in v.message


def test_marker_set_while_holding() -> None:
    script, _ = _chain(2)
    items = list(script.items)
    marker = items.pop(find(items, "chain.marker.set"))
    at = find(items, "placeholder.up", 1) + 1
    items.insert(at, marker)
    v = _expect(_audit(script, items), "marker-set-by-chained-close", at + 1)
    assert "still holds the HOLD" in v.message


def test_marker_cleared_before_watch_pass() -> None:
    script, _ = _chain(2)
    items = list(script.items)
    watch = find(items, "watch.result")
    items[watch] = edit(items[watch], verdict="FAIL")
    _expect(_audit(script, items), "marker-cleared-after-watch-pass", find(items, "chain.marker.cleared") + 1)


def test_window_under_marker_without_prev_ok() -> None:
    script, plans = _chain(2)
    items = list(script.items)
    del items[find(items, "gate.result", gate="chain_prev_ok")]
    _expect(_audit(script, items), "prev-ok-under-marker",
            find(items, "window.admitted", window=plans[1].window_id) + 1)


def test_closed_twice() -> None:
    script, _ = _restoring()
    items = list(script.items)
    items.append(items[find(items, "window.closed")])
    _expect(_audit(script, items), "one-ending", len(items))


def test_decision_before_close() -> None:
    script, _ = _restoring()
    items = list(script.items)
    decision = items.pop(find(items, "decision.recorded"))
    at = find(items, "window.closed")
    items.insert(at, decision)
    _expect(_audit(script, items), "one-ending", at + 1)


def test_last_window_closes_chained() -> None:
    """A chain's last window must restore; leaving production down is a chained close."""
    script = Script()
    plan, families, source = example_plan("seed000-controlled", window_id="last-1", chain="last")
    script.register(plan, families, source)
    script.admit(plan)
    script.open_hold(plan)
    script.measure(plan)
    script.chained_close(plan)
    violations = _audit(script)
    _expect(violations, "chain-ends-restored", script.labels["last-1:closed"] + 1)
    _expect(violations, "marker-set-by-chained-close", script.labels["last-1:marker-set"] + 1)


def test_starts_out_of_order() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "start.began")
    items[at] = edit(items[at], start="s3")
    _expect(_audit(script, items), "order-seeds-families-match-plan", at + 1)


def test_wave_with_wrong_seed() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "wave.measured", 7)
    items[at] = edit(items[at], seed=99)
    assert "seed 99" in _expect(_audit(script, items), "order-seeds-families-match-plan", at + 1).message


def test_wave_with_wrong_family() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "wave.measured", 0)
    items[at] = edit(items[at], family="filings")
    _expect(_audit(script, items), "order-seeds-families-match-plan", at + 1)


def test_waves_out_of_order() -> None:
    script, _ = _restoring()
    items = list(script.items)
    a, b = find(items, "wave.measured", 1), find(items, "wave.measured", 2)
    items[a], items[b] = items[b], items[a]
    _expect(_audit(script, items), "order-seeds-families-match-plan", a + 1)


def test_clock_cap_missing() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "start.began", 2)
    items[at] = edit(items[at], clock_cap_mhz=None)
    _expect(_audit(script, items), "clock-cap-recorded", at + 1)


def test_decision_does_not_recompute() -> None:
    script, _ = _restoring()
    at = find(script.items, "decision.recorded")

    def loss(plan: Plan, events: Sequence[Any], decision: Any) -> dict[str, Any]:
        return dict(decision.payload["result"], decision="LOSS")

    v = _expect(_audit(script, recompute=loss), "decision-recomputes", at + 1)
    assert "recorded WIN, recomputed LOSS" in v.message

    def broken(plan: Plan, events: Sequence[Any], decision: Any) -> dict[str, Any]:
        raise ValueError("no waves")

    assert "recomputation failed" in _expect(_audit(script, recompute=broken), "decision-recomputes", at + 1).message


def test_decision_by_another_rule() -> None:
    script, _ = _restoring()
    items = list(script.items)
    at = find(items, "decision.recorded")
    items[at] = edit(items[at], rule="pp3-v1")
    _expect(_audit(script, items), "decision-recomputes", at + 1)


def test_waves_before_the_registered_priming() -> None:
    script = Script()
    script.restoring_window("seed003-abba", priming={"requests": 2})
    assert not [v for v in _audit(script) if v.invariant == "priming-before-waves"]
    items = list(script.items)
    at = find(items, "priming.done", 1)  # block B1's priming left out: its first wave comes before any
    del items[at]
    _expect(_audit(script, items), "priming-before-waves", at + 1)


def _attested(script: Script, plan: Plan, *, ok: bool = True) -> list[NewEvent]:
    """The script's events with a ``params.attested`` before each start's warm-up (``ok`` for the first)."""
    items = list(script.items)
    for nth, start in enumerate(plan.starts):
        at = find(items, "warmup.done", start=start.id)
        items.insert(at, NewEvent(
            items[at].stream, "params.attested",
            {"window": plan.window_id, "plan_sha256": plan.sha256, "start": start.id, "ok": ok or nth > 0,
             "reported": {}, "checks": [], "failures": [] if ok or nth > 0 else ["top_p 0.9 (plan: 1.0)"],
             "none_reported": True}))
    return items


def test_waves_after_their_start_s_attested_parameters() -> None:
    script, plan = _restoring()
    assert not [v for v in _audit(script, _attested(script, plan))
                if v.invariant == "params-attested-before-waves"]   # attested, and an older runner's start
    assert not [v for v in _audit(script) if v.invariant == "params-attested-before-waves"]
    items = _attested(script, plan, ok=False)
    first = plan.waves_of(plan.starts[0].id)[0]
    at = find(items, "wave.measured", start=plan.starts[0].id, wave=first.wave)
    hit = _expect(_audit(script, items), "params-attested-before-waves", at + 1)
    assert "top_p 0.9 (plan: 1.0)" in hit.message
    bare = list(script.items)   # neither an attestation nor a warm-up before the start's waves
    del bare[find(bare, "warmup.done", start=plan.starts[0].id)]
    at = find(bare, "wave.measured", start=plan.starts[0].id, wave=first.wave)
    assert "with no params.attested" in _expect(_audit(script, bare), "params-attested-before-waves", at + 1).message


def test_a_window_acting_while_another_has_acted_and_is_not_closed() -> None:
    script = Script()
    first, fam1, src1 = example_plan("seed000-production-policy", window_id="first", chain="none")
    second, fam2, src2 = example_plan("seed000-controlled", window_id="second", chain="none")
    script.register(first, fam1, src1)
    script.register(second, fam2, src2)
    script.admit(first)
    script.admit(second)
    script.action(first, "preflight")
    script.action(first, "drain")          # production down, no HOLD yet
    script.action(second, "preflight")     # the second window's first action: refused by the runner
    at = len(script.items) - 2
    hit = _expect(_audit(script), "one-window-on-site", at + 1)
    assert "window first has acted and is not closed" in hit.message
    clean = Script()   # one after the other: no violation
    clean.restoring_window()
    clean.restoring_window("seed000-controlled", window_id="after")
    assert not [v for v in _audit(clean) if v.invariant == "one-window-on-site"]


# ---------------------------------------------------------------------- untouched-close-proven


def _aborted_early(*touch: str) -> tuple[Script, list[NewEvent]]:
    """A window admitted, then (``touch``: what it did first) closed aborted "nothing to restore"."""
    script = Script()
    plan, families, source = example_plan("seed000-production-policy", chain="none")
    script.register(plan, families, source)
    script.admit(plan)
    script.action(plan, "preflight")
    for what in touch:
        if what == "drain-started":  # the drain's start is recorded; its outcome never was
            script.add(plan, "host.action", {"host": "h1", "action": "drain", "phase": "started",
                                             "action_id": "lost-drain", "command": "drain h1"})
        elif what == "probe-down":  # the re-probe found production not serving
            script.add(plan, "host.action", {"host": "h1", "action": "probe", "phase": "started",
                                             "action_id": "probe-1", "command": "probe h1"})
            script.add(plan, "host.action", {"host": "h1", "action": "probe", "phase": "finished",
                                             "action_id": "probe-1", "exit_code": 0, "ok": True, "duration_s": 0.1,
                                             "detail": {"serving": "down"}, "probe_of": "lost-drain"})
        else:
            script.action(plan, what)
    script.add(plan, "window.closed", {"ending": "aborted",
                                       "summary": "ABORTED before touching production: nothing to restore"})
    return script, list(script.items)


def test_aborted_before_touching_with_only_observing_actions_is_proven() -> None:
    """A preflight and a probe change nothing: closing "nothing to restore" after them is sound."""
    script, items = _aborted_early("probe")
    assert [v for v in _audit(script, items) if v.invariant == "untouched-close-proven"] == []


@pytest.mark.parametrize("touch", [
    pytest.param(("drain",), id="drain-finished"),
    pytest.param(("drain-started",), id="drain-outcome-lost"),
    pytest.param(("drain-started", "probe-down"), id="drain-then-probe-down"),
    pytest.param(("experiment_stop",), id="experiment-stopped"),
])
def test_closed_nothing_to_restore_after_touching_the_hosts(touch: tuple[str, ...]) -> None:
    """The attack of the second round: a drain whose outcome the runner could not record, a re-probe
    that found production down, and a close "nothing to restore" that leaves it down. The ledger
    verifies, but the audit must say production may have been left as the window left it."""
    script, items = _aborted_early(*touch)
    v = _expect(_audit(script, items), "untouched-close-proven", find(items, "window.closed") + 1)
    assert "touched the hosts" in v.message
    assert ("probe found production not serving" in v.message) if "probe-down" in touch else (
        f"recorded starts of {touch[0].removesuffix('-started')}" in v.message)


def test_aborted_after_a_restore_is_not_flagged() -> None:
    """A window that drained, restored (restore ok, watch PASS) and closed aborted kept its promise."""
    script = Script()
    plan, families, source = example_plan("seed000-production-policy", chain="none")
    script.register(plan, families, source)
    script.admit(plan)
    script.open_hold(plan)
    script.restore(plan, ending="aborted")
    assert [v for v in _audit(script) if v.invariant == "untouched-close-proven"] == []
