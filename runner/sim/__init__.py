"""A vLLM-faithful simulator with speculative decoding, for tests, demos and the runner.

A real HTTP server on loopback that speaks vLLM's OpenAI-compatible API (streaming
and not, chat and completions, vLLM's error bodies), exposes vLLM's ``/metrics``,
and plays the host side of a window through a control API (``/_sim/...``): drain,
snapshot, start arm, restore, watch, clock cap, thermal dial-back, placeholders and
injectable faults. See ``docs/sim.md``.

::

    with runner.sim.start(config, seed=7, time_scale=0.01) as sim:
        sim.url            # base URL of the serving endpoint
        sim.control("drain")
"""

from __future__ import annotations

from .batch import Acceptance, Budgets, Job, SimResult, StepCosts, simulate, speculation_breakeven
from .calibrate import Calibration, Run, arm_model, calibrate, compare, config_toml, observed_figures, predict, read_run
from .config import ArmConfig, SimConfig, config_from_dict, default_config, load_config, read_config_table
from .handle import SimHandle, SimProcess, spawn, start
from .host import ACTIONS
from .process import serve

__all__ = [
    "ACTIONS",
    "Acceptance",
    "ArmConfig",
    "Budgets",
    "Calibration",
    "Job",
    "Run",
    "SimConfig",
    "SimHandle",
    "SimProcess",
    "SimResult",
    "StepCosts",
    "arm_model",
    "calibrate",
    "compare",
    "config_from_dict",
    "config_toml",
    "default_config",
    "load_config",
    "observed_figures",
    "predict",
    "read_config_table",
    "read_run",
    "serve",
    "simulate",
    "spawn",
    "speculation_breakeven",
    "start",
]
