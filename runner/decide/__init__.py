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
from .power import design_of, power_figures, spread_lines
from .rules import DEFAULT_PARAMS, RULES, compute, validate
from .smoke import smoke_tally
from .spread import MIN_WINDOWS, Spread, estimate_spread, parse_pilot
from .win2 import pooled_values

__all__ = [
    "DEFAULT_PARAMS",
    "INPUT_BUILDER",
    "MIN_WINDOWS",
    "RULES",
    "Difference",
    "ReplayResult",
    "Spread",
    "build_input",
    "cap_reasons",
    "compute",
    "decision_for",
    "design_of",
    "dial_back_reasons",
    "diff",
    "estimate_spread",
    "inputs_digest",
    "parse_pilot",
    "pooled_values",
    "power_figures",
    "pp3",
    "recorded_builder",
    "replay_window",
    "smoke_findings",
    "smoke_tally",
    "spread_lines",
    "validate",
    "win2",
]
