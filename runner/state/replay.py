"""State by replay from a ledger: the impure edge of ``runner.state.fold`` (it reads the database).

``replay(ledger)`` folds every event; ``replay(ledger, state)`` folds only the events
appended since ``state`` was taken (``ledger.events(after=state.size)``), which is what
the runner does before each step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fold import State, fold

if TYPE_CHECKING:
    from ledger.store import Ledger

__all__ = ["replay"]


def replay(ledger: Ledger, state: State | None = None) -> State:
    """The state of ``ledger``: a full fold, or ``state`` brought up to date with the new events."""
    after = 0 if state is None else state.size
    return fold(state, ledger.events(after=after))
