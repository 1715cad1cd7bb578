"""``inputs_digest``: which measurement events a decision used, as one SHA-256."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ledger.errors import FieldError

__all__ = ["inputs_digest"]

_HEX64 = re.compile(r"[0-9a-f]{64}")


def inputs_digest(hashes: Sequence[str]) -> str:
    """SHA-256 (hex) over the concatenated raw 32-byte event hashes, in the order given (seq order).

    Each hash is 64 lowercase hex characters (an event's ``hash``); an empty list gives the
    SHA-256 of the empty string.
    """
    if isinstance(hashes, str):
        raise FieldError("hashes", "expected a list of event hashes, got a string")
    digest = hashlib.sha256()
    for i, h in enumerate(hashes):
        if not isinstance(h, str) or _HEX64.fullmatch(h) is None:
            raise FieldError(f"hashes[{i}]", "expected 64 lowercase hex characters (an event hash)")
        digest.update(bytes.fromhex(h))
    return digest.hexdigest()
