"""The opening steps: re-probe an unknown outcome, preflight, proofs under a marker, snapshot, drain, HOLD.

The production snapshot comes before the drain, while production serves: whatever
happens from there on, there is something to restore to. Under another window's
chain marker there is no drain: placeholders and quiet hosts are proved, the HOLD
opens, and the snapshot is the marker's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..events import payloads as p
from .capture import check_capture
from .recorder import Recorder, RunResult, StepHandler, plain

if TYPE_CHECKING:
    from .capture import Capture
    from .steps import Step, StepKind

__all__ = ["HANDLERS", "HOST_STEP_ACTIONS", "OpeningSteps"]


class OpeningSteps(Recorder):
    capture: Capture | None   # a production capture for a window opened under a marker (--chain-production)

    def probe(self, step: Step, _r: RunResult) -> None:
        self.say(f"re-probing: {step.reason}")
        self.action("probe", None, {"probed_action": step.args.get("action")}, probe_of=step.args["probe_of"])

    def preflight(self, _s: Step, _r: RunResult) -> None:
        self.say(f"window {self.window}: preflight")
        self.action("preflight", None, {"marker": bool(self.state.marker)})

    def host_step(self, step: Step, _r: RunResult) -> None:
        """A step that is one host action and records nothing else (a proof, a fence, the experiment's stop)."""
        params: dict[str, object] = {}
        if step.kind == "placeholder_proof":   # a chained start: the hosts must run the window's commit (and tag)
            params["expected_commit"] = self.ws.commit
            if self.plan.tag is not None:
                params["expected_tag"] = self.plan.tag
        self.action(HOST_STEP_ACTIONS[step.kind], step.host, params)

    def restore_check(self, _s: Step, _r: RunResult) -> None:
        """The rollback preflight: the site's dry restore check on production's snapshot (changes nothing)."""
        self.action("restore_check", None, self.restore_params())

    def drain(self, _s: Step, _r: RunResult) -> None:
        self.action("drain", None, {}, then=lambda res: [
            ("production.state", p.ProductionState(state="down", proof={"action": "drain", **plain(res.facts)}), ())])

    def hold_open(self, step: Step, _r: RunResult) -> None:
        from ..drivers.base import unreachable_allowed

        allowed = list(unreachable_allowed(self.driver, self.plan.mode))
        # a member is written only when set (the producer passes it): allow_unreachable when the site allows
        # some (older ledgers have it empty), rollback_preflight when the site has no restore_check
        optional: dict[str, Any] = {}
        if allowed:
            optional["allow_unreachable"] = allowed
        if "restore_check" not in self.driver.actions:
            optional["rollback_preflight"] = "none"
        opened = p.HoldOpened(owner=self.owner, hosts=list(self.driver.hosts),
                              from_marker=bool(step.args.get("from_marker")), **optional)
        self.append([("hold.opened", opened, ())])
        self.say(f"HOLD opened by {self.owner}")

    def snapshot(self, step: Step, _r: RunResult) -> None:
        marker = self.state.marker
        capture = self.capture
        if step.args.get("from_marker") and marker is not None and capture is not None:
            # production's identity as captured, so that the chain's restore can bring back exactly it
            # even on a host that lost its record; checked against the marker here, where it is recorded
            # (the check before any host action does not run on a resume)
            check_capture(capture, marker, self.window)
            blob = capture.blob()
            self.append([("production.snapshot", p.ProductionSnapshot(
                sha256=marker.production_snapshot_sha256, source="capture", identity=dict(capture.identity),
                blob=p.BlobRef.of(blob)), (blob,))])
            return
        if step.args.get("from_marker") and marker is not None:
            self.append([("production.snapshot", p.ProductionSnapshot(
                sha256=marker.production_snapshot_sha256, source="marker",
                identity={"marker_window": marker.window, "marker_seq": marker.seq}), ())])
            return
        self.action("snapshot", None, {}, then=lambda res: [
            ("production.snapshot", p.ProductionSnapshot(sha256=res.facts["snapshot_sha256"], source="drain",
                                                         identity=plain(res.facts.get("identity") or {})), ())])


# The steps that are one host action, opening and closing, and the action each runs.
HOST_STEP_ACTIONS: dict[str, str] = {
    "placeholder_proof": "placeholder_proof", "quiet_proof": "quiet_proof",
    "closing_placeholder_proof": "placeholder_proof", "closing_quiet_proof": "quiet_proof",
    "fence": "fence", "experiment_stop": "experiment_stop",
    "pair_close": "pair_close", "hold_stash": "hold_stash", "commit_close": "commit_close",
    "restore_check": "restore_check",
}

HANDLERS: dict[StepKind, StepHandler] = {
    "probe": OpeningSteps.probe,
    "preflight": OpeningSteps.preflight,
    "placeholder_proof": OpeningSteps.host_step,
    "quiet_proof": OpeningSteps.host_step,
    "drain": OpeningSteps.drain,
    "hold_open": OpeningSteps.hold_open,
    "snapshot": OpeningSteps.snapshot,
    "restore_check": OpeningSteps.restore_check,
}
