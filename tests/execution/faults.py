"""The fault-injection harness's machinery: a site and a ledger that fail on cue, and one case's checks.

A clean run of a window through ``FaultySite`` and ``FaultyLedger`` (with no fault) records
every point the step machine led it through: each host action the driver ran (``Act``: the
step kind, the action, the host) and each append the runner made (``Append``: the step kind
and the events it carried, ``host.action`` by action and phase). ``fault_points`` keeps the
first occurrence of each distinct point: a step that repeats (a wave, a start) is covered
once, a new step or a new host action is covered the first time the step machine takes it.

``FaultySite`` wraps the site's driver and, at one ``Act``, makes the site's output
unreadable (facts no event can carry, 2 MiB of stderr) or raises after acting, before the
runner records anything. ``FaultyLedger`` wraps the ledger and refuses appends from one
``Append`` on, as SQLite does under a lock held past the busy timeout (``ExternalError``)
or on a full disk (``StorageError``): for a few attempts (the runner's retries fail, then
the ledger recovers) or for the rest of the process.

``run_case`` runs one case from a ``Harness`` (the gated ledger to copy, the simulator's
config, the key: what a worker process can receive) and returns what went wrong.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ledger.errors import ExternalError, StorageError, TallyError
from ledger.keys import Signer, load_signer
from ledger.store import Ledger
from ledger.stored import verify_ledger
from runner.audit.full import run_audit
from runner.drivers.base import ActionResult, HostDriver
from runner.drivers.sim import SimDriver
from runner.execution.window import WindowRunner
from runner.sim import start as start_sim
from runner.state.replay import replay

from .worlds import TIME_SCALE, small


def tiny_win2(text: str) -> str:
    """Seed 000's controlled window: one cell, one family, two repeats, tiny outputs, no smoke probes."""
    text = small(text, max_tokens=8)
    text = re.sub(r"repeats = \d+", "repeats = 2", text).replace("greedy_check = true", "")
    return re.sub(r'\[\[families\]\]\nname = "filings"\n(?:(?!\[).*\n)*', "", text)


def tiny_pp3(text: str) -> str:
    """Seed 003's ABBA window in its simple shape: the short cell only, one family, tiny outputs."""
    text = text.replace("max_tokens = 1024", "max_tokens = 8")
    text = re.sub(r'\[\[cells\]\]\nname = "(32k|150k)"\ncontext = "\w+"\n', "", text)
    text = re.sub(r'orders = \{ short = (\["\w+-short-01"\]), 32k = \[[^]]*\], 150k = \[[^]]*\] \}',
                  r"orders = { short = \1 }", text)
    return re.sub(r'\[\[families\]\]\nname = "filings"\n(?:(?!\[).*\n)*', "", text)


MIB = 1 << 20
Mode = Literal["unreadable", "raise", "refuse", "refuse_forever"]
ACT_MODES: tuple[Mode, ...] = ("unreadable", "raise")
APPEND_MODES: tuple[Mode, ...] = ("refuse", "refuse_forever")


@dataclass(frozen=True)
class Act:
    step: str
    action: str
    host: str | None

    def __str__(self) -> str:
        return f"{self.step}: {self.action}{' ' + self.host if self.host else ''}"


@dataclass(frozen=True)
class Append:
    step: str
    events: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.step}: append [{', '.join(self.events)}]"


Point = Act | Append


def step_of(runner: WindowRunner | None) -> str:
    kind = runner.step_kind if runner is not None else None
    return kind or "resume"   # outside the step loop: what a run records before its first step


def signature(items: Any) -> tuple[str, ...]:
    out = []
    for item in items:
        if item.type == "host.action":
            out.append(f"host.action:{item.payload['action']}:{item.payload['phase']}")
        else:
            out.append(item.type)
    return tuple(out)


