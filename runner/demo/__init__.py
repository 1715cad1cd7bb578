"""``tally demo``: self-contained walkthroughs that need no setup.

::

    from runner.demo import run_demo

    summary = run_demo(Path("tally-demo"), "window")     # a simulated window end to end
    summary["ok"], summary["windows"]

- ``scenarios``: the scenarios (window, chain, pp3, faults, power) and the simulated world
  they run in (also what benches and tests build on);
- ``pair``: the simulated pair ``tally demo --plan`` derives from a plan's arms;
- ``ledger_tour``: the ledger alone, signed, verified and caught when edited;
- ``progress``: what the demo shows while it runs (a bar over the waves, repeated lines folded);
- ``data/``: the example plans and families the scenarios run, shipped in the package.
"""

from __future__ import annotations

from .ledger_tour import TourResult, ledger_tour
from .pair import PlanDemo, prepare_plan_demo, sim_config_for
from .progress import DemoDisplay
from .scenarios import (
    DEMO_TIME_SCALE,
    DemoWindow,
    World,
    build_world,
    pass_chain_gate,
    pass_gates,
    result_lines,
    run_demo,
)

__all__ = [
    "DEMO_TIME_SCALE",
    "DemoDisplay",
    "DemoWindow",
    "PlanDemo",
    "TourResult",
    "World",
    "build_world",
    "ledger_tour",
    "pass_chain_gate",
    "pass_gates",
    "prepare_plan_demo",
    "result_lines",
    "run_demo",
    "sim_config_for",
]
