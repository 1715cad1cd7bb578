"""Decision rules ``win2-v1`` and ``pp3-v1``: pure functions of a JSON input (``docs/rules.md``).

``compute(input) -> result`` validates and decides; ``inputs_digest(hashes)`` names the
measurement events a decision used. No I/O, no clock. ``docs/rules.md`` documents every
formula so that the rules can be reimplemented with identical numbers.
"""

from __future__ import annotations

from .compare import Difference, diff
from .digest import inputs_digest
from .rules import DEFAULT_PARAMS, RULES, compute, validate

__all__ = ["DEFAULT_PARAMS", "RULES", "Difference", "compute", "diff", "inputs_digest", "validate"]
