"""An independent verifier of an exported ``events.jsonl``, written from docs/format.md only.

It must not import ``ledger``: it re-derives everything from the contract (JCS via
``rfc8785``, SHA-256, the signing prefix, key ids, key events) so that a bug shared by
the writer and tally's own verifier cannot hide.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import date
from pathlib import Path

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

BODY_MEMBERS = {"v", "ledger", "seq", "prev", "stream", "type", "time", "actor", "payload"}
LEDGER_ID = re.compile(r"[0-9a-f]{32}")
TYPE = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")
TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.[0-9]{6}Z")


def _well_formed(event: dict) -> bool:
    """The body table of docs/format.md: ledger id, stream characters, type words, a real UTC time."""
    stream, found = event["stream"], TIME.fullmatch(event["time"])
    if not LEDGER_ID.fullmatch(event["ledger"]) or not TYPE.fullmatch(event["type"]) or found is None:
        return False
    if not stream or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF for c in stream):
        return False
    year, month, day, hour, minute, second = (int(part) for part in found.groups())
    try:
        date(year, month, day)
    except ValueError:
        return False
    return hour < 24 and minute < 60 and second < 60


class CheckFailed(Exception):
    def __init__(self, seq: int, rule: int, why: str) -> None:
        super().__init__(f"seq {seq} rule {rule}: {why}")
        self.seq, self.rule = seq, rule


def check_events_jsonl(path: Path) -> tuple[int, str]:
    """Verify rules 1-7 over the file; returns (size, head hash)."""
    keys: dict[str, dict] = {}  # id -> {"public": bytes, "roles": [...], "revoked": seq|None}
    expected_prev = "0" * 64
    ledger_id = None
    seq = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        seq += 1
        if event["seq"] != seq:
            raise CheckFailed(seq, 1, "seq not contiguous")
        if event["prev"] != expected_prev:
            raise CheckFailed(seq, 2, "prev mismatch")
        ledger_id = ledger_id or event["ledger"]
        if event["ledger"] != ledger_id:
            raise CheckFailed(seq, 3, "ledger id changed")
        if event["v"] != 1 or not _well_formed(event):
            raise CheckFailed(seq, 4, "malformed body")
        body = {name: event[name] for name in BODY_MEMBERS}
        digest = hashlib.sha256(rfc8785.dumps(body)).digest()
        if digest.hex() != event["hash"]:
            raise CheckFailed(seq, 4, "hash mismatch")
        payload = event["payload"]
        if seq == 1:
            assert event["type"] == "ledger.created"
            for entry in payload["keys"]:
                public = base64.b64decode(entry["public_key"])
                assert hashlib.sha256(public).hexdigest() == entry["id"]
                keys[entry["id"]] = {"public": public, "roles": entry["roles"], "revoked": None}
        key = keys.get(event["actor"])
        if key is None or (key["revoked"] is not None and key["revoked"] < seq):
            raise CheckFailed(seq, 5, "actor unknown or revoked")
        if not {"root", "signer"} & set(key["roles"]):
            raise CheckFailed(seq, 5, "actor holds no role that signs events")
        try:
            Ed25519PublicKey.from_public_bytes(key["public"]).verify(
                base64.b64decode(event["sig"]), b"tally-event-v1\n" + digest
            )
        except InvalidSignature:
            raise CheckFailed(seq, 6, "bad signature") from None
        if event["type"] in ("ledger.created", "key.added", "key.revoked"):
            if "root" not in key["roles"]:
                raise CheckFailed(seq, 7, "key event not signed by root")
            if event["type"] == "key.added":
                public = base64.b64decode(payload["public_key"])
                assert hashlib.sha256(public).hexdigest() == payload["id"]
                keys[payload["id"]] = {"public": public, "roles": payload["roles"], "revoked": None}
            elif event["type"] == "key.revoked":
                keys[payload["id"]]["revoked"] = seq
        expected_prev = event["hash"]
    return seq, expected_prev
