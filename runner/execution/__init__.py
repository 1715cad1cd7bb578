"""Window execution: the step machine, the runner that performs its steps, and their helpers.

::

    from runner.execution import WindowRunner, window_lock

    with window_lock(ledger, "w1"):
        result = WindowRunner(ledger, signer, "w1", driver, time_scale=scale).run()
    result.ending, result.decision

- ``steps``: ``next_step(ctx)``, the one step to take now, from replayed state (pure);
- ``window``: ``WindowRunner``, which replays, asks, acts and records until decided;
- ``clock``: the budget clock in window minutes (pure);
- ``lock``: one runner per window and per site host, one HOLD opening at a time;
- ``dryrun``: ``tally window run --dry-run``, its steps from ``dryfold`` (the step machine over an
  "everything succeeds" fold); ``preflight``: ``tally chain preflight``;
- ``progress``: the terminal's progress bar (``wave_bar``: the bar itself, which the demo shows too).
"""

from __future__ import annotations

from .dryrun import dry_run_report
from .lock import host_locks, window_lock
from .preflight import chain_preflight
from .progress import LineFolder, Progress, wave_bar
from .window import RunResult, WindowRunner, owner_name, refuse_unadmitted

__all__ = [
    "LineFolder",
    "Progress",
    "RunResult",
    "WindowRunner",
    "chain_preflight",
    "dry_run_report",
    "host_locks",
    "owner_name",
    "refuse_unadmitted",
    "wave_bar",
    "window_lock",
]
