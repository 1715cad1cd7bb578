"""The event (``docs/format.md``, events): body, hash, signature, and its exported line.

The body is never re-serialised from parsed JSON: the payload is kept as the JCS
bytes it was hashed with, and the body bytes are spliced together from the members in
JCS order (``actor, ledger, payload, prev, seq, stream, time, type, v``). Every string
member goes through the JCS string encoder, so a body built from tampered stored
values is still the JCS of what is stored, and its hash shows the tampering.

The syntax of the body's string members (``docs/format.md``, the body) is checked in one
place, ``body_problem``: ``ledger`` is 32 lowercase hex; ``stream`` a non-empty string
with no control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F) and no
surrogate; ``type`` dotted lowercase words; ``time`` ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, a
real date and time. The store refuses to append what it names (``tally append``, exit
2) and the verifier fails the event on it (rule 4).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import cached_property, lru_cache
from typing import Any

from .canonical import MAX_BODY_BYTES, check_payload, json_string
from .errors import FormatError, PayloadError

__all__ = [
    "GENESIS_PREV",
    "MAX_SEQ",
    "SIGNING_PREFIX",
    "Event",
    "body_bytes",
    "body_problem",
    "check_seq",
    "event_from_json",
    "format_time",
    "member_problem",
    "signing_message",
]

GENESIS_PREV = "0" * 64
SIGNING_PREFIX = b"tally-event-v1\n"
MAX_SEQ = 2**63 - 1  # seq (and a tree size) is a signed 64-bit integer in both databases


def check_seq(value: int, name: str, low: int = 1) -> int:
    """A seq or a size the database can hold (``low`` .. 2^63-1); ``FormatError`` otherwise, before any query."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_SEQ:
        raise FormatError(f"{name} {value!r} is out of range ({low} .. 2^63-1)")
    return value


_LEDGER_ID = re.compile(r"[0-9a-f]{32}")
_TYPE = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)+")
_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}Z")
_NOT_IN_STREAM = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # control characters (Cc), surrogates


@lru_cache(maxsize=256)
def _real_date(year: str, month: str, day: str) -> bool:
    try:
        date(int(year), int(month), int(day))
    except ValueError:
        return False
    return True


def member_problem(name: str, value: object) -> str | None:
    """What is wrong with body member ``name`` (``ledger``, ``stream``, ``type``, ``time``), or None.

    The rules of ``docs/format.md`` (the body); ``value`` is what a caller or a stored
    row holds, of any type.
    """
    if not isinstance(value, str):
        return f"{name} is not a string"
    if name == "ledger":
        return None if _LEDGER_ID.fullmatch(value) else f"ledger id {value[:40]!r} is not 32 lowercase hex characters"
    if name == "stream":
        if not value:
            return "stream is empty"
        bad = _NOT_IN_STREAM.search(value)
        if bad is None:
            return None
        what = "a surrogate" if bad.group() >= "\ud800" else "a control character"
        return f"stream {value[:40]!r} contains {what} (U+{ord(bad.group()):04X})"
    if name == "type":
        return None if _TYPE.fullmatch(value) else \
            f"type {value[:40]!r} is not dotted lowercase words ([a-z0-9_]+ joined by dots, e.g. gate.result)"
    if name == "time":
        found = _TIME.fullmatch(value)
        if found is None or not _real_date(*found.groups()):
            return f"time {value[:40]!r} is not a UTC time YYYY-MM-DDTHH:MM:SS.ffffffZ"
        return None
    raise ValueError(f"no syntax rule for body member {name!r}")


def body_problem(event: Event) -> str | None:
    """The first body member of ``event`` whose syntax is wrong (``member_problem``), or None."""
    for name, value in (("ledger", event.ledger), ("stream", event.stream), ("type", event.type),
                        ("time", event.time)):
        problem = member_problem(name, value)
        if problem is not None:
            return problem
    return None


def format_time(moment: datetime | None = None) -> str:
    """UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (always six fraction digits)."""
    moment = moment or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body_bytes(
    *,
    ledger: str,
    seq: int,
    prev: str,
    stream: str,
    type: str,
    time: str,
    actor: str,
    payload_json: str,
    v: int = 1,
) -> bytes:
    """JCS bytes of an event body, the payload given as its JCS text."""
    js = json_string
    return (BODY_TEMPLATE % (js(actor), js(ledger), payload_json, js(prev), seq, js(stream), js(time), js(type), v)
            ).encode("utf-8")


