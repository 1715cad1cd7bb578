"""Window execution (SPEC 5.5): replay, decide the next step, act, record; until decided.

The runner keeps no state of its own. Before each step it folds the ledger's new events
(``runner.replay``), asks ``runner.steps.next_step`` what to do, does it through the
site's host driver or the measurement client, and appends what happened. Every host
action is ``host.action started`` -> run -> ``finished`` (with the events the outcome
establishes, appended in the same transaction); an action found started and never
finished (a crash) is re-probed before anything else. SIGINT and SIGTERM cancel the
running wave and record ``window.interrupted``; the runner then ends the window as the
plan allows (restore, or finish a chained close) and decides: never silently.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ledger.errors import ExternalError, PolicyError, TallyError
from ledger.store import Blob

from ..decide.inputs import decision_for
from ..events.catalogue import WindowLog, window_event
from ..plan.model import CONTROL_ROLE, Plan
from ..plan.register import WindowNotRegistered, family_prompts, registered_plan
from ..state.fold import WindowState
from ..state.replay import replay
from .clock import BudgetClock, parse_time
from .steps import Context, Step, next_step

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..drivers.base import ActionResult, HostDriver
    from ..measure.family import Prompt
    from ..measure.wave import WaveResult

__all__ = ["CRASH_ENV", "RunResult", "WindowRunner"]

OPENING_STEPS = frozenset({"preflight", "snapshot", "drain", "hold_open", "placeholder_proof", "quiet_proof"})
SITE_LOCK = "__site-hold__"  # the lock name for opening a HOLD (one window at a time)
MAX_CONSECUTIVE_ERRORS = 3
OPENING_WAIT_S = 120.0  # how long an opening step waits for another window's opening step
CRASH_ENV = "TALLY_TEST_CRASH_AFTER"  # test hook: "event.type[:n]" -> SIGKILL after the n-th append of it
Pending = tuple[str, Mapping[str, Any], Sequence[Blob]]


@dataclass
class RunResult:
    window: str
    ending: str | None
    decision: str | None
    reasons: list[str]
    blocked: str | None = None
    escalated: bool = False
    steps: int = 0
    waves: int = 0
    measuring_s: float = 0.0
    overhead_s: float = 0.0
    replay_s: float = 0.0
    wave_gaps_s: list[float] = field(default_factory=list)  # from one wave's end to the next one's start

    def to_json(self) -> dict[str, Any]:
        gaps = sorted(self.wave_gaps_s)
        return {"window": self.window, "ending": self.ending, "decision": self.decision, "reasons": self.reasons,
                "blocked": self.blocked, "escalated": self.escalated, "steps": self.steps, "waves": self.waves,
                "measuring_s": round(self.measuring_s, 4), "overhead_s": round(self.overhead_s, 4),
                "replay_s": round(self.replay_s, 4),
                "wave_gap_ms": {"p50": round(gaps[len(gaps) // 2] * 1000, 3) if gaps else None,
                                "max": round(gaps[-1] * 1000, 3) if gaps else None, "total": round(sum(gaps), 4)}}


class _CrashHook:
    """Kill this process right after the n-th append of an event type (crash tests only)."""

    def __init__(self) -> None:
        spec = os.environ.get(CRASH_ENV, "")
        kind, _, count = spec.partition(":")
        self.kind = kind or None
        self.remaining = int(count or 1)

    def after(self, types: Sequence[str]) -> None:
        if self.kind is None:
            return
        for type_ in types:
            if type_ == self.kind:
                self.remaining -= 1
                if self.remaining <= 0:
                    os.kill(os.getpid(), signal.SIGKILL)


class WindowRunner:
    """Runs one registered, admitted window against a site (a ``HostDriver``)."""

    def __init__(
        self,
        ledger: Ledger,
        signer: Signer,
        window: str,
        driver: HostDriver,
        *,
        time_scale: float = 1.0,
        say: Callable[[str], None] | None = None,
        on_wave: Callable[[int, int, str], None] | None = None,
        owner: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.signer = signer
        self.window = window
        self.driver = driver
        self.registration = registered_plan(ledger, window)
        self.plan: Plan = self.registration.plan
        self.log = WindowLog(ledger, signer, window, self.registration.plan_sha256)
        self.clock = BudgetClock(self.plan.budget, time_scale)
        self.say = say or (lambda _text: None)
        self.on_wave = on_wave
        self.owner = owner or window
        self.state = replay(ledger)
        self.cancel = threading.Event()
        self.signal_name: str | None = None
        self._prompts: dict[str, dict[str, Prompt]] | None = None
        self._model: str | None = None
        self._crash = _CrashHook()
        self._last_wave_end: float | None = None

    # ------------------------------------------------------------------ state

    @property
    def ws(self) -> WindowState:
        ws = self.state.windows.get(self.window)
        if ws is None:
            raise WindowNotRegistered(self.window)
        return ws

    def refresh(self) -> None:
        self.state = replay(self.ledger, self.state)

    def _append(self, items: Sequence[Pending]) -> list[Event]:
        events = [window_event(self.window, self.registration.plan_sha256, t, p, b, ledger=self.ledger)
                  for t, p, b in items]
        stored = self.ledger.append_many(events, self.signer)
        self._crash.after([e.type for e in stored])
        return stored

    # ------------------------------------------------------------------ running

    def run(self, *, resume: bool = False, abort: bool = False) -> RunResult:
        """Execute (or resume, or abort) the window until it is decided, blocked or escalated."""
        self.refresh()
        ws = self.ws
        if ws.ending is None and ws.admitted_seq is None and ws.chain_aborted is None and not abort:
            from ..state.fold import admission_blockers

            blockers = admission_blockers(self.state, self.window)
            raise PolicyError(f"window {self.window} is not admitted: " + ("; ".join(blockers) or ws.phase))
        hold = self.state.hold
        if hold is not None and hold.get("owner") != self.owner and ws.ending is None:
            raise PolicyError(f"the HOLD is owned by {hold.get('owner')} (seq {hold.get('seq')}); refusing to run")
        if abort and ws.ending is None:
            self._append([("window.interrupted", {"reason": "abort", "phase": ws.phase, "detail": {
                "found_on": "abort", "open_actions": len(ws.open_actions)}}, ())])
        elif resume and ws.ending is None and ws.actions and not self._ended_cleanly():
            self._append([("window.interrupted", {"reason": "crash", "phase": ws.phase, "detail": {
                "found_on": "resume", "open_actions": len(ws.open_actions)}}, ())])
        result = RunResult(self.window, None, None, [])
        previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            signal.signal(signal.SIGINT, self._on_signal)
            signal.signal(signal.SIGTERM, self._on_signal)
        started = time.perf_counter()
        try:
            self._loop(result)
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous[0])
                signal.signal(signal.SIGTERM, previous[1])
        result.overhead_s = time.perf_counter() - started - result.measuring_s
        ws = self.ws
        result.ending = ws.ending
        if ws.decision is not None:
            result.decision = ws.decision.get("result")
            result.reasons = list(ws.decision.get("reasons") or [])
        return result

    def _ended_cleanly(self) -> bool:
        """Did the last run stop on purpose (an escalated restore), not by dying?"""
        events = list(self.ledger.events(self.ws.registered_seq or 0, stream=f"window/{self.window}"))
        last = events[-1] if events else None
        return last is not None and last.type == "restore.finished" and last.payload.get("status") == "failed"

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
            self.cancel.set()
            self.say(f"{self.signal_name}: stopping measurement, then ending the window as the plan allows")
        else:
            self.say(f"{signal.Signals(signum).name} again: the window is being ended; wait for it")

    def _loop(self, result: RunResult) -> None:
        errors = 0
        while True:
            t0 = time.perf_counter()
            self.refresh()
            result.replay_s += time.perf_counter() - t0
            ws = self.ws
            if self.signal_name is not None and not any(i.get("reason") == "signal" for i in ws.interrupted) \
                    and ws.ending is None:
                self._append([("window.interrupted", {"reason": "signal", "signal": self.signal_name,
                                                      "phase": ws.phase}, ())])
                continue
            step = next_step(self._context(ws))
            result.steps += 1
            if step.kind == "done":
                return
            if step.kind == "blocked":
                result.blocked = step.reason
                return
            try:
                if step.kind in OPENING_STEPS:
                    blocked = self._perform_opening(result)
                    if blocked is not None:
                        result.blocked = blocked
                        return
                else:
                    self.perform(step, result)
                errors = 0
            except TallyError as error:
                # Something did not answer (a server, the database): record it and end the
                # window as the plan allows, rather than leave production down in silence.
                errors += 1
                self.say(f"error during {step.kind}: {error}")
                if errors >= MAX_CONSECUTIVE_ERRORS or ws.ending is not None:
                    raise PolicyError(f"{error}; the window is not finished: fix the cause, then "
                                      f"`tally window resume {self.window}` (or `tally window abort`)") from None
                if not any(i.get("reason") == "error" for i in ws.interrupted):
                    self._append([("window.interrupted", {"reason": "error", "phase": ws.phase, "detail": {
                        "step": step.kind, "error": str(error)[:500]}}, ())])
            if step.kind == "restore_failed":
                result.escalated = True
                result.blocked = step.reason
                return

    def _perform_opening(self, result: RunResult) -> str | None:
        """Take an opening step under the site-wide opening lock (one window opens a HOLD at a
        time): wait for the lock, replay, decide again, act. Returns why it is blocked, if so."""
        from .lock import window_lock

        with window_lock(self.ledger, SITE_LOCK, wait_s=OPENING_WAIT_S):
            self.refresh()
            step = next_step(self._context(self.ws))
            if step.kind == "blocked":
                return step.reason
            self.perform(step, result)
        return None

    def _context(self, ws: WindowState) -> Context:
        stop_limit = block_limit = None
        first = ws.clock.get("first_action")
        if first is not None and ws.measurement_ended is None:
            now = datetime.now(UTC)
            elapsed = self.clock.minutes(parse_time(first), now)
            stop_limit = self.clock.admitting(elapsed)
            current = ws.current_start
            if current is not None:
                began = self._block_began(ws, current)
                if began is not None:
                    block_limit = self.clock.block_over(self.clock.minutes(began, now))
        return Context(self.plan, self.state, ws, self.driver.hosts, stop_limit, block_limit)

    @staticmethod
    def _block_began(ws: WindowState, start: str) -> datetime | None:
        """When the start's engine came up (its start_arm, else its start.began)."""
        for item in ws.finished:
            if item["action"] == "start_arm" and item.get("start") == start and item["ok"] and item.get("time"):
                return parse_time(item["time"])
        began = (ws.starts.get(start) or {}).get("began_time")
        return parse_time(began) if began else None

    # ------------------------------------------------------------------ host actions

    def action(
        self,
        name: str,
        host: str | None,
        params: Mapping[str, Any] | None = None,
        *,
        start: str | None = None,
        probe_of: str | None = None,
        then: Callable[[ActionResult], list[Pending]] | None = None,
    ) -> ActionResult:
        """``host.action started`` -> run it -> ``finished`` plus what it established, atomically."""
        from ..drivers.base import ActionResult

        action_id = uuid.uuid4().hex[:16]
        full = {"window": self.window, **(params or {})}
        if start is not None:
            full.setdefault("start", start)
        started: dict[str, Any] = {"host": host or "site", "action": name, "phase": "started", "action_id": action_id,
                                   "detail": {"start": start, "params": _plain(params or {})}}
        if probe_of is not None:
            started["probe_of"] = probe_of
        self._append([("host.action", started, ())])
        try:
            result = self.driver.run(name, host, full)
        except ExternalError as exc:
            result = ActionResult(action=name, host=host, ok=False, exit_code=None, duration_s=0.0, timed_out=False,
                                  stdout=b"", stderr=str(exc).encode(), facts={"error": str(exc)})
        output = Blob(json.dumps({"stdout": result.stdout.decode("utf-8", "replace"),
                                  "stderr": result.stderr.decode("utf-8", "replace")}, sort_keys=True).encode(),
                      "application/json")
        finished: dict[str, Any] = {
            "host": host or "site", "action": name, "phase": "finished", "action_id": action_id,
            "exit_code": result.exit_code, "ok": bool(result.ok), "duration_s": round(result.duration_s, 6),
            "output": output.ref(), "detail": {**_plain(result.facts), "start": start,
                                               "timed_out": bool(result.timed_out)},
        }
        if probe_of is not None:
            finished["probe_of"] = probe_of
        items: list[Pending] = [("host.action", finished, (output,))]
        if then is not None and result.ok:
            items += then(result)
        self._append(items)
        verdict = "ok" if result.ok else f"FAILED ({result.facts.get('error') or result.exit_code})"
        self.say(f"  {name}{' ' + host if host else ''}{' ' + start if start else ''}: {verdict}")
        return result

    # ------------------------------------------------------------------ steps

    def perform(self, step: Step, result: RunResult) -> None:
        handler = getattr(self, f"_do_{step.kind}")
        handler(step, result)

    def _do_probe(self, step: Step, _r: RunResult) -> None:
        self.say(f"re-probing: {step.reason}")
        self.action("probe", None, {"probed_action": step.args.get("action")}, probe_of=step.args["probe_of"])

    def _do_preflight(self, _s: Step, _r: RunResult) -> None:
        self.say(f"window {self.window}: preflight")
        self.action("preflight", None, {"marker": bool(self.state.marker)})

    def _do_placeholder_proof(self, step: Step, _r: RunResult) -> None:
        self.action("placeholder_proof", step.host, {})

    def _do_quiet_proof(self, _s: Step, _r: RunResult) -> None:
        self.action("quiet_proof", None, {})

    def _do_drain(self, _s: Step, _r: RunResult) -> None:
        self.action("drain", None, {}, then=lambda res: [
            ("production.state", {"state": "down", "proof": {"action": "drain", **_plain(res.facts)}}, ())])

    def _do_hold_open(self, step: Step, _r: RunResult) -> None:
        self._append([("hold.opened", {"owner": self.owner, "hosts": list(self.driver.hosts),
                                       "from_marker": bool(step.args.get("from_marker"))}, ())])
        self.say(f"HOLD opened by {self.owner}")

    def _do_snapshot(self, step: Step, _r: RunResult) -> None:
        marker = self.state.marker
        if step.args.get("from_marker") and marker is not None:
            sha = marker.get("production_snapshot_sha256")
            self._append([("production.snapshot", {"sha256": sha, "source": "marker",
                                                   "identity": {"marker_window": marker.get("window"),
                                                                "marker_seq": marker.get("seq")}}, ())])
            return
        self.action("snapshot", None, {}, then=lambda res: [
            ("production.snapshot", {"sha256": res.facts["snapshot_sha256"], "source": "drain",
                                     "identity": _plain(res.facts.get("identity") or {})}, ())])

    def _arm_params(self, start_id: str) -> dict[str, Any]:
        start = self.plan.start(start_id)
        arm = self.plan.arm(start.role)
        return {"role": start.role, "arm": arm.name, "arm_config": arm.to_json()}

    def _do_start_arm(self, step: Step, _r: RunResult) -> None:
        assert step.start is not None
        self.say(f"start {self.plan.start(step.start).label}")
        self._model = None
        self.action("start_arm", None, self._arm_params(step.start), start=step.start)

    def _do_start_began(self, step: Step, _r: RunResult) -> None:
        assert step.start is not None
        start = self.plan.start(step.start)
        arm = self.plan.arm(start.role)
        reported = self._observed_spec(step.start)
        observed = reported if reported is not None else arm.speculative

        def began(res: ActionResult) -> list[Pending]:
            from ..gates.spec import spec_sha256

            return [("start.began", {
                "start": start.id, "role": start.role, "clock_cap_mhz": res.facts.get("clock_cap_mhz"),
                "spec_config_sha256": spec_sha256(observed), "spec_config": _plain(observed),
                "config_digest": arm.config_digest,
                "identity": {"arm": arm.name, "log_line": res.facts.get("log_line"),
                             "spec_config_source": "host" if reported is not None else "declared (host reported none)"},
            }, ())]

        self.action("read_clock_cap", None, self._arm_params(step.start), start=step.start, then=began)

    def _observed_spec(self, start_id: str) -> dict[str, Any] | None:
        """The speculative config the host reported when it started this start's engine."""
        engine = self.ws.engine or {}
        config = engine.get("speculative_config") if engine.get("start") == start_id else None
        return dict(config) if isinstance(config, dict) else None

    def _do_spec_gate(self, step: Step, _r: RunResult) -> None:
        from ..gates.admission import record_gate
        from ..gates.spec import check_standard_spec

        assert step.start is not None
        start = self.plan.start(step.start)
        arm = self.plan.arm(start.role)
        observed = self._observed_spec(step.start)
        if observed is None:  # fail closed: what the host did not report cannot be checked
            from ..gates.spec import SpecResult

            checked = SpecResult("FAIL", {"start": start.id, "role": start.role, "config": None,
                                          "failures": ["the host reported no speculative config for this start"]},
                                 ("the host reported no speculative config for this start",))
        else:
            checked = check_standard_spec(start.id, start.role, observed, arm.speculative)
        record_gate(self.ledger, self.signer, self.window, "standard_spec", checked.verdict, checked.evidence,
                    commit=self.plan.commit, start=start.id, summary="; ".join(checked.failures) or "standard",
                    auto_admit=False)
        self._crash.after(["gate.result"])
        self.say(f"  standard_spec {start.label}: {checked.verdict}")

    def _do_warmup(self, step: Step, _r: RunResult) -> None:
        assert step.start is not None
        start_id = step.start
        self.action("warmup", None, self._arm_params(start_id), start=start_id, then=lambda res: [
            ("warmup.done", {"start": start_id, "cold_ttft_s": res.facts.get("ttft_cold_s"),
                             "warm_ttft_s": res.facts.get("ttft_warm_s"),
                             "requests": int(res.facts.get("requests", 0) or 0)}, ())])

    def _prompts_for(self, family: str) -> dict[str, Prompt]:
        if self._prompts is None:
            self._prompts = family_prompts(self.ledger, self.registration)
        return self._prompts[family]

    def _model_name(self) -> str:
        if self._model is None:
            from ..measure.wave import list_models

            models = list_models(self.driver.serving_url)
            if not models:
                raise ExternalError(f"{self.driver.serving_url} lists no model")
            self._model = models[0]
        return self._model

    def _do_wave(self, step: Step, result: RunResult) -> None:
        from ..measure.wave import measure_wave

        wave = step.wave
        assert wave is not None and step.start is not None
        family = self._prompts_for(wave.family)
        prompts = [family[pid] for pid in wave.prompt_ids]
        ws = self.ws
        now = datetime.now(UTC)
        first = ws.clock.get("first_action")
        elapsed = self.clock.minutes(parse_time(first) if first else None, now)
        began = self._block_began(ws, step.start)
        block = self.clock.minutes(began, now) if began else None
        cut_s, cut = self.clock.wave_cut_s(elapsed, block)
        # Plan deadlines are in window seconds; the site's time scale makes them real ones.
        wave_deadline = self.plan.measurement.wave_deadline_s * self.clock.time_scale
        request_deadline = self.plan.measurement.request_deadline_s * self.clock.time_scale
        deadline = min(wave_deadline, cut_s) if cut_s > 0 else 0.001
        sampling = self.plan.sampling
        t0 = time.perf_counter()
        if self._last_wave_end is not None:
            result.wave_gaps_s.append(t0 - self._last_wave_end)
        measured = measure_wave(
            self.driver.serving_url, self.driver.metrics_urls[0] if self.driver.metrics_urls else None, prompts,
            model=self._model_name(), max_tokens=wave.max_tokens, seed=wave.seed, concurrency=wave.concurrency,
            deadline_s=request_deadline, wave_deadline_s=deadline,
            ignore_eos=sampling.ignore_eos, priority=sampling.priority, family=wave.family,
            temperature=sampling.temperature, top_p=sampling.top_p, cancel=self.cancel,
        )
        self._last_wave_end = time.perf_counter()
        spent = self._last_wave_end - t0
        result.measuring_s += spent
        result.waves += 1
        items = [self._wave_event(step.start, wave.cell, wave.repeat, wave.wave, measured)]
        cut_by_budget = deadline < wave_deadline and spent >= deadline * 0.98
        if cut_by_budget and cut is not None and not self.cancel.is_set():
            items.append(("budget.decision", {
                "action": cut.action, "reason": cut.reason, "elapsed_min": round(self.clock.minutes(
                    parse_time(first) if first else None, datetime.now(UTC)), 3),
                "limit_min": cut.at_min, "start": step.start if cut.action == "truncate_block" else None,
                "cell": wave.cell}, ()))
        self._append(items)
        if self.on_wave is not None:
            self.on_wave(self.ws.waves, len(self.plan.waves), f"{step.start} {wave.cell} wave {wave.wave}")

    def _wave_event(self, start: str, cell: str, repeat: int, wave: int, measured: WaveResult) -> Pending:
        records = Blob(measured.records_jsonl(), "application/x-ndjson")
        payload = {"start": start, "cell": cell, "repeat": repeat, "wave": wave, **measured.summary(),
                   "records": records.ref()}
        return ("wave.measured", payload, (records,))

    def _do_budget(self, step: Step, _r: RunResult) -> None:
        limit = step.limit
        assert limit is not None
        ws = self.ws
        first = ws.clock.get("first_action")
        elapsed = self.clock.minutes(parse_time(first) if first else None, datetime.now(UTC))
        self._append([("budget.decision", {"action": limit.action, "reason": limit.reason,
                                           "elapsed_min": round(elapsed, 3), "limit_min": limit.at_min,
                                           "start": step.start}, ())])
        self.say(f"budget: {limit.action}: {limit.reason}")

    def _do_end_start(self, step: Step, _r: RunResult) -> None:
        assert step.start is not None
        self._last_wave_end = None  # the gap to the next start's first wave is host work, not overhead
        start = self.plan.start(step.start)
        info = self.ws.starts.get(start.id) or {}
        lost = bool(step.args.get("lost"))
        failed = bool(step.args.get("failed"))
        truncated = bool(step.args.get("truncated"))
        if not lost:
            cap = info.get("clock_cap_mhz")

            def thermal(res: ActionResult) -> list[Pending]:
                current = res.facts.get("current_clock_mhz")
                if isinstance(current, int) and isinstance(cap, int) and current < cap:
                    return [("thermal.event", {"host": "site", "kind": "dial_back", "clock_cap_mhz": current,
                                               "detail": {"start": start.id, "start_cap_mhz": cap}}, ())]
                return []

            self.action("read_clock_cap", None, self._arm_params(start.id), start=start.id, then=thermal)
        ended: dict[str, Any] = {"start": start.id, "role": start.role, "ok": not (lost or failed),
                                 "truncated": truncated, "reason": step.reason}

        def finish(_res: ActionResult | None = None) -> list[Pending]:
            items: list[Pending] = [("start.ended", ended, ())]
            items += self._archive_items(start.id, start.role)
            return items

        if lost:
            self._append(finish())
            return
        res = self.action("stop_arm", None, self._arm_params(start.id), start=start.id, then=finish)
        if not res.ok:
            ended["ok"] = False
            ended["reason"] = f"stop_arm failed: {res.facts.get('error') or res.exit_code}"
            self._append(finish())

    def _archive_items(self, start_id: str, role: str) -> list[Pending]:
        if role != CONTROL_ROLE.get(self.plan.mode) or self.plan.protocol != "win2-v1":
            return []
        items: list[Pending] = []
        info = self.ws.starts.get(start_id) or {}
        for cell in self.plan.cells:
            if not cell.decision:
                continue
            figures = self._cell_figures(start_id, cell.name)
            if figures is None:
                continue
            items.append(("archive.control_start", {
                "start": start_id, "role": role, "cell": cell.name, "max_tokens": self.plan.sampling.max_tokens,
                "commit": self.plan.commit, "clock_cap_mhz": info.get("clock_cap_mhz"), "figures": figures}, ()))
        return items

    def _cell_figures(self, start_id: str, cell: str) -> dict[str, Any] | None:
        rounds = accepted = 0
        decode = client_tokens = client_s = 0.0
        ttfts: list[float] = []
        waves = 0
        for event in self.ledger.events(self.ws.registered_seq or 0, stream=f"window/{self.window}",
                                        types=["wave.measured"]):
            p = event.payload
            if p["start"] != start_id or p["cell"] != cell:
                continue
            c = p["counters"]
            if c.get("rounds") is None or c.get("accepted") is None or c.get("decode_s") is None:
                return None
            rounds += c["rounds"]
            accepted += c["accepted"]
            decode += c["decode_s"]
            client_tokens += p["client"]["tokens_after_first"]
            client_s += p["client"]["decode_s"]
            ttfts += p["client"]["ttft_s"]
            waves += 1
        if not waves or not rounds or not decode:
            return None
        return {"pooled_rate_tps": (rounds + accepted) / decode, "accepted_per_round": accepted / rounds,
                "ms_per_round": 1000 * decode / rounds, "decode_tps": client_tokens / client_s if client_s else None,
                "ttft_s": sum(ttfts) / len(ttfts) if ttfts else None, "waves": waves}

    def _do_measurement_end(self, step: Step, _r: RunResult) -> None:
        why = step.args.get("why", "complete")
        self._append([("measurement.ended", {"reason": why, "waves": self.ws.waves}, ())])
        self.say(f"measurement ended ({why}): {step.reason}")

    def _do_chain_abort(self, step: Step, _r: RunResult) -> None:
        marker = self.state.marker or {}
        self._append([("chain.aborted", {"reason": step.reason, "marker_window": marker.get("window")}, ())])
        self.say(f"chain aborted: {step.reason}")

    def _snapshot_sha(self) -> str | None:
        ws = self.ws
        if ws.production_snapshot:
            return ws.production_snapshot
        marker = self.state.marker
        return marker.get("production_snapshot_sha256") if marker else None

    def _do_restore(self, step: Step, _r: RunResult) -> None:
        sha = self._snapshot_sha()
        attempt = int(step.args.get("attempt", 1))
        self.say(f"restore (attempt {attempt})")
        params = {"snapshot_sha256": sha} if sha else {}
        self.action("restore", None, params, then=lambda res: [
            ("restore.finished", {"status": "ok", "attempts": attempt,
                                  **({"production_snapshot_sha256": sha} if sha else {}),
                                  "detail": _plain(res.facts)}, ())])

    def _do_restore_failed(self, step: Step, _r: RunResult) -> None:
        sha = self._snapshot_sha()
        self._append([("restore.finished", {
            "status": "failed", "attempts": int(step.args.get("attempts", 0)),
            **({"production_snapshot_sha256": sha} if sha else {}),
            "detail": {"escalated": True, "reason": step.reason,
                       "next": "fix the site, then `tally window resume` retries the restore"}}, ())])
        self.say(f"RESTORE ESCALATED: {step.reason}; the HOLD stays with {self.owner}")

    def _do_watch(self, _s: Step, _r: RunResult) -> None:
        res = self.action("watch", None, {"snapshot_sha256": self._snapshot_sha()} if self._snapshot_sha() else {},
                          then=lambda r: [("watch.result", {"verdict": r.facts.get("watch", "PASS"),
                                                            "evidence": _plain(r.facts)}, ())])
        if not res.ok:
            self._append([("watch.result", {"verdict": "FAIL", "evidence": _plain(res.facts)}, ())])

    def _do_placeholder_down(self, step: Step, _r: RunResult) -> None:
        host = step.host
        self.action("placeholder_down", host, {}, then=lambda res: [
            ("placeholder.down", {"host": host, "proof": _plain(res.facts)}, ())])

    def _do_marker_clear(self, step: Step, _r: RunResult) -> None:
        self._append([("chain.marker.cleared", {"production_snapshot_sha256": step.args.get("sha"),
                                                "watch_seq": step.args.get("watch_seq")}, ())])
        self.say("chain marker cleared (watch PASS)")

    def _do_restore_close(self, step: Step, _r: RunResult) -> None:
        """Production up, HOLD closed, window closed: one transaction."""
        items: list[Pending] = []
        if step.args.get("production_up"):
            items.append(("production.state", {"state": "up", "proof": {"watch_seq": step.args.get("watch_seq")}},
                          ()))
        if step.args.get("hold"):
            items.append(("hold.closed", {"owner": self.owner, "reason": step.args["ending"]}, ()))
        items.append(("window.closed", {"ending": step.args["ending"], "summary": step.args.get("summary", "")},
                      ()))
        self._append(items)
        self.say(str(step.args.get("summary", "")))

    def _do_chained_close(self, step: Step, _r: RunResult) -> None:
        """HOLD closed, marker set, window closed: one transaction (never down with neither)."""
        items: list[Pending] = []
        if step.args.get("hold"):
            items.append(("hold.closed", {"owner": self.owner, "reason": "chained"}, ()))
        items.append(("chain.marker.set", {"production_snapshot_sha256": self._snapshot_sha(),
                                           "hosts": list(self.driver.hosts)}, ()))
        items.append(("window.closed", {"ending": "chained", "summary": step.args.get("summary", "")}, ()))
        self._append(items)
        self.say(str(step.args.get("summary", "")))

    def _do_close(self, step: Step, _r: RunResult) -> None:
        self._append([("window.closed", {"ending": step.args["ending"], "summary": step.args.get("summary", "")}, ())])
        self.say(str(step.args.get("summary", "")))

    def _do_placeholder_up(self, step: Step, _r: RunResult) -> None:
        host = step.host
        self.action("placeholder_up", host, {}, then=lambda res: [
            ("placeholder.up", {"host": host, "proof": _plain(res.facts)}, ())])

    def _do_fence(self, step: Step, _r: RunResult) -> None:
        self.action("fence", step.host, {})

    def _do_experiment_stop(self, _s: Step, _r: RunResult) -> None:
        self.action("experiment_stop", None, {})

    def _do_closing_quiet_proof(self, _s: Step, _r: RunResult) -> None:
        self.action("quiet_proof", None, {})

    def _do_production_down_proof(self, _s: Step, _r: RunResult) -> None:
        self.action("production_down_proof", None, {}, then=lambda res: [
            ("production.state", {"state": "down", "proof": {"action": "production_down_proof",
                                                             **_plain(res.facts)}}, ())])

    def _do_closing_placeholder_proof(self, step: Step, _r: RunResult) -> None:
        self.action("placeholder_proof", step.host, {})

    def _do_decide(self, _s: Step, _r: RunResult) -> None:
        events = list(self.ledger.events(stream=f"window/{self.window}"))
        archive = list(self.ledger.events(stream="archive", types=["archive.control_start"]))
        built, outcome = decision_for(self.plan, events, archive)  # archive bounded by window.closed
        self._append([("decision.recorded", {"rule": self.plan.protocol, "params": built.input["params"],
                                             "inputs_digest": built.digest, "input": built.input,
                                             "result": outcome}, ())])
        self.say(f"decision: {outcome.get('decision')}")


def _plain(value: Any) -> Any:
    """A JSON-safe copy (tuples to lists, non-finite floats to None, unknown objects to str)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


def owner_name() -> str:
    """Who runs: user@host, recorded as the HOLD's owner."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "runner"
    return f"{user}@{socket.gethostname()}"
