"""The step machine as a table: events so far -> the one step the runner must take next.

Each row is a situation, named as an operator would name it, built from scripted
events (no database, no host): the events are folded and ``next_step`` is asked. Every
``StepKind`` appears in at least one row, and every kind the runner can be asked to take
has exactly one handler.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

import pytest

from runner.execution.clock import Limit
from runner.execution.steps import Context, Step, StepKind, next_step
from runner.execution.window import STEP_HANDLERS, unhandled_step_kinds
from runner.gates.spec import spec_sha256
from runner.plan.model import Plan
from runner.state.fold import fold
from tests.runner.script import HOSTS, SIMPLE_PP3_NAME, Script, example_plan

SNAPSHOT = hashlib.sha256(b"production").hexdigest()


def spec_off_control() -> list[dict[str, Any]]:
    """Seed 003's arms with A declared as running no speculative decoding."""
    plan, _, _ = example_plan("seed003-abba")
    arms = [arm.to_json() for arm in plan.arms]
    for arm in arms:
        if arm["role"] == "A":
            arm["speculative"] = "none"
    return arms


class Story(Script):
    """A scripted window that can be stopped anywhere; host actions carry the facts the fold reads."""

    def __init__(self, name: str = "seed000-production-policy", **overrides: Any) -> None:
        super().__init__()
        self.plan, families, source = example_plan(name, **{"chain": "none", **overrides})
        self.register(self.plan, families, source)

    def act(self, action: str, *, ok: bool = True, host: str = "site", finished: bool = True, **facts: Any) -> Story:
        self._ids += 1
        action_id = f"a{self._ids}"
        self.add(self.plan, "host.action", {"host": host, "action": action, "phase": "started",
                                            "action_id": action_id})
        if finished:
            self.add(self.plan, "host.action", {"host": host, "action": action, "phase": "finished",
                                                "action_id": action_id, "exit_code": 0 if ok else 1, "ok": ok,
                                                "duration_s": 0.1, "detail": facts})
        return self

    def probed(self, of: str, **facts: Any) -> Story:
        """A re-probe of the open action ``of`` (its unknown outcome), finished with ``facts``."""
        self._ids += 1
        for phase in ("started", "finished"):
            self.add(self.plan, "host.action", {
                "host": "site", "action": "probe", "phase": phase, "action_id": f"a{self._ids}", "probe_of": of,
                **({"exit_code": 0, "ok": True, "duration_s": 0.1, "detail": facts} if phase == "finished" else {})})
        return self

    def snapshotted(self) -> Story:
        self.admitted().act("preflight", serving="up").act("snapshot", snapshot_sha256=SNAPSHOT)
        return self.event("production.snapshot", sha256=SNAPSHOT, source="drain")

    def stopped_before_the_hold(self) -> Story:
        return self.event("window.interrupted", reason="error").event("measurement.ended", reason="interrupted",
                                                                        waves=0)

    def event(self, type_: str, **payload: Any) -> Story:
        self.add(self.plan, type_, payload)
        return self

    # ------------------------------------------------------------------ the usual path

    def admitted(self) -> Story:
        self.admit(self.plan)
        return self

    def held(self) -> Story:
        self.admitted().act("preflight", serving="up").act("snapshot", snapshot_sha256=SNAPSHOT)
        self.event("production.snapshot", sha256=SNAPSHOT, source="drain")
        self.act("drain").event("production.state", state="down", proof={})
        return self.event("hold.opened", owner=self.plan.window_id, hosts=list(HOSTS))

    def engine(self, start: str) -> Story:
        role = self.plan.start(start).role
        arm = self.plan.arm(role)
        return self.act("start_arm", start=start, arm=arm.name, role=role, engine="ready",
                        speculative_config=arm.speculative)

    def began(self, start: str) -> Story:
        role = self.plan.start(start).role
        self.engine(start).act("read_clock_cap", start=start, clock_cap_mhz=2300)
        return self.event("start.began", start=start, role=role, clock_cap_mhz=2300,
                          spec_config_sha256=spec_sha256(self.plan.arm(role).speculative or {}))

    def configured(self, start: str) -> Story:
        self.began(start).gate(self.plan, "start_config", start=start)
        return self

    def warm(self, start: str) -> Story:
        self.configured(start)
        if self.plan.arm(self.plan.start(start).role).speculates:
            self.gate(self.plan, "standard_spec", start=start)
        return self.event("warmup.done", start=start, cold_ttft_s=1.0, warm_ttft_s=0.2)

    def measured(self, start: str) -> Story:
        from tests.runner.script import wave_payload

        self.warm(start)
        for spec in self.plan.waves_of(start):
            payload, blob = wave_payload(self.plan, spec.index, self.now(), self.now())
            self.add(self.plan, "wave.measured", payload, [blob])
        return self

    def ended(self, start: str) -> Story:
        role = self.plan.start(start).role
        self.measured(start).act("read_clock_cap", start=start, clock_cap_mhz=2300).act("stop_arm", start=start)
        return self.event("start.ended", start=start, role=role)

    def all_measured(self) -> Story:
        self.held()
        for start in self.plan.starts:
            self.ended(start.id)
        return self.event("measurement.ended", reason="complete", waves=len(self.plan.waves))

    def restored(self) -> Story:
        self.all_measured().act("restore", serving="up").event("restore.finished", status="ok", attempts=1)
        return self

    def watched(self) -> Story:
        return self.restored().act("watch", watch="PASS").event("watch.result", verdict="PASS")

    def closed(self) -> Story:
        self.watched().event("production.state", state="up", proof={})
        self.event("hold.closed", owner=self.plan.window_id)
        return self.event("window.closed", ending="restored", summary="RESTORED")