# The body's JCS bytes with every string member JCS-encoded (%s) and integers as %d.
BODY_TEMPLATE = (
    '{"actor":%s,"ledger":%s,"payload":%s,"prev":%s,"seq":%d,"stream":%s,"time":%s,"type":%s,"v":%d}'
)


def signing_message(hash_hex: str) -> bytes:
    """What Ed25519 signs for an event: the prefix and the raw 32-byte hash."""
    return SIGNING_PREFIX + bytes.fromhex(hash_hex)


@dataclass(frozen=True)
class Event:
    """One stored event: the body members plus ``hash`` and ``sig``.

    ``payload_json`` holds the payload's JCS text exactly as hashed; ``payload`` parses
    it on first use.
    """

    ledger: str
    seq: int
    prev: str
    stream: str
    type: str
    time: str
    actor: str
    payload_json: str
    hash: str
    sig: str
    v: int = field(default=1)

    @cached_property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.payload_json)
        if not isinstance(value, dict):
            raise FormatError(f"seq {self.seq}: payload is not a JSON object")
        return value

    def body(self) -> bytes:
        return body_bytes(
            ledger=self.ledger,
            seq=self.seq,
            prev=self.prev,
            stream=self.stream,
            type=self.type,
            time=self.time,
            actor=self.actor,
            payload_json=self.payload_json,
            v=self.v,
        )

    def computed_hash(self) -> str:
        return hashlib.sha256(self.body()).hexdigest()

    @property
    def raw_hash(self) -> bytes:
        return bytes.fromhex(self.hash)

    @property
    def raw_sig(self) -> bytes:
        return base64.b64decode(self.sig, validate=True)

    def line(self) -> str:
        """The event as one JCS JSON line (body members plus ``hash`` and ``sig``)."""
        return (
            '{"actor":' + json_string(self.actor)
            + ',"hash":' + json_string(self.hash)
            + ',"ledger":' + json_string(self.ledger)
            + ',"payload":' + self.payload_json
            + ',"prev":' + json_string(self.prev)
            + ',"seq":' + str(self.seq)
            + ',"sig":' + json_string(self.sig)
            + ',"stream":' + json_string(self.stream)
            + ',"time":' + json_string(self.time)
            + ',"type":' + json_string(self.type)
            + ',"v":' + str(self.v) + "}"
        )

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object (what ``--json`` prints)."""
        result: dict[str, Any] = json.loads(self.line())
        return result


def check_body_size(size: int) -> None:
    if size > MAX_BODY_BYTES:
        raise PayloadError("payload", f"event body of {size} bytes is over the 1 MiB limit; store it as a blob")


_MEMBERS = ("v", "ledger", "seq", "prev", "stream", "type", "time", "actor", "payload", "hash", "sig")


def event_from_json(obj: Any, where: str = "event") -> Event:
    """An ``Event`` from an exported JSON object, re-canonicalising its payload.

    Refuses objects whose members are not exactly those of an event (``docs/format.md``) (with the types it
    names); it does not check hashes or signatures: that is ``verify``'s work.
    """
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: not a JSON object")
    if set(obj) != set(_MEMBERS):
        missing = sorted(set(_MEMBERS) - set(obj))
        extra = sorted(set(obj) - set(_MEMBERS))
        raise FormatError(f"{where}: members differ from an event's (missing {missing}, extra {extra})")
    for name in ("ledger", "prev", "stream", "type", "time", "actor", "hash", "sig"):
        if not isinstance(obj[name], str):
            raise FormatError(f"{where}: {name} is not a string")
    if type(obj["seq"]) is not int or type(obj["v"]) is not int:
        raise FormatError(f"{where}: seq and v must be integers")
    payload_json = check_payload(obj["payload"]).decode("utf-8")
    return Event(
        v=obj["v"],
        ledger=obj["ledger"],
        seq=obj["seq"],
        prev=obj["prev"],
        stream=obj["stream"],
        type=obj["type"],
        time=obj["time"],
        actor=obj["actor"],
        payload_json=payload_json,
        hash=obj["hash"],
        sig=obj["sig"],
    )
