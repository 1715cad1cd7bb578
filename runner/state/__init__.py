"""State by replay: the pure fold of events into what the runner acts on, and its ledger edge.

- ``fold``: ``fold(state, events) -> state`` (no I/O, no clock), ``admission_blockers``;
- ``replay``: ``replay(ledger[, state])``, the fold over a ledger's (new) events.
"""

from __future__ import annotations

from .fold import State, WindowState, admission_blockers, fold
from .replay import replay

__all__ = ["State", "WindowState", "admission_blockers", "fold", "replay"]