def chained(story: Story) -> Story:
    story.all_measured()
    for host in HOSTS:
        story.act("placeholder_up", host=host, placeholders=list(HOSTS)).event("placeholder.up", host=host)
    return story


def under_marker(story: Story, *, prev_ok: bool = True) -> Story:
    """A window registered after a chained window left its marker (and its placeholders up)."""
    first = Story(window_id="day-a", chain="chained")
    chained(first)
    for host in HOSTS:
        first.act("fence", host=host)
    first.act("experiment_stop").act("quiet_proof").act("production_down_proof")
    first.event("production.state", state="down", proof={})
    for host in HOSTS:
        first.act("placeholder_proof", host=host, placeholders=list(HOSTS))
    first.event("hold.closed", owner="day-a")
    first.event("chain.marker.set", production_snapshot_sha256=SNAPSHOT, hosts=list(HOSTS))
    first.event("window.closed", ending="chained", summary="CHAINED")
    story.items = first.items + story.items
    gates = [*story.plan.required_gates, *(["chain_prev_ok"] if prev_ok else [])]
    for gate in gates:
        story.gate(story.plan, gate)
    if prev_ok:
        story.event("window.admitted", commit=story.plan.commit, gates={}, under_marker=True)
    return story


def _chain_last() -> Story:
    return Story(window_id="day-b", chain="last")


CLOSING = frozenset({"pair_close", "hold_stash", "commit_close"})


def own_stage() -> Story:
    """Seed 003's simple ABBA plan with its smoke stage as a stage of its own (``[smoke] arms``)."""
    plan, _, _ = example_plan(SIMPLE_PP3_NAME)
    budget = plan.budget.to_json()
    for stage in budget["stages"]:
        if stage["kind"] == "measure" and stage["start"] is None:
            stage["kind"] = "smoke"
    story = Story(SIMPLE_PP3_NAME, smoke={"arms": ["A", "B"], "probes": ["greedy_identity"]}, budget=budget)
    assert story.plan.smoke is not None and story.plan.smoke.starts == ("A-smoke", "B-smoke")
    return story


def blocks_ended(story: Story) -> Story:
    story.held()
    for start in story.plan.starts:
        story.ended(start.id)
    return story


