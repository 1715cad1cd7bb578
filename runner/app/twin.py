"""The calibrated twin as a noise source for ``tally window power --spread-from twin --twin TWIN.toml``.

The twin (a ``tally sim calibrate`` config, ``docs/sim.md``) runs the control arm's waves on
the step model (``runner.sim.simulate``): ``WINDOWS`` windows, each with two control starts of
``REPEATS`` waves (one start's speed drawn from the twin's ``start_jitter``, each step's from
its ``step_jitter``, each request's acceptance from its family's distribution), and each
wave's pooled decode rate (tokens after the first over decode seconds) is a unit. The
result is the pilot document of ``docs/power.md`` (``{"spread": {"windows": [...]}}``),
estimated as any pilot's windows are.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..plan.model import Plan

__all__ = ["REPEATS", "WINDOWS", "twin_pilot"]

WINDOWS, REPEATS = 6, 3
WAVE_REQUESTS, PROMPT_TOKENS, MAX_TOKENS = 8, 256, 64


def twin_pilot(path: Path, plan: Plan) -> tuple[dict[str, Any], str]:
    """A pilot document simulated on the twin at ``path`` for ``plan``'s control arm, and a line saying so."""
    from .. import sim
    from .sim import read_sim_config

    config = read_sim_config(path)
    control = next((a.name for a in plan.arms if a.role == "A"), None)
    arm_name = control if control in config.arm_names() else config.production_arm
    arm = config.arm(arm_name)
    costs, budgets, acceptance = sim.arm_model(arm)
    rng = random.Random(f"{config.seed}|twin-pilot|{plan.window_id}")
    windows = []
    for w in range(WINDOWS):
        starts = []
        for s in range(2):
            factor = math.exp(rng.gauss(0.0, config.start_jitter)) if config.start_jitter > 0 else 1.0
            scaled = sim.StepCosts(costs.fixed_ms * factor, costs.per_token_ms * factor,
                                   prefill_fixed_ms=None if costs.prefill_fixed_ms is None
                                   else costs.prefill_fixed_ms * factor,
                                   per_prefill_token_ms=costs.per_prefill_token_ms * factor,
                                   per_kv_token_us=costs.per_kv_token_us * factor)
            units = []
            for r in range(REPEATS):
                jobs = [sim.Job(PROMPT_TOKENS, MAX_TOKENS)] * WAVE_REQUESTS
                result = sim.simulate(jobs, k=arm.k, costs=scaled, budgets=budgets, acceptance=acceptance,
                                      seed=hash((w, s, r)) & 0xFFFFFFFF, jitter=config.step_jitter,
                                      draft_rate=arm.draft_rate)
                tokens = sum(o.generated - o.chunk_tokens[0] for o in result.outcomes)
                seconds = sum(o.chunk_ms[-1] - o.chunk_ms[0] for o in result.outcomes) / 1000.0
                units.append(tokens / seconds)
            starts.append(units)
        windows.append({"first": starts[0], "second": starts[1]})
    line = (f"noise from the twin {path} (arm {arm_name}, step model simulated: {WINDOWS} windows x 2 control "
            f"starts x {REPEATS} waves of {WAVE_REQUESTS} requests; start_jitter {config.start_jitter:g}, "
            f"step_jitter {config.step_jitter:g}, acceptance drawn per request)")
    return {"spread": {"windows": windows}}, line
