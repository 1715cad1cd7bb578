"""The receipts the qualification and RNG gates read (formats in docs/gates.md).

Admission receipt (``tally.admission-receipt/v1``)::

    {"_type": "tally.admission-receipt/v1", "verdict": "QUALIFIED" | "NOT_QUALIFIED",
     "commit": "<qualified commit, full sha>", "prepared_verifier_sha256": "<64 hex>",
     "window": "<admission window id>", "issued_at": "...", "evidence": {...}}

RNG receipt (``tally.rng-receipt/v1``)::

    {"_type": "tally.rng-receipt/v1", "verdict": "PASS" | "FAIL", "commit": "<HEAD, full sha>",
     "kernel_sha256": "<64 hex>", "tests": [{"name": "...", "outcome": "passed" | "failed"}]}

Either may also arrive as a DSSE envelope whose payload is an in-toto Statement with the
receipt as its ``predicate`` (the transparency layer's receipts); the envelope's signature
is checked by ``tally receipt verify``, not here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import FieldError, FormatError
from ledger.strictfile import read_limited
from ledger.strictjson import read_json

__all__ = ["AdmissionReceipt", "RngReceipt", "read_admission_receipt", "read_rng_receipt"]

_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_RECEIPT_BYTES = 4 << 20  # an admission or RNG receipt is a few kilobytes


def _load(path: Path, what: str) -> tuple[dict[str, Any], str]:
    data = read_limited(path, what, MAX_RECEIPT_BYTES)
    obj = read_json(data, f"{what} {path}")  # bounded nesting, duplicate members refused
    if not isinstance(obj, dict):
        raise FormatError(f"{what} {path} is not a JSON object")
    if "payloadType" in obj and "payload" in obj:  # DSSE envelope around an in-toto Statement
        try:
            statement = read_json(base64.b64decode(obj["payload"], validate=True), f"{what} {path} DSSE payload")
        except (binascii.Error, ValueError, TypeError) as exc:
            raise FormatError(f"{what} {path}: DSSE payload is not base64 JSON: {exc}") from None
        predicate = statement.get("predicate") if isinstance(statement, dict) else None
        if not isinstance(predicate, dict):
            raise FormatError(f"{what} {path}: DSSE statement has no predicate object")
        obj = predicate
    return obj, hashlib.sha256(data).hexdigest()


def _field(obj: dict[str, Any], key: str, pattern: re.Pattern[str] | None, what: str, path: Path) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        raise FieldError(key, "missing or malformed", source=f"{what} {path}")
    return value


@dataclass(frozen=True)
class AdmissionReceipt:
    verdict: str
    commit: str
    prepared_verifier_sha256: str | None
    window: str | None
    sha256: str
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "verdict": self.verdict, "commit": self.commit,
                "prepared_verifier_sha256": self.prepared_verifier_sha256, "window": self.window}


@dataclass(frozen=True)
class RngReceipt:
    verdict: str
    commit: str
    kernel_sha256: str
    tests: tuple[tuple[str, str], ...]
    sha256: str
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "verdict": self.verdict, "commit": self.commit,
                "kernel_sha256": self.kernel_sha256,
                "tests": [{"name": name, "outcome": outcome} for name, outcome in self.tests]}


def read_admission_receipt(path: Path) -> AdmissionReceipt:
    what = "admission receipt"
    obj, digest = _load(path, what)
    verdict = _field(obj, "verdict", None, what, path)
    commit = _field(obj, "commit", _COMMIT, what, path)
    prepared = obj.get("prepared_verifier_sha256")
    if prepared is not None and (not isinstance(prepared, str) or not _SHA256.fullmatch(prepared)):
        raise FieldError("prepared_verifier_sha256", "malformed", source=f"{what} {path}")
    window = obj.get("window") if isinstance(obj.get("window"), str) else None
    return AdmissionReceipt(verdict, commit, prepared, window, digest, str(path))


def read_rng_receipt(path: Path) -> RngReceipt:
    what = "RNG receipt"
    obj, digest = _load(path, what)
    verdict = _field(obj, "verdict", None, what, path)
    commit = _field(obj, "commit", _COMMIT, what, path)
    kernel = _field(obj, "kernel_sha256", _SHA256, what, path)
    tests_raw = obj.get("tests", [])
    if not isinstance(tests_raw, list):
        raise FieldError("tests", "must be an array", source=f"{what} {path}")
    tests = []
    for index, item in enumerate(tests_raw):
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("outcome"), str)):
            raise FieldError(f"tests[{index}]", "needs name and outcome strings", source=f"{what} {path}")
        tests.append((item["name"], item["outcome"]))
    return RngReceipt(verdict, commit, kernel, tuple(tests), digest, str(path))
