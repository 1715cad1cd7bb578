"""A production capture (``tally window run --chain-production CAPTURE``) for a window opened under a marker.

Production is down under a chain marker: the window cannot snapshot it, and takes the
marker's sha. A capture is production's identity as recorded when it was last up (the
``production.snapshot`` of the window that drained it, or the site's own snapshot output):
``{"sha256": "<64 hex>", "identity": {...}}``. It is read bounded and checked before any
host action: its ``sha256`` must be the marker's ``production_snapshot_sha256``. The window
then records it as its ``production.snapshot`` (``source = "capture"``, the file as a blob),
so the chain's restore is given exactly that identity.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import FormatError, PolicyError
from ledger.store import Blob
from ledger.strictfile import read_limited
from ledger.strictjson import read_json

from ..state.window import Marker

__all__ = ["Capture", "check_capture", "read_capture"]

MAX_CAPTURE_BYTES = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Capture:
    path: Path
    data: bytes
    sha256: str
    identity: Mapping[str, Any]

    def blob(self) -> Blob:
        return Blob(self.data, "application/json")


def read_capture(path: Path) -> Capture:
    """Read and check a capture file (``FormatError``, one line, for anything else)."""
    data = read_limited(path, "production capture", MAX_CAPTURE_BYTES)
    body = read_json(data, f"production capture {path}", max_bytes=MAX_CAPTURE_BYTES)
    if not isinstance(body, Mapping):
        raise FormatError(f"production capture {path} must be a JSON object with sha256 and identity")
    sha, identity = body.get("sha256"), body.get("identity")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise FormatError(f"production capture {path}: sha256 must be 64 lowercase hex characters")
    if not isinstance(identity, Mapping) or not identity:
        raise FormatError(f"production capture {path}: identity must be a non-empty object")
    return Capture(path, data, sha, dict(identity))


def check_capture(capture: Capture, marker: Marker | None, window: str) -> None:
    """Refuse (``PolicyError``) a capture that is not the marker's production snapshot."""
    if marker is None or marker.window == window:
        raise PolicyError(f"--chain-production applies to a window opened under another window's chain marker; "
                          f"window {window} is not")
    expected = marker.production_snapshot_sha256
    if capture.sha256 != expected:
        raise PolicyError(f"production capture {capture.path} has sha256 {capture.sha256[:12]}, but the chain "
                          f"marker of window {marker.window} left production at {str(expected)[:12]}")
