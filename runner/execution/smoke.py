"""The smoke stage's step: a smoke start's probes, after its waves, recorded as ``smoke.result`` events.

Each probe (``runner.smoke.probes``) becomes one ``smoke.result`` whose evidence blob holds
its exchanges (requests, replies, the emitted tokens); all of a start's results are
appended in one transaction, so a start has all of its probes recorded or none; the start's
engine is attested before and after (as around a wave), and probes another engine may have
answered are not recorded (the start then ends lost). Greedy
identity compares the start with the plan's reference start (the first smoke start),
whose emitted sequence the runner reads back from that start's recorded evidence: the
runner keeps nothing of its own between steps.

The step honours the stop flag (``cancel``, set by SIGINT/SIGTERM): the session sends
nothing once it is set and cuts the request in flight, no probe starts after it, and a
probe that ended after it is recorded ``interrupted`` (it never counts in the decision).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError
from ledger.store import Blob
from ledger.strictjson import read_json

from ..events import payloads as p
from ..events import read_payload
from .recorder import Pending, Recorder, RunResult, StepHandler

if TYPE_CHECKING:
    from ..smoke.greedy import Emitted
    from ..smoke.probes import ProbeVerdict, SmokeSession
    from .steps import Step, StepKind

__all__ = ["HANDLERS", "SmokeSteps"]

EVIDENCE_MEDIA_TYPE = "application/json"


def _emitted(data: Any) -> Emitted | None:
    from ..smoke.greedy import Emitted

    if not isinstance(data, dict) or not isinstance(data.get("sequence"), list):
        return None
    tops = tuple(t if isinstance(t, dict) else None for t in data.get("top_logprobs") or [])
    return Emitted(tuple(data["sequence"]), str(data.get("basis")), tops, str(data.get("text") or ""),
                   data.get("finish_reason"))


class SmokeSteps(Recorder):
    # The runner's (StartSteps'), which comes first in its bases.
    def _model_name(self) -> str:
        raise NotImplementedError

    def attest(self, start_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def _engine_lost(self, start_id: str, seen: dict[str, Any]) -> None:
        raise NotImplementedError

    def _reference(self) -> tuple[str, Emitted] | None:
        """The reference start's recorded T=0 continuation (None: not recorded, or unreadable)."""
        smoke = self.plan.smoke
        assert smoke is not None
        for event in self.ledger.events(self.ws.registered_seq or 0, stream=f"window/{self.window}",
                                        types=["smoke.result"]):
            q = read_payload(event, p.SmokeResult)
            if q.start != smoke.reference or q.probe != "greedy_identity" or q.outcome == "interrupted":
                continue
            ref = q.evidence.blob if q.evidence is not None else ""
            blob = self.ledger.blob(ref.removeprefix("sha256:"))
            if blob is None:
                return None
            try:
                data = read_json(blob.data, "the reference's evidence", max_bytes=16 << 20)
            except FormatError:
                return None
            emitted = _emitted(data.get("emitted") if isinstance(data, dict) else None)
            return None if emitted is None else (smoke.reference, emitted)
        return None

    def smoke(self, step: Step, result: RunResult) -> None:
        from ..smoke.probes import SmokeSession

        smoke = self.plan.smoke
        assert smoke is not None and step.start is not None
        start = self.plan.start(step.start)
        before = self.attest(start.id)  # the probes speak to this start's engine, or not at all
        if not before["ok"]:
            self._engine_lost(start.id, before)
            return
        model = self._model_name()
        verdicts: list[ProbeVerdict] = []
        probing = time.perf_counter()
        with SmokeSession(self.driver.serving_url, model, smoke, cancel=self.cancel) as session:
            for probe in sorted(smoke.probes, key=lambda name: name != "greedy_identity"):  # greedy first
                if self.cancel.is_set():
                    break  # the probes not begun are not recorded: missing, never passed
                verdict = self._probe(session, probe, start.id)
                verdicts.append(_after_stop(verdict) if self.cancel.is_set() else verdict)
        result.load_s += time.perf_counter() - probing   # the probes' requests, as a wave's
        if not verdicts:
            return
        after = self.attest(start.id)
        if not after["ok"]:  # another engine answered some of them: nothing of this start to record
            self._engine_lost(start.id, after)
            return
        engine = {"before": before, "after": after}
        items: list[Pending] = []
        for verdict in verdicts:
            evidence = Blob(json.dumps({"probe": verdict.probe, "start": start.id, "engine": engine,
                                        **verdict.evidence},
                                       sort_keys=True, default=str).encode(), EVIDENCE_MEDIA_TYPE)
            items.append(("smoke.result", p.SmokeResult(
                start=start.id, role=start.role, probe=verdict.probe, outcome=verdict.outcome,
                kind=verdict.kind, summary=verdict.summary[:1000], checks=verdict.checks,
                reference=verdict.reference, position=verdict.position,
                margin=None if verdict.margin is None else round(verdict.margin, 6),
                evidence=p.BlobRef.of(evidence)), (evidence,)))
            self.say(f"  smoke {start.label} {verdict.probe}: {verdict.outcome} ({verdict.summary})")
        self.append(items)

    def _probe(self, session: SmokeSession, probe: str, start: str) -> ProbeVerdict:
        from ..smoke.probes import ProbeVerdict

        smoke = self.plan.smoke
        assert smoke is not None
        if probe == "greedy_identity":
            reference = None if start == smoke.reference else self._reference()
            if start != smoke.reference and reference is None:
                return ProbeVerdict("greedy_identity", "fail", f"{start}: the reference {smoke.reference} recorded "
                                                               "no T=0 continuation to compare with")
            return session.greedy(start, reference)[0]
        if probe == "structured":
            return session.structured(start)
        if probe == "stop":
            return session.stop(start)
        if probe == "eos":
            return session.eos(start)
        return session.lifecycle(start)


def _after_stop(verdict: ProbeVerdict) -> ProbeVerdict:
    """A probe that ended after the stop signal: recorded as such, its own outcome kept in the checks."""
    from dataclasses import replace

    return replace(verdict, outcome="interrupted",
                   summary=f"after the stop signal (not counted): {verdict.outcome}: {verdict.summary}",
                   checks={**verdict.checks, "outcome_after_stop": verdict.outcome})


HANDLERS: dict[StepKind, StepHandler] = {"smoke": SmokeSteps.smoke}
