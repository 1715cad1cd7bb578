"""Window execution: the step machine, the runner that performs its steps, and their helpers.

- ``steps``: ``next_step(ctx)``, the one step to take now, from replayed state (pure);
- ``window``: ``WindowRunner``, which replays, asks, acts and records until decided;
- ``clock``: the budget clock in window minutes (pure);
- ``lock``: one runner per window, one HOLD opening at a time;
- ``dryrun``: ``tally window run --dry-run``, its steps from ``dryfold`` (the step machine over an
  "everything succeeds" fold); ``preflight``: ``tally chain preflight``;
- ``progress``: the terminal's progress bar.
"""
