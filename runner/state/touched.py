"""Has a window touched the hosts? The one test the runner's ending and the audit both apply.

A window that has changed nothing on the hosts may close "nothing to restore"; any other
ending restores production. The runner asks before it closes (``runner.execution.steps``)
and the audit asks again of every recorded ``window.closed`` (invariant
``untouched-close-proven``), from the same events, with the same function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..drivers import OBSERVING_ACTIONS

if TYPE_CHECKING:
    from .fold import Folding, State
    from .window import WindowState

__all__ = ["touched"]


def touched(state: State | Folding, ws: WindowState) -> bool:
    """May this window have changed anything on the hosts (so that its ending must restore)?

    "No" only on positive evidence: the runner records every host action's start before it
    runs it, so a window none of whose recorded starts is of an action that can change a host
    (every action but the observing ones; a start whose finished record says it never ran does
    not count) has changed nothing. A drain counts from the moment its start is recorded,
    whatever became of its outcome (unrecordable, lost, re-probed). And any probe that found
    production not serving sends the window down the restore path.
    """
    marker = state.marker
    if ws.clock.hold_opened is not None or ws.chain_aborted is not None or (
            marker is not None and marker.window != ws.id):
        return True
    if ws.not_serving_seq is not None:
        return True
    return any(count > 0 for action, count in ws.begun.items() if action not in OBSERVING_ACTIONS)
