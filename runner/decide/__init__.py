"""Decision rules ``win2-v1`` and ``pp3-v1``: pure functions of a JSON input (``docs/rules.md``).

::

    from runner.decide import compute, replay_window

    result = compute(rule_input)            # validates (FieldError naming the field), then decides
    result["decision"], result["reasons"]
    replay_window(ledger, "w1").match        # the recorded decision recomputed from its recorded input

``compute(input) -> result`` validates and decides; ``inputs_digest(hashes)`` names the
measurement events a decision used. The rules (``win2``, ``pp3``: public modules), their
clock conditions, the power figures and the spread are pure: no I/O, no clock.
``inputs`` rebuilds a rule's input from a window's events (``build_input``,
``decision_for``, ``replay_window``). ``docs/rules.md`` documents every formula so that
the rules can be reimplemented with identical numbers.
"""

from __future__ import annotations

from . import pp3, win2
from .clocks import cap_reasons, dial_back_reasons
from .compare import Difference, diff
from .digest import inputs_digest
from .inputs import (
    INPUT_BUILDER,
    ReplayResult,
    build_input,
    decision_for,
    recorded_builder,
    replay_window,
    smoke_findings,
)
from .noise import METRICS as NOISE_METRICS
from .noise import PRIMARY as NOISE_PRIMARY
from .noise import ControlPair, Pp3Noise, Win2Noise, estimate_win2_noise
from .pilot import parse_pilot_noise
from .power import MODEL as POWER_MODEL
from .power import correlation_label, design_of, power_figures, spread_lines, thin_reason
from .power_looks import ChainStudy, chain_study
from .power_sim import Pp3Design, Win2Design
from .power_v1 import power_figures_v1
from .rules import DEFAULT_PARAMS, RULES, compute, validate
from .smoke import smoke_tally
from .spending import SPENDINGS, LookBudget, LookTest, look_test
from .spread import MIN_WINDOWS, Spread, estimate_spread, parse_pilot
from .win2 import pooled_values

__all__ = [
    "DEFAULT_PARAMS",
    "INPUT_BUILDER",
    "MIN_WINDOWS",
    "NOISE_METRICS",
    "NOISE_PRIMARY",
    "POWER_MODEL",
    "RULES",
    "SPENDINGS",
    "ChainStudy",
    "ControlPair",
    "Difference",
    "LookBudget",
    "LookTest",
    "Pp3Design",
    "Pp3Noise",
    "ReplayResult",
    "Spread",
    "Win2Design",
    "Win2Noise",
    "build_input",
    "cap_reasons",
    "chain_study",
    "compute",
    "correlation_label",
    "decision_for",
    "design_of",
    "dial_back_reasons",
    "diff",
    "estimate_spread",
    "estimate_win2_noise",
    "inputs_digest",
    "look_test",
    "parse_pilot",
    "parse_pilot_noise",
    "pooled_values",
    "power_figures",
    "power_figures_v1",
    "pp3",
    "recorded_builder",
    "replay_window",
    "smoke_findings",
    "smoke_tally",
    "spread_lines",
    "thin_reason",
    "validate",
    "win2",
]
