"""Window execution: replay, decide the next step, act, record; until decided.

The runner keeps no state of its own. Before each step it folds the ledger's new events
(``runner.state.replay``), asks ``runner.execution.steps.next_step`` what to do, and
performs it through the handler registered for that step kind (``STEP_HANDLERS``:
the opening, start and ending steps of ``opening``, ``starts`` and ``endings``), which
acts through the site's host driver or the measurement client and appends what
happened. SIGINT and SIGTERM cancel the running wave and record ``window.interrupted``;
the runner then ends the window as the plan allows (restore, or finish a chained
close) and decides: never silently.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from ledger.errors import ExternalError, PolicyError, StorageError, TallyError

from ..events import payloads as p
from ..events import read_payload
from ..plan.register import registered_plan
from ..state.causes import ending_causes
from ..state.fold import State, WindowState, admission_blockers, fold
from ..state.replay import replay
from . import endings, opening, smoke, starts
from .appends import RECORD_WAIT_S, Appender
from .capture import check_capture, read_capture
from .clock import BudgetClock, StageClock, parse_time
from .endings import EndingSteps
from .opening import OpeningSteps
from .recorder import CRASH_ENV, CrashHook, RunResult, StepHandler
from .smoke import SmokeSteps
from .starts import StartSteps, block_began, block_ended
from .steps import Context, Step, StepKind, acting_reason, next_step

if TYPE_CHECKING:
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..drivers.base import HostDriver
    from ..measure.family import Prompt

__all__ = ["CRASH_ENV", "STEP_HANDLERS", "RunResult", "WindowRunner", "owner_name", "refuse_unadmitted"]

OPENING_STEPS = frozenset({"preflight", "snapshot", "drain", "hold_open", "placeholder_proof", "quiet_proof"})
SITE_LOCK = "__site-hold__"  # the lock name for opening a HOLD (one window at a time)
MAX_CONSECUTIVE_ERRORS = 3
OPENING_WAIT_S = 120.0  # how long an opening step waits for another window's opening step
LOOP_KINDS = frozenset({"done", "blocked"})  # what the loop itself answers; every other kind has a handler

STEP_HANDLERS: dict[StepKind, StepHandler] = {**opening.HANDLERS, **starts.HANDLERS, **endings.HANDLERS,
                                              **smoke.HANDLERS}


def refuse_unadmitted(state: State, window: str) -> None:
    """``PolicyError`` (one line, exit 1) naming the missing gates when ``window`` is neither admitted nor ended."""
    ws = state.windows.get(window)
    if ws is not None and ws.ending is None and ws.admitted_seq is None and ws.chain_aborted is None:
        blockers = admission_blockers(state, window)
        raise PolicyError(f"window {window} is not admitted: " + ("; ".join(blockers) or ws.phase))


class WindowRunner(OpeningSteps, StartSteps, EndingSteps, SmokeSteps):
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
        chain_production: Path | None = None,
        state: State | None = None,
    ) -> None:
        self.ledger = ledger
        self.signer = signer
        self.window = window
        self.driver = driver
        self.registration = registered_plan(ledger, window)
        self.plan = self.registration.plan
        self.clock = BudgetClock(self.plan.budget, time_scale)
        self.say = say or (lambda _text: None)
        self.on_wave = on_wave
        self.owner = owner or window
        self.state = replay(ledger, state)   # ``state``: one the caller replayed already (only new events fold)
        self.cancel = threading.Event()
        self.signal_name: str | None = None
        self.prompts: dict[str, dict[str, Prompt]] | None = None
        self.model: str | None = None
        self.crash = CrashHook()
        self.held = []
        self.appender = Appender(ledger, signer, floor=self.state.size)
        self.appended = []
        self.recorded = None
        self.step_kind = None
        self.record_wait_s = RECORD_WAIT_S   # how long a run that ends holding refused records retries them
        self.gave_up = False                 # it did, in vain (later tries do not wait again)
        self.host_s = 0.0
        self.last_wave_end: float | None = None
        self.last_attested: tuple[str, int, dict[str, Any]] | None = None
        # a production capture (``--chain-production``): read now, checked against the marker at run
        self.capture = read_capture(chain_production) if chain_production is not None else None

    def refresh(self) -> None:
        """Fold what the ledger gained; while it refuses appends, try the backlog first.

        A ledger that cannot be read now leaves the state as this runner's own appends made it.
        """
        if self.appender.unrecorded and not self.catch_up():
            return   # still refused: the state is what the ledger holds plus the backlog
        try:
            self.state = replay(self.ledger, self.state)
        except (ExternalError, StorageError):
            self.state = fold(self.state, self.appended)
        self.appended = []

    # ------------------------------------------------------------------ running

    def run(self, *, resume: bool = False, abort: bool = False) -> RunResult:
        """Execute (or resume, or abort) the window until it is decided, blocked or escalated."""
        started, cpu = time.perf_counter(), time.thread_time()
        self.refresh()
        ws = self.ws
        if not abort:
            refuse_unadmitted(self.state, self.window)
        hold = self.state.hold
        if hold is not None and hold.owner != self.owner and ws.ending is None:
            raise PolicyError(f"the HOLD is owned by {hold.owner} (seq {hold.seq}); refusing to run")
        other = self.state.acting(self.window)
        if other is not None and not ws.actions and ws.ending is None and not abort:
            raise PolicyError(f"{acting_reason(other)}; refusing to run")
        if ws.ending is None and not ws.actions and not abort:  # nothing done yet: does the site fit?
            from .fit import recorded_fields, refuse_unfit

            marker = self.state.marker
            serving = marker is None or marker.window == self.window
            refuse_unfit(self.plan, self.driver, production_serves=serving,
                         fields=recorded_fields(self.ledger, self.window))
            if self.capture is not None:
                check_capture(self.capture, marker, self.window)
        elif self.capture is not None and ws.ending is None and ws.production_snapshot is None and not abort:
            check_capture(self.capture, self.state.marker, self.window)  # a resume, before it appends anything
        if abort and ws.ending is None:
            self.append([("window.interrupted", p.WindowInterrupted(reason="abort", phase=ws.phase, detail={
                "found_on": "abort", "open_actions": len(ws.open_actions)}), ())])
        elif resume and ws.ending is None and ws.actions and not self._ended_cleanly():
            self.append([("window.interrupted", p.WindowInterrupted(reason="crash", phase=ws.phase, detail={
                "found_on": "resume", "open_actions": len(ws.open_actions)}), ())])
            if not ws.open_actions:  # what serves now? (an open action is re-probed by the step machine)
                self.action("probe", None, {"found_on": "resume"})
        result = RunResult(self.window, None, None, [])
        previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            signal.signal(signal.SIGINT, self._on_signal)
            signal.signal(signal.SIGTERM, self._on_signal)
        try:
            self._loop(result)
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous[0])
                signal.signal(signal.SIGTERM, previous[1])
            held = self._record_backlog()
        if held:
            raise ExternalError(held)
        wall = time.perf_counter() - started
        result.overhead_s = wall - result.measuring_s
        result.host_s = self.host_s
        result.runner_s = wall - result.load_s - result.host_s
        result.runner_cpu_s = time.thread_time() - cpu
        ws = self.ws
        result.ending = ws.ending
        result.interrupted = self.signal_name
        result.measurement = None if ws.measurement_ended is None else ws.measurement_ended.reason
        if ws.ending is not None or result.blocked:
            try:   # the window is over and recorded: a ledger that cannot be read now costs the lines only
                result.causes = ending_causes(self.ledger.events(ws.registered_seq or 0,
                                                                 stream=f"window/{self.window}"))
            except TallyError as exc:
                result.causes = [f"(the causes could not be read from the ledger: {exc})"]
        if ws.decision is not None:
            result.decision = ws.decision.verdict
            result.reasons = list(ws.decision.reason_lines)
        return result

    def _ended_cleanly(self) -> bool:
        """Did the last run stop on purpose (an escalated restore), not by dying?"""
        events = list(self.ledger.events(self.ws.registered_seq or 0, stream=f"window/{self.window}"))
        last = events[-1] if events else None
        return last is not None and last.type == "restore.finished" \
            and read_payload(last, p.RestoreFinished).status == "failed"

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
            self.cancel.set()
            self.say(f"{self.signal_name}: stopping measurement, then ending the window as the plan allows")
        else:
            self.say(f"{signal.Signals(signum).name} again: the window is being ended safely (production is "
                     f"restored as its plan allows); wait for it. If this process is killed, "
                     f"`tally window resume {self.window}` finds where it stopped and restores production")

    def _loop(self, result: RunResult) -> None:
        errors = 0
        while True:
            t0 = time.perf_counter()
            self.refresh()
            result.replay_s += time.perf_counter() - t0
            ws = self.ws
            if self.signal_name is not None and not any(i.reason == "signal" for i in ws.interrupted) \
                    and ws.ending is None:
                self.append([("window.interrupted", p.WindowInterrupted(
                    reason="signal", signal=self.signal_name, phase=ws.phase), ())])
                continue
            step = next_step(self._context(ws))
            result.steps += 1
            if step.kind == "done":
                return
            if step.kind == "blocked":
                result.blocked = step.reason
                return
            if step.kind == "decide" and self._record_backlog() is not None:
                return   # a decision is made from the ledger alone: it waits until the ledger holds the ending
            self.step_kind = step.kind
            try:
                if step.kind in OPENING_STEPS:
                    blocked = self._perform_opening(result)
                    if blocked is not None:
                        result.blocked = blocked
                        return
                else:
                    self.perform(step, result)
                errors = 0
            except Exception as error:
                # Something did not answer (a server, the database) or failed inside the runner:
                # record it and end the window as the plan allows, rather than leave production
                # down in silence.
                errors += 1
                said = str(error) if isinstance(error, TallyError) else f"{type(error).__name__}: {error}"
                self.say(f"error during {step.kind}: {said}"[:2000])
                if errors >= MAX_CONSECUTIVE_ERRORS or ws.ending is not None:
                    raise PolicyError(f"{said[:1000]}; the window is not finished: fix the cause, then "
                                      f"`tally window resume {self.window}` (or `tally window abort`)") from (
                                          None if isinstance(error, TallyError) else error)
                if not any(i.reason == "error" for i in self.ws.interrupted):
                    self.append([("window.interrupted", p.WindowInterrupted(reason="error", phase=ws.phase, detail={
                        "step": step.kind, "error": said[:500]}), ())])
            finally:
                self.step_kind = None
            if step.kind == "restore_failed":
                result.escalated = True
                result.blocked = step.reason
                return

    def _record_backlog(self) -> str | None:
        """Append what the ledger refused, trying for up to ``record_wait_s``; why not, if it still refuses."""
        if not self.appender.unrecorded:
            return None
        wait_s = 0.0 if self.gave_up else self.record_wait_s
        self.say(f"the ledger refuses appends ({self.appender.last_error}); {len(self.appender.unrecorded)} "
                 f"event(s) held: retrying for up to {wait_s:g} s")
        if self.catch_up(wait_s):
            return None
        self.gave_up = True
        ws = self.ws
        where = (f"the window ended {ws.ending} in memory" if ws.ending is not None
                 else f"the window stopped in phase {ws.phase}")
        types = ", ".join(dict.fromkeys(e.type for e in self.appender.unrecorded))
        return (f"the ledger refused {len(self.appender.unrecorded)} event(s) ({types}): "
                f"{self.appender.last_error}; {where}, but the ledger does not say so: once it takes appends, "
                f"`tally window resume {self.window}` re-probes the hosts, restores production if it may "
                "have been touched, and records the ending")

    def perform(self, step: Step, result: RunResult) -> None:
        """Take one step: the handler registered for its kind (what it held recorded at its end)."""
        try:
            STEP_HANDLERS[step.kind](self, step, result)
        finally:
            self.flush_held()

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
        first = ws.clock.first_action
        if first is not None and ws.measurement_ended is None:
            now = self.clock.not_before(self.ledger.now(), ws.clock.last)  # the ledger's clock
            elapsed = self.clock.minutes(parse_time(first), now)
            stages = self._stage_clock(ws, parse_time(first), now) if self.plan.budget.stop_admitting_if_overrun \
                else None
            stop_limit = self.clock.admitting(elapsed, stages)
            current = ws.current_start
            if current is not None and current not in self.plan.smoke_stage_ids:   # the smoke stage is no block
                began = block_began(ws, current)
                if began is not None:
                    block_limit = self.clock.block_over(self.clock.minutes(began, now))
        from ..drivers.base import PLANNED_OPTIONAL_ACTIONS

        return Context(self.plan, self.state, ws, self.driver.hosts, stop_limit, block_limit,
                       frozenset(self.driver.actions) & PLANNED_OPTIONAL_ACTIONS)

    def _stage_clock(self, ws: WindowState, first: datetime, now: datetime) -> StageClock:
        """How long the setup and each begun block have run (window minutes), from the recorded times."""
        blocks: dict[str, float] = {}
        began_first: datetime | None = None
        for start in self.plan.starts:
            began = block_began(ws, start.id)
            if began is None:
                continue
            began_first = began if began_first is None else min(began_first, began)
            blocks[start.id] = self.clock.minutes(began, block_ended(ws, start.id) or now)
        smoke_min: float | None = None
        staged = [began for start in self.plan.stage_starts if (began := block_began(ws, start.id)) is not None]
        if staged:   # the smoke stage of its own: from its first start's arm start to its last one's end (or now)
            last = self.plan.stage_starts[len(staged) - 1].id
            smoke_min = self.clock.minutes(min(staged), block_ended(ws, last) or now)
        return StageClock(self.clock.minutes(first, began_first or now), blocks, smoke_min)


def unhandled_step_kinds() -> set[str]:
    """Step kinds the runner could be asked to take and has no handler for (must be empty)."""
    return set(get_args(StepKind)) - LOOP_KINDS - set(STEP_HANDLERS)


def owner_name() -> str:
    """Who runs: user@host, recorded as the HOLD's owner."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "runner"
    return f"{user}@{socket.gethostname()}"