def stage_gated(story: Story, start: str) -> Story:
    """The smoke stage's ``start`` began and passed its start gates (its arm speculates: standard_spec too)."""
    story.configured(start).gate(story.plan, "standard_spec", start=start)
    return story


def stage_attested(story: Story, start: str) -> Story:
    """... and its effective parameters were attested, as any start's."""
    return stage_gated(story, start).event("params.attested", start=start, ok=True, reported={})


def probed(story: Story, start: str) -> Story:
    role = story.plan.start(start).role
    return story.event("smoke.result", start=start, role=role, probe="greedy_identity",
                       outcome="recorded" if role == "A" else "pass", kind="greedy-identity", summary="scripted")


def stage_ended(story: Story, start: str) -> Story:
    probed(stage_attested(story, start), start)
    story.act("read_clock_cap", start=start, clock_cap_mhz=2300).act("stop_arm", start=start)
    return story.event("start.ended", start=start, role=story.plan.start(start).role)

@dataclass(frozen=True)
class Row:
    situation: str
    story: Callable[[], Story]
    expected: StepKind
    detail: dict[str, Any] | None = None     # members of the step that must match
    stop_limit: Limit | None = None
    site_actions: frozenset[str] = frozenset()   # the site's optional chained-close actions


def _failed_restores(times: int) -> Story:
    story = Story().all_measured()
    for _ in range(times):
        story.act("restore", ok=False)
    return story


STOP = Limit("stop_admitting", 50.0, "elapsed 50.1 min reached stop-admitting at 50 min")

