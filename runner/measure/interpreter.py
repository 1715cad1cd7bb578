"""Keep the interpreter out of the measurement while a wave runs.

Two CPython defaults add milliseconds to the client's receive timestamps: the GIL
switch interval (5 ms: a reader thread woken by the network may wait that long for a
busy thread) and cyclic garbage collection (a full collection pauses every thread).
:func:`quiet_interpreter` lowers the first to 0.5 ms and suspends the second for the
duration of a wave, then restores both. It is reference-counted, so nested or
overlapping waves restore the settings only when the last one ends.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SWITCH_INTERVAL_S", "quiet_interpreter"]

SWITCH_INTERVAL_S = 0.0005

_lock = threading.Lock()
_depth = 0
_saved: tuple[float, bool] = (0.005, True)


@contextmanager
def quiet_interpreter() -> Iterator[None]:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = (sys.getswitchinterval(), gc.isenabled())
            sys.setswitchinterval(min(SWITCH_INTERVAL_S, _saved[0]))
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                interval, enabled = _saved
                sys.setswitchinterval(interval)
                if enabled:
                    gc.enable()
