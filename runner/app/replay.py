"""Replaying the ledger: the runner's state, a window's decision and its power gates, derived again.

::

    from runner.app import Session, replay_verdict

    result = replay_verdict(Session(db="tally.db"), "w1")
    result.match, result.differences          # the recorded decision against the one recomputed
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

if TYPE_CHECKING:

    from ..decide import ReplayResult
    from .session import Session

__all__ = ["replay_power", "replay_state", "replay_verdict"]


def replay_state(session: Session, window: str | None = None) -> dict[str, Any]:
    """The ledger folded into the runner's state (``docs/events.md``), as ``tally replay state --json`` prints
    it: marker, HOLD, production, placeholders and the windows (only ``window`` when given)."""
    from ..state import fold

    folded = fold(None, session.ledger().events())
    if window is not None and window not in folded.windows:
        raise FormatError(f"window {window} is not in the ledger")
    return folded.to_json(window)


def replay_verdict(session: Session, window: str) -> ReplayResult:
    """The window's decision recomputed from its recorded measurements, against the recorded one."""
    from ..decide import replay_window

    return replay_window(session.ledger(), window)


@dataclass(frozen=True)
class PowerReplay:
    """One power gate result recomputed: its seq, its recorded verdict, the members that differ (none: MATCH)."""

    seq: int
    verdict: str
    differences: list[str]


def replay_power(session: Session, window: str) -> list[PowerReplay]:
    """Every power gate result of the window recomputed from the ledger: (event, the members that differ)."""
    from ..events import payloads, read_payload
    from ..gates import replay_power_gate

    book = session.ledger()
    results = []
    for e in book.events(stream=f"window/{window}", types=["gate.result"]):
        gate = read_payload(e, payloads.GateResult)
        if gate.gate == "power":
            results.append(PowerReplay(e.seq, gate.verdict, replay_power_gate(book, e)))
    if not results:
        raise FormatError(f"window {window} has no power gate result")
    return results
