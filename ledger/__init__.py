"""The ledger: canonical events, keys, storage, Merkle tree, verification.

Knows nothing about windows (that is ``runner``). Names are loaded on first use so
that importing ``ledger.errors`` (as every command does) stays cheap.
"""

from __future__ import annotations

import typing
from importlib import import_module as _import_module

if typing.TYPE_CHECKING:  # what the lazy names below are, for the type checker
    from typing import Any

    from .errors import (
        ExternalError,
        FormatError,
        IntegrityError,
        PayloadError,
        PolicyError,
        StorageError,
        TallyError,
        VerificationError,
    )
    from .event import Event, check_seq
    from .keys import KeyRing, Signer, load_signer
    from .store import Blob, Ledger, NewEvent, blob_ref
    from .verify import VerifiedLedger, verify_events

__all__ = [
    "Blob",
    "Event",
    "ExternalError",
    "FormatError",
    "IntegrityError",
    "KeyRing",
    "Ledger",
    "NewEvent",
    "PayloadError",
    "PolicyError",
    "Signer",
    "StorageError",
    "TallyError",
    "VerificationError",
    "VerifiedLedger",
    "blob_ref",
    "check_seq",
    "load_signer",
    "verify_events",
]

_HOME = {
    "Blob": "store", "Ledger": "store", "NewEvent": "store", "blob_ref": "store",
    "Event": "event", "check_seq": "event", "KeyRing": "keys", "Signer": "keys", "load_signer": "keys",
    "VerifiedLedger": "verify", "verify_events": "verify",
    "ExternalError": "errors", "FormatError": "errors", "IntegrityError": "errors",
    "PayloadError": "errors", "PolicyError": "errors", "StorageError": "errors",
    "TallyError": "errors", "VerificationError": "errors",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(_import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module 'ledger' has no attribute {name!r}")
