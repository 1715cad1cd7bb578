"""The C2SP tlog-witness HTTP service (``tally witness serve``, ``docs/transparency.md``).

``WitnessService`` answers ``add-checkpoint`` and the monitor endpoint as plain values
(``Reply``); ``asgi_app`` puts it on HTTP for any ASGI server (tally runs uvicorn).
What the service checks, in the spec's order: a body that is not an add-checkpoint
request (400), an origin it does not witness (404), no verifying signature by a key
it trusts for the origin or a trusted key's signature that fails (403), then the
step (``witness_rules.judge``: 400, 409 with ``text/x.tlog.size``, 422). Only then
does it cosign, and the cosignature leaves only after the database took the new step
(``WitnessStore.advance``, a compare-and-swap); a lost race is judged again against
the step that won. A refused step that the log signed and that is inconsistent with
what was cosigned is kept in the evidence log.

The HTTP side bounds every request: a body larger than ``max_body`` is refused (413)
before it is read whole, reading it and answering it each have a deadline (408, 503),
and the ASGI server caps concurrent connections (503).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import b64
from . import note as notes
from .checkpoint import parse_checkpoint
from .errors import FormatError, TallyError, VerificationError
from .keys import Signer
from .witness_rules import INCONSISTENT, MAX_BODY_BYTES, judge, parse_add_checkpoint
from .witness_store import WitnessStore, origin_hash

__all__ = ["MAX_LOG_LIST_BYTES", "Reply", "WitnessService", "asgi_app", "parse_log_list"]

MAX_LOG_LIST_BYTES = 4 << 20
MAX_LOGS = 100_000
SIZE_TYPE = "text/x.tlog.size"
_RACE_TRIES = 3


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, body, content type."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


def parse_log_list(text: str) -> tuple[dict[str, list[notes.Verifier]], int]:
    """The witness network's ``logs/v0`` list: origin -> log keys, and how many entries were skipped.

    ``vkey <vkey>`` starts an entry (origin: the key's name), ``origin <origin>`` overrides
    it, ``qpd`` and ``contact`` are read and ignored; ``#`` comments and blank lines are
    skipped. A vkey of a signature type tally cannot verify skips its entry (counted); a
    malformed one (or one whose key ID does not match) refuses the list.
    """
    if len(text) > MAX_LOG_LIST_BYTES:
        raise FormatError(f"log list is larger than {MAX_LOG_LIST_BYTES} bytes")
    logs: dict[str, list[notes.Verifier]] = {}
    skipped = 0
    header = False
    current: list[Any] | None = None  # [origin, verifier or None]

    def flush() -> None:
        nonlocal skipped
        if current is None:
            return
        if current[1] is None:
            skipped += 1
            return
        logs.setdefault(current[0], [])
        if current[1] not in logs[current[0]]:
            logs[current[0]].append(current[1])

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.lower(), rest.strip()
        if not header:
            if keyword != "logs/v0":
                raise FormatError(f"log list line {number}: the first line must be 'logs/v0'")
            header = True
            continue
        if keyword == "logs/v0":
            raise FormatError(f"log list line {number}: a second 'logs/v0' header")
        if keyword == "vkey":
            flush()
            if not rest:
                raise FormatError(f"log list line {number}: vkey needs a key")
            verifier = None if _unsupported_type(rest) else notes.parse_vkey(rest)  # malformed: refused
            if verifier is not None and verifier.is_cosigner:
                raise FormatError(f"log list line {number}: a cosigner key (type 0x04) is not a log key")
            current = [rest.partition("+")[0], verifier]
        elif keyword in ("origin", "qpd", "contact"):
            if current is None or not rest:
                raise FormatError(f"log list line {number}: {keyword} outside a log entry, or empty")
            if keyword == "origin":
                current[0] = rest
        else:
            raise FormatError(f"log list line {number}: unexpected keyword {keyword[:30]!r}")
        if len(logs) > MAX_LOGS:
            raise FormatError(f"log list has more than {MAX_LOGS} logs")
    if not header:
        raise FormatError("log list has no 'logs/v0' header")
    flush()
    return logs, skipped


def _unsupported_type(vkey: str) -> bool:
    """A well-formed vkey of a signature type tally cannot verify (ML-DSA-44, RFC 6962 STH, ...)."""
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        return False
    try:
        raw = b64.decode(parts[2], "vkey key")
    except FormatError:
        return False
    return bool(raw) and raw[0] not in (notes.SIG_ED25519, notes.SIG_COSIGNATURE)


class WitnessService:
    """One witness: its name and key, the logs it witnesses, its database."""

    def __init__(self, store: WitnessStore, name: str, signer: Signer,
                 logs: Mapping[str, Iterable[notes.Verifier]], *, clock: Callable[[], float] = time.time) -> None:
        if not notes.is_valid_name(name):
            raise FormatError(f"witness name {name!r} must be non-empty, without spaces or '+'")
        self.store = store
        self.name = name
        self.signer = signer
        self.logs = {origin: list(keys) for origin, keys in logs.items()}
        self.by_hash = {origin_hash(origin): origin for origin in self.logs}
        self.clock = clock

    @property
    def vkey(self) -> str:
        return notes.vkey(self.name, self.signer.public_raw, notes.SIG_COSIGNATURE)

    def add_checkpoint(self, body: bytes) -> Reply:
        """The ``add-checkpoint`` answer to ``body``."""
        try:
            request = parse_add_checkpoint(body)
            parsed = notes.parse_note(request.note)
            checkpoint = parse_checkpoint(parsed.text)
        except FormatError as exc:
            return Reply(400, f"{exc}\n".encode())
        keys = self.logs.get(checkpoint.origin)
        if keys is None:
            return Reply(404, b"unknown log origin\n")
        try:
            opened = notes.open_note(parsed, keys)
        except (VerificationError, FormatError) as exc:
            return Reply(403, f"{exc}\n".encode())
        if not opened.signers(notes.SIG_ED25519):
            return Reply(403, b"no signature by a key trusted for this log\n")
        for _ in range(_RACE_TRIES):
            known = self.store.latest(checkpoint.origin)
            refusal = judge(None if known is None else known.checkpoint, request.old, checkpoint, request.proof)
            now = max(1, int(self.clock()))
            if refusal is not None:
                if refusal.kind == "stale":
                    return Reply(409, f"{refusal.known_size}\n".encode(), SIZE_TYPE)
                if refusal.kind in INCONSISTENT and known is not None:
                    proof = "".join(b64.encode(h) + "\n" for h in request.proof)
                    self.store.record_evidence(checkpoint.origin, refusal.kind, request.old, proof, known.note,
                                               request.note, now)
                return Reply(refusal.status, f"{refusal.message}\n".encode())
            line = notes.cosign(parsed.text, self.name, self.signer, now)
            stored = notes.with_signatures(request.note, [line])
            if self.store.advance(checkpoint.origin, 1 if known is None else known.step + 1, checkpoint, stored, now):
                return Reply(200, line.line().encode())
        return Reply(503, b"too many concurrent updates for this log; retry\n")

    def monitor(self, hexhash: str) -> Reply:
        """The latest cosigned checkpoint of the log whose origin hashes to ``hexhash`` (404: none)."""
        origin = self.by_hash.get(hexhash)
        known = None if origin is None else self.store.latest(origin)
        if known is None:
            return Reply(404, b"no checkpoint cosigned for this log\n")
        return Reply(200, known.note.encode())


_MONITOR = re.compile(r"/([0-9a-f]{64})/checkpoint")
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _respond(send: Send, reply: Reply) -> None:
    await send({"type": "http.response.start", "status": reply.status,
                "headers": [(b"content-type", reply.content_type.encode()),
                            (b"content-length", str(len(reply.body)).encode()),
                            (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": reply.body})


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def asgi_app(service: WitnessService, *, prefix: str = "", max_body: int = MAX_BODY_BYTES,
             read_timeout: float = 10.0, answer_timeout: float = 20.0
             ) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    """An ASGI application serving ``service`` under ``prefix`` (``/add-checkpoint``, ``/<hash>/checkpoint``)."""
    prefix = prefix.rstrip("/")

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        if not path.startswith(prefix + "/"):
            await _respond(send, Reply(404, b"not found\n"))
            return
        rest = path[len(prefix):]
        if rest == "/add-checkpoint":
            if method != "POST":
                await _respond(send, Reply(405, b"add-checkpoint takes POST\n"))
                return
            declared = dict(scope.get("headers", [])).get(b"content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > max_body):
                await _respond(send, Reply(413, f"the body is larger than {max_body} bytes\n".encode()))
                return
            try:
                body = await asyncio.wait_for(_read_body(receive, max_body), read_timeout)
            except TimeoutError:
                await _respond(send, Reply(408, b"the body was not sent in time\n"))
                return
            if body is None:
                await _respond(send, Reply(413, f"the body is larger than {max_body} bytes\n".encode()))
                return
            await _respond(send, await _answer(service.add_checkpoint, body, answer_timeout))
            return
        match = _MONITOR.fullmatch(rest)
        if match is not None and method in ("GET", "HEAD"):
            await _respond(send, await _answer(service.monitor, match.group(1), answer_timeout))
            return
        await _respond(send, Reply(404, b"not found\n"))

    return app


async def _answer(handler: Callable[[Any], Reply], argument: Any, timeout: float) -> Reply:
    """``handler(argument)`` on a worker thread, bounded in time; a database failure is a 503, never a traceback."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(handler, argument), timeout)
    except TimeoutError:
        return Reply(503, b"the witness did not answer in time; retry\n")
    except TallyError as exc:
        return Reply(503, f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}\n".encode())