ROWS = [
    Row("registered, no gate passed yet", lambda: Story(), "blocked"),
    Row("admitted, nothing touched", lambda: Story().admitted(), "preflight"),
    Row("preflight failed before the HOLD", lambda: Story().admitted().act("preflight", ok=False),
        "measurement_end", {"args": {"why": "failed"}}),
    Row("preflight passed: snapshot production while it serves", lambda: Story().admitted().act(
        "preflight", serving="up"), "snapshot", {"args": {"from_marker": False}}),
    Row("snapshot taken: drain", lambda: Story().admitted().act("preflight", serving="up").act(
        "snapshot", snapshot_sha256=SNAPSHOT).event("production.snapshot", sha256=SNAPSHOT, source="drain"),
        "drain"),
    Row("snapshot taken, the site can check a restore: the rollback preflight", lambda: Story().admitted().act(
        "preflight", serving="up").act("snapshot", snapshot_sha256=SNAPSHOT).event(
        "production.snapshot", sha256=SNAPSHOT, source="drain"), "restore_check", site_actions=frozenset({"restore_check"})),
    Row("rollback preflight failed: end before the drain", lambda: Story().admitted().act(
        "preflight", serving="up").act("snapshot", snapshot_sha256=SNAPSHOT).event(
        "production.snapshot", sha256=SNAPSHOT, source="drain").act("restore_check", ok=False), "measurement_end",
        {"args": {"why": "failed"}}, site_actions=frozenset({"restore_check"})),
    Row("rollback preflight passed: drain", lambda: Story().admitted().act(
        "preflight", serving="up").act("snapshot", snapshot_sha256=SNAPSHOT).event(
        "production.snapshot", sha256=SNAPSHOT, source="drain").act("restore_check", snapshot_sha256=SNAPSHOT),
        "drain", site_actions=frozenset({"restore_check"})),
    Row("drain failed before the HOLD", lambda: Story().admitted().act("preflight", serving="up").act(
        "snapshot", snapshot_sha256=SNAPSHOT).event("production.snapshot", sha256=SNAPSHOT, source="drain").act(
        "drain", ok=False), "measurement_end", {"reason": "drain failed before the HOLD"}),
    Row("drained: open the HOLD", lambda: Story().admitted().act("preflight", serving="up").act(
        "snapshot", snapshot_sha256=SNAPSHOT).event("production.snapshot", sha256=SNAPSHOT, source="drain").act(
        "drain").event("production.state", state="down", proof={}), "hold_open"),
    Row("a drain started and never finished (crash)", lambda: Story().admitted().act("preflight", serving="up").act(
        "drain", finished=False), "probe", {"args": {"action": "drain", "probe_of": "a2"}}),
    Row("HOLD open, no start yet", lambda: Story().held(), "start_arm", {"start": "s1"}),
    Row("engine up, start not recorded", lambda: Story().held().engine("s1"), "start_began", {"start": "s1"}),
    Row("start began, its config not checked", lambda: Story().held().began("s1"), "config_gate", {"start": "s1"}),
    Row("config PASS, its spec not checked", lambda: Story().held().configured("s1"), "spec_gate", {"start": "s1"}),
    Row("spec PASS: attest its effective parameters", lambda: Story().held().configured("s1").event(
        "gate.result", gate="standard_spec", verdict="PASS", evidence={}, start="s1"), "attest_params"),
    Row("parameters attested: warm up", lambda: Story().held().configured("s1").event(
        "gate.result", gate="standard_spec", verdict="PASS", evidence={}, start="s1").event(
        "params.attested", start="s1", ok=True, reported={}, none_reported=True), "warmup"),
    Row("parameters not as the plan's: the start fails before its warm-up", lambda: Story().held().configured(
        "s1").event("gate.result", gate="standard_spec", verdict="PASS", evidence={}, start="s1").event(
        "params.attested", start="s1", ok=False, reported={}, failures=["max_model_len too short"]), "end_start",
        {"args": {"failed": True}}),
    Row("a warm-up the server's counter does not show served: the start fails", lambda: Story().held().configured(
        "s1").event("gate.result", gate="standard_spec", verdict="PASS", evidence={}, start="s1").event(
        "params.attested", start="s1", ok=True, reported={}).event(
        "warmup.done", start="s1", cold_ttft_s=None, warm_ttft_s=None, requests=2,
        served={"attested": True, "ok": False, "detail": "rose by 0"}), "end_start", {"args": {"failed": True}}),
    Row("a spec-off control: config PASS, no spec gate, attest, warm up",
        lambda: Story("seed003-abba", arms=spec_off_control()).held().configured("A1").event(
            "params.attested", start="A1", ok=True, reported={}), "warmup", {"start": "A1"}),
    Row("start_config FAIL at a start", lambda: Story().held().began("s1").event(
        "gate.result", gate="start_config", verdict="FAIL", evidence={}, start="s1"), "end_start",
        {"args": {"truncated": True}}),
    Row("warmed up: the first planned wave", lambda: Story().held().warm("s1"), "wave", {"start": "s1"}),
    Row("warmed up, priming registered: prime the block",
        lambda: Story("seed003-abba", priming={"requests": 2}).held().warm("A1"), "prime", {"start": "A1"}),
    Row("primed: the first planned wave", lambda: Story("seed003-abba", priming={"requests": 2}).held().warm(
        "A1").event("priming.done", start="A1", cache_salt="tally-prime-A1", ok=True, requests=[]),
        "wave", {"start": "A1"}),
    Row("every wave of s1 measured: its smoke probes (greedy_check)", lambda: Story().held().measured("s1"),
        "smoke", {"start": "s1"}),
    Row("every wave of s1 measured, its smoke probes recorded", lambda: Story().held().measured("s1").event(
        "smoke.result", start="s1", role="P", probe="greedy_identity", outcome="recorded", kind="greedy-identity",
        summary="s1: the greedy reference"), "end_start",
        {"start": "s1", "reason": "every wave of the start was measured"}),
    Row("every wave of a start outside the smoke stage measured", lambda: Story(SIMPLE_PP3_NAME).held().measured(
        "A1"), "end_start", {"start": "A1", "reason": "every wave of the start was measured"}),
    Row("a block's waves measured, the smoke stage of its own registered: the block ends (no probe in it)",
        lambda: own_stage().held().measured("A1"), "end_start",
        {"start": "A1", "reason": "every wave of the start was measured"}),
    Row("every block ended, the smoke stage of its own registered: its start on A's engine",
        lambda: blocks_ended(own_stage()), "start_arm", {"start": "A-smoke"}),
    Row("the smoke stage's start began: its start_config gate, as any start's",
        lambda: blocks_ended(own_stage()).began("A-smoke"), "config_gate", {"start": "A-smoke"}),
    Row("the smoke stage's start past its gates: its effective parameters attested, as any start's",
        lambda: stage_gated(blocks_ended(own_stage()), "A-smoke"), "attest_params", {"start": "A-smoke"}),
    Row("the smoke stage's start attested: its probes (no warm-up, priming or wave)",
        lambda: stage_attested(blocks_ended(own_stage()), "A-smoke"), "smoke", {"start": "A-smoke"}),
    Row("the smoke stage's probes recorded on A: its start ends",
        lambda: probed(stage_attested(blocks_ended(own_stage()), "A-smoke"), "A-smoke"), "end_start",
        {"start": "A-smoke", "reason": "the smoke stage's probes ran on this arm's engine"}),
    Row("the smoke stage ended on A: its start on B's engine",
        lambda: stage_ended(blocks_ended(own_stage()), "A-smoke"), "start_arm", {"start": "B-smoke"}),
    Row("the smoke stage ran on both arms: measurement ends, complete",
        lambda: stage_ended(stage_ended(blocks_ended(own_stage()), "A-smoke"), "B-smoke"), "measurement_end",
        {"args": {"why": "complete"}}),
    Row("stop admitting reached after the blocks: the smoke stage does not begin",
        lambda: blocks_ended(own_stage()), "budget", {"start": None}, STOP),
    Row("s1 ended: the next start", lambda: Story().held().ended("s1"), "start_arm", {"start": "s2"}),
    Row("began, and the engine is gone (crash and host restart)", lambda: Story().held().began("s1").act(
        "probe", serving="up", arm="production", engine="ready"), "end_start",
        {"args": {"truncated": True, "lost": True}}),
    Row("stop admitting reached mid-start, not yet recorded", lambda: Story().held().warm("s1"), "budget",
        {"start": "s1"}, STOP),
    Row("start_arm failed twice", lambda: Story().held().act("start_arm", ok=False, start="s1").act(
        "start_arm", ok=False, start="s1"), "measurement_end", {"args": {"why": "failed"}}),
    Row("standard_spec FAIL at a start", lambda: Story().held().began("s1").event(
        "gate.result", gate="standard_spec", verdict="FAIL", evidence={}, start="s1"), "end_start",
        {"args": {"truncated": True}}),
    Row("every start ended", lambda: Story().held().ended("s1").ended("s2").ended("s3"), "measurement_end",
        {"args": {"why": "complete"}}),
    Row("measurement ended: restore", lambda: Story().all_measured(), "restore", {"args": {"attempt": 1}}),
    Row("restore failed twice: a third attempt", lambda: _failed_restores(2), "restore", {"args": {"attempt": 3}}),
    Row("restore failed three times: escalate", lambda: _failed_restores(3), "restore_failed"),
    Row("restored: watch it serve", lambda: Story().restored(), "watch"),
    Row("watch PASS: production up, HOLD closed, window closed", lambda: Story().watched(), "restore_close",
        {"args": {"ending": "restored", "summary": "RESTORED: production up, watch PASS"}}),
    Row("closed: decide", lambda: Story().closed(), "decide"),
    Row("decided: nothing left", lambda: Story().closed().event(
        "decision.recorded", rule="win2-v1", params={}, inputs_digest=SNAPSHOT, input={}, result={}), "done"),
    Row("aborted before touching production", lambda: Story().admitted().event(
        "window.interrupted", reason="abort"), "close", {"args": {"ending": "aborted"}}),
    Row("a drain's outcome lost, re-probed (production down), stopped before the HOLD: restore", lambda: Story()
        .snapshotted().act("drain", finished=False).probed("a3", serving="down").stopped_before_the_hold(),
        "restore"),
    Row("a drain's outcome lost, re-probed (production up), stopped before the HOLD: restore all the same",
        lambda: Story().snapshotted().act("drain", finished=False).probed("a3", serving="up", arm="production")
        .stopped_before_the_hold(), "restore"),
    Row("a drain failed (its output unrecordable) before the HOLD: restore", lambda: Story().snapshotted().act(
        "drain", ok=False, error="the site's output for drain could not be recorded", unrecordable=True).event(
        "measurement.ended", reason="failed", waves=0), "restore"),
    Row("a drain recorded as never run (its start refused) before the HOLD: nothing to restore", lambda: Story()
        .snapshotted().act("drain", ok=False, not_run=True).stopped_before_the_hold(), "close",
        {"args": {"ending": "aborted", "summary": "ABORTED before touching production: nothing to restore"}}),
    Row("a probe found production not serving, nothing changing started: restore", lambda: Story().snapshotted()
        .act("probe", serving="down").stopped_before_the_hold(), "restore"),
    Row("the ledger refused an append in a chained window's HOLD: end by restoring", lambda: Story(chain="chained")
        .held().event("window.interrupted", reason="error", detail={"append_failed": True}), "measurement_end",
        {"args": {"why": "failed"}}),
    Row("an error in a chained window's HOLD: end as the plan allows", lambda: Story(chain="chained").held().event(
        "window.interrupted", reason="error"), "measurement_end", {"args": {"why": "interrupted"}}),
    Row("chained window measured: placeholders up before the first fence", lambda: Story(chain="chained")
        .all_measured(), "placeholder_up", {"host": HOSTS[0]}),
    Row("placeholders up: fence each host", lambda: chained(Story(chain="chained")), "fence", {"host": HOSTS[0]}),
    Row("fenced: stop the experiment", lambda: chained(Story(chain="chained")).act("fence", host=HOSTS[0]).act(
        "fence", host=HOSTS[1]), "experiment_stop"),
    Row("experiment stopped: prove the hosts quiet", lambda: chained(Story(chain="chained")).act(
        "fence", host=HOSTS[0]).act("fence", host=HOSTS[1]).act("experiment_stop"), "closing_quiet_proof"),
    Row("quiet: prove production down", lambda: chained(Story(chain="chained")).act("fence", host=HOSTS[0]).act(
        "fence", host=HOSTS[1]).act("experiment_stop").act("quiet_proof"), "production_down_proof"),
    Row("production down: prove each placeholder", lambda: chained(Story(chain="chained")).act(
        "fence", host=HOSTS[0]).act("fence", host=HOSTS[1]).act("experiment_stop").act("quiet_proof").act(
        "production_down_proof").event("production.state", state="down", proof={}), "closing_placeholder_proof",
        {"host": HOSTS[0]}),
    Row("placeholders proved: HOLD closed, marker set, window closed", lambda: chained(Story(chain="chained")).act(
        "fence", host=HOSTS[0]).act("fence", host=HOSTS[1]).act("experiment_stop").act("quiet_proof").act(
        "production_down_proof").event("production.state", state="down", proof={}).act(
        "placeholder_proof", host=HOSTS[0]).act("placeholder_proof", host=HOSTS[1]), "chained_close",
        {"args": {"hold": True, "summary": "CHAINED: production left down"}}),
    Row("fenced, the site closes pairs: close the pair before the experiment stops", lambda: chained(
        Story(chain="chained")).act("fence", host=HOSTS[0]).act("fence", host=HOSTS[1]), "pair_close",
        site_actions=CLOSING),
    Row("placeholders proved, the site stashes its HOLD: stash it", lambda: _proved_closing().act("pair_close"),
        "hold_stash", site_actions=CLOSING),
    Row("HOLD stashed: close the commit", lambda: _proved_closing().act("pair_close").act("hold_stash"),
        "commit_close", site_actions=CLOSING),
    Row("commit closed: HOLD closed, marker set, window closed", lambda: _proved_closing().act("pair_close").act(
        "hold_stash").act("commit_close"), "chained_close", site_actions=CLOSING),
    Row("marker present, no chain_prev_ok for this window", lambda: under_marker(_chain_last(), prev_ok=False),
        "blocked"),
    Row("marker present, no HOLD of ours, preflight failed", lambda: under_marker(_chain_last()).act(
        "preflight", ok=False), "chain_abort", {"reason": "preflight failed before the HOLD"}),
    Row("under the marker: prove each placeholder before the HOLD", lambda: under_marker(_chain_last()).act(
        "preflight", serving="down"), "placeholder_proof", {"host": HOSTS[0]}),
    Row("under the marker, placeholders held: prove the hosts quiet", lambda: under_marker(_chain_last()).act(
        "preflight", serving="down").act("placeholder_proof", host=HOSTS[0]).act(
        "placeholder_proof", host=HOSTS[1]), "quiet_proof"),
    Row("under the marker, quiet: the HOLD from the marker", lambda: under_marker(_chain_last()).act(
        "preflight", serving="down").act("placeholder_proof", host=HOSTS[0]).act(
        "placeholder_proof", host=HOSTS[1]).act("quiet_proof"), "hold_open", {"args": {"from_marker": True}}),
    Row("chain's last window watched: placeholders come down", lambda: _last_watched(), "placeholder_down",
        {"host": HOSTS[0]}),
    Row("placeholders down: clear the marker", lambda: _last_watched().act("placeholder_down", host=HOSTS[0]).event(
        "placeholder.down", host=HOSTS[0]).act("placeholder_down", host=HOSTS[1]).event(
        "placeholder.down", host=HOSTS[1]), "marker_clear"),
]


