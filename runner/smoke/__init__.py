"""The smoke stage's probes: tiny T=0 requests to one start's engine, and their verdicts (``docs/smoke.md``).

::

    from runner.smoke import SmokeSession

    session = SmokeSession(url, model, plan.smoke)
    verdict, emitted = session.greedy("s2", reference)     # then structured, stop, eos, lifecycle
    session.close()

- ``probes``: the session (one HTTP client per start) and each probe's verdict;
- ``greedy``: greedy identity, what two starts emitted at T=0 compared (pure).

The runner records each verdict as a ``smoke.result`` (``runner.execution``).
"""

from __future__ import annotations

from .greedy import Emitted, GreedyComparison, compare_greedy
from .probes import ProbeVerdict, SmokeSession

__all__ = [
    "Emitted",
    "GreedyComparison",
    "ProbeVerdict",
    "SmokeSession",
    "compare_greedy",
]
