"""The ending steps: restore (with its watch), the chained close, the abort, and the decision.

Endings that change who holds production commit as one transaction: production up +
HOLD closed + window closed; HOLD closed + marker set + window closed (never an
instant with production down and neither a HOLD nor a marker). The decision is
rebuilt from the window's events (``runner.decide.inputs``), exactly as a replay does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..decide.inputs import INPUT_BUILDER, decision_for
from ..events import payloads as p
from ..events import read_payload
from ..state.archive import ARCHIVE_TYPES
from ..vocabulary import Ending
from .opening import OpeningSteps
from .recorder import Pending, Recorder, RunResult, StepHandler, plain

if TYPE_CHECKING:
    from ..drivers.base import ActionResult
    from .steps import Step, StepKind

__all__ = ["HANDLERS", "EndingSteps"]


class EndingSteps(Recorder):
    def chain_abort(self, step: Step, _r: RunResult) -> None:
        marker = self.state.marker
        self.append([("chain.aborted", p.ChainAborted(reason=step.reason,
                                                      marker_window=marker.window if marker else None), ())])
        self.say(f"chain aborted: {step.reason}")

    def _snapshot_member(self) -> dict[str, str]:
        sha = self.snapshot_sha()
        return {"production_snapshot_sha256": sha} if sha else {}

    def restore(self, step: Step, _r: RunResult) -> None:
        attempt = int(step.args.get("attempt", 1))
        self.say(f"restore (attempt {attempt})")
        self.action("restore", None, self.restore_params(), verify=self._verify_restored_clock, then=lambda res: [
            ("restore.finished", p.RestoreFinished(status="ok", attempts=attempt,
                                                   detail={**plain(res.facts), **self._restored_clock(res.facts)},
                                                   **self._snapshot_member()), ())])

    def _restored_clock(self, facts: dict[str, Any]) -> dict[str, Any]:
        """Production's cap after the restore, from every host's own log line (``detail.clock``)."""
        from ..gates.clocks import restored_clock

        clock = restored_clock(facts, self.driver.hosts, self.plan.production_clock_cap_mhz)
        return {} if clock is None else {"clock": clock}

    def _verify_restored_clock(self, res: ActionResult) -> dict[str, Any] | None:
        """A restore that brought production back at another cap (or hosts that disagree) is not verified."""
        clock = self._restored_clock(res.facts).get("clock")
        if clock is None or not clock["problems"]:
            return None
        return {"clock": clock, "restore_verified": False,
                "error": "restore not verified: " + "; ".join(clock["problems"])}

    def _last_restore_error(self) -> str | None:
        """Why the window's last restore attempt failed (its recorded ``error``), if one did."""
        last = None
        for event in self.ledger.events(stream=f"window/{self.window}", types=["host.action"]):
            action = read_payload(event, p.HostAction)
            if action.action in ("restore", "watch") and action.phase == "finished":
                error = action.detail.get("error")
                last = str(error)[:500] if not action.ok and error else None
        return last

    def restore_failed(self, step: Step, _r: RunResult) -> None:
        last = self._last_restore_error()
        self.append([("restore.finished", p.RestoreFinished(
            status="failed", attempts=int(step.args.get("attempts", 0)),
            detail={"escalated": True, "reason": step.reason, **({"last_error": last} if last else {}),
                    "next": "fix the site, then `tally window resume` retries the restore"},
            **self._snapshot_member()), ())])
        self.say(f"RESTORE ESCALATED: {step.reason}{f' (last: {last})' if last else ''}; "
                 f"the HOLD stays with {self.owner}")

    def watch(self, _s: Step, _r: RunResult) -> None:
        sha = self.snapshot_sha()
        res = self.action("watch", None, {"snapshot_sha256": sha} if sha else {}, then=lambda r: [
            ("watch.result", p.WatchResult(verdict=r.facts.get("watch", "PASS"), evidence=plain(r.facts)), ())])
        if not res.ok:
            self.append([("watch.result", p.WatchResult(verdict="FAIL", evidence=plain(res.facts)), ())])

    def placeholder(self, step: Step, _r: RunResult) -> None:
        """Raise or take down a placeholder on a host, recording it with its proof."""
        host = step.host
        assert host is not None
        event = "placeholder.up" if step.kind == "placeholder_up" else "placeholder.down"
        self.action(step.kind, host, {}, then=lambda res: [
            (event, p.Placeholder(host=host, proof=plain(res.facts)), ())])

    def marker_clear(self, step: Step, _r: RunResult) -> None:
        self.append([("chain.marker.cleared", p.ChainMarkerCleared(
            production_snapshot_sha256=step.args.get("sha"), watch_seq=step.args.get("watch_seq")), ())])
        self.say("chain marker cleared (watch PASS)")

    def _closed(self, ending: Ending, step: Step) -> Pending:
        return ("window.closed", p.WindowClosed(ending=ending, summary=step.args.get("summary", "")), ())

    def restore_close(self, step: Step, _r: RunResult) -> None:
        """Production up, HOLD closed, window closed: one transaction."""
        items: list[Pending] = []
        if step.args.get("production_up"):
            items.append(("production.state", p.ProductionState(
                state="up", proof={"watch_seq": step.args.get("watch_seq")}), ()))
        if step.args.get("hold"):
            items.append(("hold.closed", p.HoldClosed(owner=self.owner, reason=step.args["ending"]), ()))
        items.append(self._closed(step.args["ending"], step))
        self.append(items)
        self.say(str(step.args.get("summary", "")))

    def chained_close(self, step: Step, _r: RunResult) -> None:
        """HOLD closed, marker set, window closed: one transaction (never down with neither)."""
        items: list[Pending] = []
        if step.args.get("hold"):
            items.append(("hold.closed", p.HoldClosed(owner=self.owner, reason="chained"), ()))
        items.append(("chain.marker.set", p.ChainMarkerSet(production_snapshot_sha256=self.snapshot_sha() or "",
                                                           hosts=list(self.driver.hosts)), ()))
        items.append(self._closed("chained", step))
        self.append(items)
        self.say(str(step.args.get("summary", "")))

    def close(self, step: Step, _r: RunResult) -> None:
        self.append([self._closed(step.args["ending"], step)])
        self.say(str(step.args.get("summary", "")))

    def production_down_proof(self, _s: Step, _r: RunResult) -> None:
        self.action("production_down_proof", None, {}, then=lambda res: [
            ("production.state", p.ProductionState(
                state="down", proof={"action": "production_down_proof", **plain(res.facts)}), ())])

    def decide(self, _s: Step, _r: RunResult) -> None:
        events = list(self.ledger.events(stream=f"window/{self.window}"))
        archive = list(self.ledger.events(stream="archive", types=list(ARCHIVE_TYPES)))
        built, outcome = decision_for(self.plan, events, archive)  # archive bounded by window.closed
        self.append([("decision.recorded", p.DecisionRecorded(
            rule=self.plan.protocol, params=built.input["params"], inputs_digest=built.digest, input=built.input,
            result=outcome, input_builder=INPUT_BUILDER), ())])
        self.say(f"decision: {outcome.get('decision')}")


HANDLERS: dict[StepKind, StepHandler] = {
    "chain_abort": EndingSteps.chain_abort,
    "restore": EndingSteps.restore,
    "restore_failed": EndingSteps.restore_failed,
    "watch": EndingSteps.watch,
    "placeholder_down": EndingSteps.placeholder,
    "marker_clear": EndingSteps.marker_clear,
    "restore_close": EndingSteps.restore_close,
    "close": EndingSteps.close,
    "placeholder_up": EndingSteps.placeholder,
    "fence": OpeningSteps.host_step,
    "experiment_stop": OpeningSteps.host_step,
    "pair_close": OpeningSteps.host_step,
    "hold_stash": OpeningSteps.host_step,
    "commit_close": OpeningSteps.host_step,
    "closing_quiet_proof": OpeningSteps.host_step,
    "production_down_proof": EndingSteps.production_down_proof,
    "closing_placeholder_proof": OpeningSteps.host_step,
    "chained_close": EndingSteps.chained_close,
    "decide": EndingSteps.decide,
}