class FaultySite:
    """A driver that records every action it runs and, at ``fault`` (its first occurrence), misbehaves."""

    def __init__(self, driver: HostDriver, fault: Act | None = None, mode: Mode | None = None) -> None:
        self._driver = driver
        self.fault, self.mode = fault, mode
        self.runner: WindowRunner | None = None
        self.seen: list[Act] = []
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def run(self, action: str, host: str | None, params: Mapping[str, Any]) -> ActionResult:
        point = Act(step_of(self.runner), action, host)
        self.seen.append(point)
        result = self._driver.run(action, host, params)
        if point == self.fault and not self.fired:
            self.fired = True
            if self.mode == "raise":
                raise RuntimeError(f"injected: the runner fails right after {action} acted")
            # the site's output, unreadable: facts no event can carry, and 2 MiB of stderr
            return dataclasses.replace(result, stderr=b"\xff" * (2 * MIB), facts={
                **result.facts, "drained_at_ns": 1764600000000000000, "note": "\ud800", "log": "x" * (2 * MIB)})
        return result


class FaultyLedger:
    """A ledger that records every append and, from ``fault`` on, refuses appends (``failures`` attempts, or all)."""

    def __init__(self, book: Ledger, fault: Append | None = None, mode: Mode | None = None,
                 failures: int = 5) -> None:
        self._book = book
        self.fault, self.mode, self.failures = fault, mode, failures
        self.runner: WindowRunner | None = None
        self.seen: list[Append] = []
        self.refused = 0
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._book, name)

    def append_many(self, items: Any, signer: Any) -> Any:
        point = Append(step_of(self.runner), signature(items))
        if not self.armed and point == self.fault:
            self.armed = True
        if self.armed and (self.mode == "refuse_forever" or self.refused < self.failures):
            self.refused += 1
            if self.refused % 2:
                raise ExternalError("database is locked by another writer past the busy timeout (injected); retry")
            raise StorageError("the database failed: database or disk is full (injected)")
        self.seen.append(point)
        return self._book.append_many(items, signer)


def fault_points(seen: list[Any]) -> list[Any]:
    """The first occurrence of each distinct point, in order."""
    return list(dict.fromkeys(seen))


@dataclass
class Case:
    """One run of a window from a gated ledger (a copy of the template) against a fresh simulator."""

    directory: Path
    book: Ledger
    sim: Any
    driver: SimDriver

    def close(self) -> None:
        self.driver.close()
        self.sim.stop()
        self.book.close()


def new_case(template: Path, sim_config: Any, directory: Path) -> Case:
    directory.mkdir(parents=True)
    shutil.copy(template, directory / "tally.db")
    sim = start_sim(sim_config, port=0)
    driver = SimDriver.for_handle(sim)
    return Case(directory, Ledger(f"sqlite:///{directory / 'tally.db'}"), sim, driver)


def runner_for(book: Any, signer: Any, window: str, driver: Any, time_scale: float) -> WindowRunner:
    """A runner with the harness's short waits (retries 10 ms apart, 0.5 s to record a backlog at the end)."""
    runner = WindowRunner(book, signer, window, driver, time_scale=time_scale)
    runner.appender.backoff_s = (0.01,)
    runner.record_wait_s = 0.5
    for wrapper in (book, driver):
        if isinstance(wrapper, FaultySite | FaultyLedger):
            wrapper.runner = runner
    return runner


@dataclass(frozen=True)
class Harness:
    """What a case needs, as a worker process can receive it: the gated ledger to copy, the simulator's
    config, the signing key's file, the window."""

    window: str
    template: Path
    sim_config: Any
    key: Path

    def signer(self) -> Signer:
        return load_signer(self.key)


def case_in_worker(harness: Harness, index: int, point: Point, mode: Mode, directory: Path) -> tuple[int, list[str]]:
    return index, run_case(harness, point, mode, directory)


def _events(book: Any, window: str, type_: str | None = None) -> list[dict[str, Any]]:
    return [e.payload for e in book.events(stream=f"window/{window}", types=[type_] if type_ else None)]


def _serving(sim: Any) -> str | None:
    """Why production does not serve, by the simulator's own account (None: it serves)."""
    host = sim.state()
    engine = host.get("engine") or {}
    if host.get("production") != "up" or not engine.get("production"):
        return f"production {host.get('production')}, engine {engine.get('arm')} (production: {engine.get('production')})"
    return None


