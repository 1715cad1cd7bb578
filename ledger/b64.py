"""Base64 as the ledger's formats use it: one writer, and the two readers the formats call for.

Written: the standard alphabet with padding (signed notes, vkeys, checkpoints, tlog-proofs,
consistency proofs, DSSE envelopes). Read: :func:`decode` strictly (standard, padding
required: the C2SP formats), :func:`decode_lenient` for DSSE envelopes, whose readers
accept standard or URL-safe base64 with or without padding. Every refusal is one
``FormatError`` naming what was read.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from .errors import FormatError

__all__ = ["decode", "decode_lenient", "encode"]


def encode(data: bytes) -> str:
    """Standard base64 with padding."""
    return base64.b64encode(data).decode("ascii")


def decode(value: str, what: str) -> bytes:
    """Standard base64 (padding required); ``FormatError`` naming ``what`` otherwise."""
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise FormatError(f"{what} is not standard base64") from None


def decode_lenient(value: Any, what: str) -> bytes:
    """Standard or URL-safe base64, padding optional (DSSE); ``FormatError`` naming ``what`` otherwise."""
    if not isinstance(value, str):
        raise FormatError(f"{what} is not a base64 string")
    text = value.strip().replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise FormatError(f"{what} is not base64") from None
