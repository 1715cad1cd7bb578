"""The window event catalogue: event types, their typed payloads, and how they are appended.

::

    from runner.events import payloads as p, window_event

    item = window_event("w1", plan_sha256, "hold.opened", p.HoldOpened(owner="w1", hosts=["h"], from_marker=False))
    ledger.append(item.stream, item.type, item.payload, signer, item.blobs)

- ``payloads`` (public): one payload class per event type (the members are a contract,
  ``docs/events.md``);
- ``schema``: the compiler from payload classes to validators, and the typed round trip
  (``to_wire`` / ``from_wire``);
- ``catalogue``: type -> payload class, stream names, ``window_event`` and ``WindowLog``
  (validated appends), ``read_payload`` (a stored event's typed payload: how readers
  outside ``runner.events`` and ``runner.state`` read events, never ``event.payload[...]``);
- ``receipts``: which events have receipts (``WINDOW_RECEIPTS``) and a decision's window
  context.
"""

from __future__ import annotations

from . import payloads
from .catalogue import (
    ARCHIVE_STREAM,
    CATALOGUE,
    WINDOW_STREAM_PREFIX,
    WindowLog,
    append_window_event,
    bundle_companions,
    parse_payload,
    read_payload,
    validate_payload,
    window_event,
)
from .receipts import WINDOW_RECEIPTS, receipt_context
from .schema import from_wire, to_wire

__all__ = [
    "ARCHIVE_STREAM",
    "CATALOGUE",
    "WINDOW_RECEIPTS",
    "WINDOW_STREAM_PREFIX",
    "WindowLog",
    "append_window_event",
    "bundle_companions",
    "from_wire",
    "parse_payload",
    "payloads",
    "read_payload",
    "receipt_context",
    "to_wire",
    "validate_payload",
    "window_event",
]
