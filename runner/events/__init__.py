"""The window event catalogue: event types, their typed payloads, and how they are appended.

- ``payloads``: one payload class per event type (the members are a contract,
  ``docs/events.md``);
- ``schema``: the compiler from payload classes to validators, and the typed round
  trip (``to_wire`` / ``from_wire``);
- ``catalogue``: type -> payload class, stream names, ``window_event`` and
  ``WindowLog`` (validated appends).
"""

from __future__ import annotations

from .catalogue import (
    ARCHIVE_STREAM,
    CATALOGUE,
    WINDOW_STREAM_PREFIX,
    WindowLog,
    append_window_event,
    parse_payload,
    validate_payload,
    window_event,
)

__all__ = [
    "ARCHIVE_STREAM",
    "CATALOGUE",
    "WINDOW_STREAM_PREFIX",
    "WindowLog",
    "append_window_event",
    "parse_payload",
    "validate_payload",
    "window_event",
]
