"""Reading a file from outside as hostile input: at most a bounded number of bytes.

``read_limited(path, what, limit)`` reads at most ``limit`` bytes and refuses, with one
``FormatError`` line naming ``what``, a file it cannot read or one that is longer: the
first step of every reader of an operator's file (receipts, captures, plans, sites,
simulator configs) before ``ledger.strictjson`` or ``ledger.stricttoml`` parse it.
"""

from __future__ import annotations

from pathlib import Path

from .errors import FormatError

__all__ = ["read_limited"]


def read_limited(path: str | Path, what: str, limit: int) -> bytes:
    """The bytes of ``path`` (at most ``limit``); ``FormatError``: "cannot read {what} {path}: ..." or
    "{what} {path} is over the {limit}-byte limit"."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise FormatError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FormatError(f"{what} {path} is over the {limit}-byte limit")
    return data