def _proved_closing() -> Story:
    """A chained close with every required step done (the optional ones are added by the rows)."""
    return chained(Story(chain="chained")).act("fence", host=HOSTS[0]).act("fence", host=HOSTS[1]).act(
        "experiment_stop").act("quiet_proof").act("production_down_proof").event(
        "production.state", state="down", proof={}).act("placeholder_proof", host=HOSTS[0]).act(
        "placeholder_proof", host=HOSTS[1])


def _last_watched() -> Story:
    story = under_marker(_chain_last())
    story.act("preflight", serving="down")
    for host in HOSTS:
        story.act("placeholder_proof", host=host)
    story.act("quiet_proof").event("hold.opened", owner="day-b", hosts=list(HOSTS), from_marker=True)
    story.event("production.snapshot", sha256=SNAPSHOT, source="marker")
    for start in story.plan.starts:
        story.ended(start.id)
    story.event("measurement.ended", reason="complete", waves=len(story.plan.waves))
    story.act("restore", serving="up").event("restore.finished", status="ok", attempts=1)
    return story.act("watch", watch="PASS").event("watch.result", verdict="PASS")


def _next(row: Row) -> Step:
    story = row.story()
    state = fold(None, story.materialize())
    plan: Plan = story.plan
    ws = state.windows[plan.window_id]
    return next_step(Context(plan, state, ws, HOSTS, stop_limit=row.stop_limit, site_actions=row.site_actions))


@pytest.mark.parametrize("row", ROWS, ids=[r.situation for r in ROWS])
def test_next_step(row: Row) -> None:
    step = _next(row)
    assert step.kind == row.expected, (row.situation, step)
    for name, want in (row.detail or {}).items():
        got = getattr(step, name)
        if isinstance(want, dict):
            assert {k: got.get(k) for k in want} == want, (row.situation, name, got)
        else:
            assert got == want, (row.situation, name, got)


def test_every_step_kind_has_a_row() -> None:
    assert set(get_args(StepKind)) - {row.expected for row in ROWS} == set()


def test_every_step_kind_has_exactly_one_handler() -> None:
    assert unhandled_step_kinds() == set()
    assert set(STEP_HANDLERS) == set(get_args(StepKind)) - {"done", "blocked"}
