"""``tally demo``: a simulated window end to end, or your own plan on a simulated pair, left in a directory.

::

    from runner.app import run_demo_in

    outcome = run_demo_in(Path("tally-demo"), "window")
    outcome.summary["ok"], [window for window, _ in outcome.verdicts]
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

if TYPE_CHECKING:
    from ..demo import TourResult
    from .windows import Decision

__all__ = ["MARKER", "SCENARIOS", "DemoOutcome", "demo_result_lines", "run_demo_in"]

SCENARIOS = ("window", "chain", "pp3", "faults", "power", "looks", "ledger")
MARKER = ".tally-demo"
"""The file a demo leaves at the top of its directory: the next demo there refreshes it instead of refusing."""


def _made_by_a_demo(directory: Path) -> bool:
    marker = directory / MARKER
    return not marker.is_symlink() and marker.is_file()


@dataclass(frozen=True)
class DemoOutcome:
    """What a demo did: the ledger tour's result, or a scenario's summary and each decided window's verdict."""

    tour: TourResult | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    verdicts: tuple[tuple[str, Decision | None], ...] = ()


def run_demo_in(directory: Path, scenario: str | None = None, *, plan_file: Path | None = None,
                sim_file: Path | None = None, force: bool = False, quiet: bool = False,
                verdicts: bool = True, verbosity: int = 0, progress: bool = False) -> DemoOutcome:
    """Run ``scenario`` (default ``window``), or ``plan_file`` on the simulated pair its arms describe
    (``sim_file`` laid over it), in ``directory``. A previous demo's directory is replaced; another non-empty
    one only with ``force``. Every input is checked before anything is made; ``verdicts``: read each decided
    window's recorded decision back. ``quiet``: no lines at all (``--json``); ``verbosity``: -1 (``-q``) none
    while running, 0 each distinct line once, 1 (``-v``) every line; ``progress``: a bar over the waves (a
    terminal)."""
    from ..demo import DEMO_TIME_SCALE, DemoDisplay, ledger_tour, prepare_plan_demo, run_demo

    if plan_file is not None and scenario is not None:
        raise FormatError("give --plan or --scenario, not both")
    if sim_file is not None and plan_file is None:
        raise FormatError("--sim needs --plan (it describes the simulated pair your plan runs on)")
    scenario = scenario or "window"
    if scenario not in SCENARIOS:
        raise FormatError(f"--scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
    prepared = None
    if plan_file is not None:  # every input checked before anything is made
        prepared = prepare_plan_demo(plan_file, sim_file, time_scale=DEMO_TIME_SCALE)
    if directory.is_symlink():
        raise FormatError(f"--dir {directory} is a symbolic link; give the directory itself")
    if directory.exists() and not directory.is_dir():
        raise FormatError(f"--dir {directory} exists and is not a directory")
    if directory.exists() and any(directory.iterdir()):
        if not (force or _made_by_a_demo(directory)):
            raise FormatError(f"{directory} is not empty and was not made by tally demo; pass --force to replace "
                              "it, or --dir elsewhere")
        shutil.rmtree(directory)  # a previous demo's directory is refreshed (`make demo` twice)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by tally demo: the next tally demo with this --dir replaces it\n")
    if scenario == "ledger":
        return DemoOutcome(tour=ledger_tour(directory) if verbosity >= 0 else ledger_tour(directory, lambda _t: None))
    display = DemoDisplay(verbosity=-1 if quiet else verbosity, bar=progress and not quiet)
    with display:
        summary: dict[str, Any] = run_demo(directory, scenario, say=display.say, plan=prepared, on_wave=display.wave)
        display.close()
    if not verdicts:
        return DemoOutcome(summary=summary)
    from ledger.store import Ledger

    from .windows import recorded_decision

    book = Ledger.open(summary["db"])
    try:
        decided = tuple((entry["window"], recorded_decision(book, entry["window"]))
                        for entry in summary["windows"] if "decision" in entry)
    finally:
        book.close()
    return DemoOutcome(summary=summary, verdicts=decided)


def demo_result_lines(summary: dict[str, Any]) -> list[str]:
    """The demo's closing lines: what it showed, window by window."""
    from ..demo import result_lines

    return result_lines(summary)
