"""Crash-and-fault coverage of every step: every host action and every append of a win2 and a pp3 window.

For each window (a tiny win2-v1 and a tiny pp3-v1 plan on the simulator), one clean run is
traced (``tests/execution/faults.py``): the step machine names each step, and every host action
the driver ran and every append the runner made is recorded with the step it belonged to. Then,
for the first occurrence of each distinct point (so every step kind the window takes and every
host action it runs is covered, and a step added to the machine is covered without touching
this file), the window is run again from the same gated ledger against a fresh simulator with
one fault at that point:

- ``unreadable``: the site's output for that action cannot be recorded (facts out of range,
  a lone surrogate, 2 MiB; 2 MiB of undecodable stderr);
- ``raise``: the process raises right after the action acted, before anything is recorded;
- ``refuse``: the ledger refuses that append and the next four attempts (locked past the
  busy timeout, disk full), more than the runner's retries, then takes appends again;
- ``refuse_forever``: the ledger refuses that append and every later one in the process.

Every distinct host action gets both ``unreadable`` and ``raise``, in both windows. Every
distinct append is refused in both windows, in one of the two append modes in one window and
in the other mode in the other (picked from the point itself): over the two windows each append
point meets both. That is 13 host-action points (26 cases) and about 30 append points per
window, about 110 cases in all, run two at a time.

Each case checks: production serves at the end of the faulted run itself (the simulator's
ground truth: its host says production is up, on the production engine), and, after a follow-up
where the run could not finish (the ledger gone: the operator aborts the window on a healthy
ledger, and the new runner re-probes what was left open), the window is decided, production still
serves, verify and audit pass, every started action is settled, and the ledger says what
happened (the fault's record; no "nothing to restore" once a drain ran; a restore recorded).
The cases run in two worker processes; the checks themselves are in ``faults.run_case``.
"""

from __future__ import annotations

import multiprocessing
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.gates.admission import admit

from ..runner.script import SIMPLE_PP3
from .faults import (
    ACT_MODES,
    APPEND_MODES,
    Act,
    Append,
    FaultyLedger,
    FaultySite,
    Harness,
    Mode,
    Point,
    case_in_worker,
    fault_points,
    new_case,
    runner_for,
    tiny_pp3,
    tiny_win2,
)
from .worlds import TIME_SCALE, gate_all, window, world

WORKERS = 2   # cases run in two worker processes (the machine's two cores); each case is independent
WINDOWS = {"win2": ("seed000-controlled.toml", tiny_win2), "pp3": (str(SIMPLE_PP3), tiny_pp3)}


@dataclass
class Traced:
    harness: Harness
    acts: list[Act]
    appends: list[Append]
    steps: set[str]
    actions: set[str]


@pytest.fixture(scope="module", params=sorted(WINDOWS))
def traced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    """A gated, admitted window (a ledger file to copy for each case) and the trace of one clean run."""
    name = request.param
    plan, edit = WINDOWS[name]
    directory = tmp_path_factory.mktemp(f"harness-{name}")
    window_id = f"faults-{name}"
    w = world(directory / "world", [window(plan, window_id, chain="none", edit=edit)])
    try:
        gate_all(w)
        admit(w.book, w.root, window_id)
    finally:
        w.book.close()
        w.driver.close()
        w.sim.stop()
    harness = Harness(window_id, directory / "world" / "tally.db", w.sim.config, directory / "world" / ".tally" /
                      "root.pem")
    case = new_case(harness.template, harness.sim_config, directory / "clean")
    try:
        site, book = FaultySite(case.driver), FaultyLedger(case.book)
        result = runner_for(book, w.root, window_id, site, TIME_SCALE).run()
        assert result.ending == "restored" and result.decision is not None, result
        acts, appends = fault_points(site.seen), fault_points(book.seen)
    finally:
        case.close()
    yield Traced(harness, acts, appends, {p.step for p in (*acts, *appends)}, {a.action for a in acts})


def test_the_trace_covers_the_window_from_preflight_to_decision(traced: Traced) -> None:
    """The clean run took every step of a restored window and ran every host action of the site."""
    assert {"preflight", "snapshot", "drain", "hold_open", "start_arm", "start_began", "config_gate", "spec_gate",
            "warmup", "wave", "end_start", "measurement_end", "restore", "watch", "restore_close",
            "decide"} <= traced.steps
    assert {"preflight", "snapshot", "drain", "start_arm", "read_clock_cap", "warmup", "read_thermal", "probe",
            "stop_arm", "restore", "watch"} <= traced.actions
    assert traced.steps <= {a.step for a in traced.appends}   # every step the machine took appended something


def _cases(traced: Traced, kind: str) -> list[tuple[Point, Mode]]:
    """Every distinct host action in both of its modes; every distinct append in one of the two append
    modes, the other one in the other window (the mode picked from the point itself, so that over the
    two windows every append point is refused both for a while and for good)."""
    if kind == "host-actions":
        return [(point, mode) for point in traced.acts for mode in ACT_MODES]
    other = traced.harness.window.endswith("pp3")
    return [(point, APPEND_MODES[(zlib.crc32(str(point).encode()) + other) % 2]) for point in traced.appends]


@pytest.mark.parametrize("kind", ["host-actions", "appends"])
def test_every_step_with_a_fault_ends_with_production_serving(traced: Traced, kind: str, tmp_path: Path) -> None:
    cases = _cases(traced, kind)
    began = time.monotonic()
    outcomes: dict[int, list[str]] = {}
    with ProcessPoolExecutor(max_workers=WORKERS, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(case_in_worker, traced.harness, index, point, mode, tmp_path / f"case-{index}")
                   for index, (point, mode) in enumerate(cases)]
        for future in futures:
            index, problems = future.result()
            outcomes[index] = problems
    failed = [f"{traced.harness.window} {mode} at {point}: " + "; ".join(outcomes[index])
              for index, (point, mode) in enumerate(cases) if outcomes[index]]
    print(f"{traced.harness.window}: {len(cases)} {kind} cases in {time.monotonic() - began:.1f} s")
    assert not failed, "\n".join(failed)
