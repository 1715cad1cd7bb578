"""Canonical JSON (RFC 8785, JCS) and the payload rules (``docs/format.md``).

``canonical(obj)`` returns the JCS bytes of a JSON value. The reference is the
``rfc8785`` package; for values without floats and whose object keys sort the same in
UTF-16 and in code points, the C ``json`` encoder produces the very same bytes much
faster, so it is used there (tests/ledger/test_canonical.py proves the two agree on
arbitrary values). Anything else goes through ``rfc8785``.

``check_payload(payload)`` walks a payload once, refusing what the payload rules forbid with a
``PayloadError`` naming the offending path (``payload.x.y: NaN is not allowed``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import rfc8785

from .errors import PayloadError

__all__ = ["BLOB_NAME", "MAX_BODY_BYTES", "MAX_DEPTH", "MAX_INT", "blob_references", "canonical", "check_payload",
           "json_string"]

MAX_INT = 2**53 - 1
MAX_BODY_BYTES = 1 << 20
MAX_DEPTH = 64  # arrays and objects nested in a payload (the payload object is level 0)

BLOB_NAME = re.compile(r"[0-9a-f]{64}")
BLOB_MARK = '"blob":"sha256:'  # in a payload's JCS text wherever it refers to a blob

# Code points from here on sort differently in UTF-16 (surrogate pairs) than as code
# points, so keys containing them go through rfc8785.
_UTF16_SAFE_LIMIT = "\ud800"

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_encode_fast = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode
_encode_str = json.encoder.encode_basestring


def json_string(s: str) -> str:
    """The JCS form of a JSON string (quotes included)."""
    result: str = _encode_str(s)
    return result


class _Refused(Exception):
    """Raised by the fast walk; the slow walk then finds and names the path."""


def _scan_float(value: float) -> bool:
    if math.isnan(value) or math.isinf(value) or (MAX_INT < abs(value) < 1e21 and value.is_integer()):
        raise _Refused
    return False


def _scan(value: Any, depth: int = 0) -> bool:
    """Validate ``value`` quickly; True if the fast encoder gives JCS bytes for it.

    Scalars inside containers are checked inline (no call per value): this walk runs
    for every appended event.
    """
    kind = type(value)
    if (kind is dict or kind is list or kind is tuple) and depth >= MAX_DEPTH:
        raise _Refused
    if kind is dict:
        fast = True
        for key, item in value.items():
            if type(key) is not str:
                raise _Refused
            if not key.isascii() and max(key) >= _UTF16_SAFE_LIMIT:
                fast = False
            kind = type(item)
            if kind is str or item is None or kind is bool:
                continue
            if kind is int:
                if not -MAX_INT <= item <= MAX_INT:
                    raise _Refused
            elif not _scan(item, depth + 1):
                fast = False
        return fast
    if kind is list or kind is tuple:
        fast = True
        for item in value:
            kind = type(item)
            if kind is str or item is None or kind is bool:
                continue
            if kind is int:
                if not -MAX_INT <= item <= MAX_INT:
                    raise _Refused
            elif not _scan(item, depth + 1):
                fast = False
        return fast
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        if -MAX_INT <= value <= MAX_INT:
            return True
        raise _Refused
    if kind is float:
        return _scan_float(value)
    raise _Refused


def _key_path(path: str, key: str) -> str:
    return path + (f".{key}" if _PLAIN_KEY.match(key) else f"[{json.dumps(key)}]")


def _explain(value: Any, path: str, depth: int = 0) -> None:
    """Walk again, slowly, and raise a ``PayloadError`` naming the first refused path."""
    kind = type(value)
    if (kind is dict or kind is list or kind is tuple) and depth >= MAX_DEPTH:
        raise PayloadError(path, f"nested more than {MAX_DEPTH} levels deep")
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise PayloadError(path, f"object key {key!r} is not a string")
            _explain(item, _key_path(path, key), depth + 1)
    elif kind is list or kind is tuple:
        for index, item in enumerate(value):
            _explain(item, f"{path}[{index}]", depth + 1)
    elif kind is int:
        if not -MAX_INT <= value <= MAX_INT:
            raise PayloadError(path, f"integer {value} is outside +/-(2^53-1)")
    elif kind is float:
        if math.isnan(value):
            raise PayloadError(path, "NaN is not allowed")
        if math.isinf(value):
            raise PayloadError(path, "Infinity is not allowed")
        if MAX_INT < abs(value) < 1e21 and value.is_integer():
            # JCS writes it as integer digits, which read back as an integer out of range.
            raise PayloadError(path, f"number {value!r} reads back as an integer outside +/-(2^53-1)")
    elif not (kind is str or kind is bool or value is None):
        raise PayloadError(path, f"{kind.__name__} is not a JSON value")


def _walk(value: Any, path: str) -> bool:
    try:
        return _scan(value)
    except _Refused:
        _explain(value, path)
        raise AssertionError("the fast and slow payload walks disagree") from None


def _encode(value: Any, fast: bool, path: str) -> bytes:
    try:
        if fast:
            return _encode_fast(value).encode("utf-8")
        return rfc8785.dumps(value)
    except (UnicodeEncodeError, rfc8785.CanonicalizationError) as exc:
        raise PayloadError(path, "string is not valid Unicode (lone surrogate)") from exc


def canonical(value: Any, path: str = "value") -> bytes:
    """JCS bytes of ``value``; refuses what JSON (per the payload rules) cannot carry."""
    return _encode(value, _walk(value, path), path)


def check_payload(payload: Any) -> bytes:
    """Validate an event payload and return its JCS bytes."""
    if type(payload) is not dict:
        raise PayloadError("payload", f"must be a JSON object, not {type(payload).__name__}")
    return _encode(payload, _walk(payload, "payload"), "payload")


def blob_references(payload: Any, path: str = "payload") -> dict[str, str]:
    """Every blob a payload refers to (``{"blob": "sha256:<64 hex>", ...}`` anywhere in it): name -> path.

    A ``blob`` member whose value starts with ``sha256:`` but does not name a blob by 64
    lowercase hex is refused (``PayloadError``): a reference must not be able to name a
    file outside a bundle's ``blobs/``.
    """
    found: dict[str, str] = {}
    _references(payload, path, found)
    return found


def _references(value: Any, path: str, found: dict[str, str]) -> None:
    if isinstance(value, dict):
        ref = value.get("blob")
        if isinstance(ref, str) and ref.startswith("sha256:"):
            name = ref[len("sha256:"):]
            if not BLOB_NAME.fullmatch(name):
                raise PayloadError(f"{path}.blob", f"{ref[:40]!r} is not a blob reference (sha256: and 64 hex)")
            found.setdefault(name, path)
        for key, item in value.items():
            _references(item, _key_path(path, str(key)), found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _references(item, f"{path}[{index}]", found)