def run_case(harness: Harness, point: Point, mode: Mode, directory: Path) -> list[str]:
    """Run the window with ``mode`` at ``point``; what went wrong (empty: nothing)."""
    case = new_case(harness.template, harness.sim_config, directory)
    problems: list[str] = []
    try:
        site = FaultySite(case.driver, point if isinstance(point, Act) else None, mode)
        book = FaultyLedger(case.book, point if isinstance(point, Append) else None, mode)
        try:
            runner_for(book, harness.signer(), harness.window, site, TIME_SCALE).run()
            raised = None
        except TallyError as exc:
            raised = str(exc)
        if isinstance(point, Act) and not site.fired:
            return [f"the fault never fired (the window took another path): {site.seen[-3:]}"]
        if isinstance(point, Append) and not book.armed:
            return ["the fault never fired (the window took another path)"]
        down = _serving(case.sim)
        if down is not None:
            problems.append(f"after the faulted run, production does not serve: {down} (run: {raised})")
        if mode == "refuse_forever" and (raised is None or "the ledger refused" not in raised):
            problems.append(f"the run did not say what it could not record: {raised}")
        if replay(case.book).windows[harness.window].decision is None:
            # the run could not finish (the ledger was gone): the operator, the ledger healthy again,
            # aborts the window; the next runner re-probes what it left open and restores
            try:
                runner_for(case.book, harness.signer(), harness.window, case.driver, TIME_SCALE).run(abort=True)
            except TallyError as exc:
                problems.append(f"abort: {exc}")
        problems += _ledger_problems(case, harness.window, point, mode)
        down = _serving(case.sim)
        if down is not None:
            problems.append(f"at the end, production does not serve: {down}")
    finally:
        case.close()
    return problems


def _ledger_problems(case: Any, window: str, point: Point, mode: Mode) -> list[str]:
    problems = []
    ws = replay(case.book).windows[window]
    if ws.decision is None or ws.ending is None:
        problems.append(f"the window is not decided (phase {ws.phase})")
    if verify_ledger(case.book).verified.size != case.book.size():
        problems.append("verify did not cover the ledger")
    audit = run_audit(book=case.book)
    if not audit.ok:
        problems.append(f"audit: {audit.lines()}")
    events = _events(case.book, window)
    actions = [e for e in events if "action_id" in e]
    started = {a["action_id"] for a in actions if a["phase"] == "started"}
    finished = [a for a in actions if a["phase"] == "finished"]
    settled = {a["action_id"] for a in finished} | {a.get("probe_of") for a in actions if a.get("probe_of")}
    if started - settled:
        problems.append(f"{len(started - settled)} started action(s) never settled")
    if len(finished) != len({a["action_id"] for a in finished}):
        problems.append("an action has two finished records")
    not_run = {a["action_id"] for a in finished if a["detail"].get("not_run")}
    drained = any(a["action"] == "drain" and a["phase"] == "started" and a["action_id"] not in not_run
                  for a in actions)
    closed = _events(case.book, window, "window.closed")
    if len(closed) != 1:
        problems.append(f"{len(closed)} window.closed records")
    if drained and (any("nothing to restore" in c["summary"] for c in closed)
                    or not any(r["status"] == "ok" for r in _events(case.book, window, "restore.finished"))):
        problems.append("a drain ran, and the ledger records no restore")
    return problems + _fault_recorded(events, finished, point, mode)


def _fault_recorded(events: list[dict[str, Any]], finished: list[dict[str, Any]], point: Point, mode: Mode
                    ) -> list[str]:
    """Does the ledger say what the fault did?"""
    if isinstance(point, Act) and point.step == "wave" and point.action == "probe":
        # the start's attesting probe is not a recorded action: a failed one is followed by a recorded probe
        if mode == "raise" and not any(a["action"] == "probe" for a in finished):
            return ["the failed attesting probe left no recorded probe"]
        return []
    if isinstance(point, Act):
        why = "could not be recorded" if mode == "unreadable" else "raised RuntimeError"
        if not any(a["action"] == point.action and not a["ok"] and why in str(a["detail"].get("error"))
                   for a in finished):
            return [f"no record says {point.action}'s outcome was unusable ({why})"]
        return []
    refused = [e for e in events if e.get("reason") == "error" and (e.get("detail") or {}).get("append_failed")]
    if mode == "refuse" and point.step != "decide" and not refused:
        return ["no record says the ledger refused appends"]
    if mode == "refuse_forever" and not any(e.get("reason") == "abort" for e in events) \
            and not any(e.get("reason") == "crash" for e in events) and point.step != "decide":
        return ["no record says the window was taken over after its runner could not record"]
    return []
