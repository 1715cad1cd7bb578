"""Collecting cosignatures from HTTP witnesses under a quorum policy (``docs/transparency.md``).

The policy is a C2SP ``tlog-policy`` file: ``log <vkey> [url]``, ``witness <name> <vkey>
<url>``, ``group <name> <k|all|any> <member>...``, ``quorum <name|none>`` (``#`` comments).
``collect_cosignatures`` asks every witness of the policy at once (one thread each,
its own deadline) and keeps what Tessera's client does:

- it starts from ``old 0``; a 409 names the witness's size, which it adopts and retries
  (at most 3 tries, backing off 10 ms, then x5, at most 250 ms); a 409 size larger
  than the checkpoint's is fatal for that witness (it knows a bigger tree than the log);
- one consistency proof per old size, shared by the witnesses that need it;
- every returned line is verified (a cosignature/v1 by that witness's key over this
  checkpoint) before it is attached; a reply with none that verifies counts as a failure;
- the quorum is evaluated on what verified; short of it, ``ExternalError`` names each
  witness's failure (fail closed) unless the caller asks for what was collected.

Replies are hostile input: a body is read up to ``MAX_REPLY_BYTES``, each request has a
deadline, redirects are not followed. Each request goes through a ``Post``; the default
(``httpx_post``) bounds every read by what is left and checks the deadline between the
chunks of the body. ``tally checkpoint --witnesses`` passes one whose deadline covers the
whole exchange, headers included, however a witness dribbles (``runner.measure.fetch``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from . import b64
from . import note as notes
from .checkpoint import parse_checkpoint
from .errors import ExternalError, FormatError, PolicyError, VerificationError

__all__ = ["MAX_POLICY_BYTES", "MAX_REPLY_BYTES", "Collected", "Policy", "PolicyWitness", "Post",
           "collect_cosignatures", "httpx_post", "parse_policy"]

MAX_POLICY_BYTES = 1 << 20
MAX_REPLY_BYTES = 64 << 10
MAX_TRIES = 3
BACKOFF_FIRST_S, BACKOFF_FACTOR, BACKOFF_MAX_S = 0.010, 5, 0.250
ProofFetch = Callable[[int, int], Sequence[bytes]]
Post = Callable[[str, bytes, float], tuple[int, str, bytes]]
"""POST a body to a URL, the exchange within the deadline (seconds): (status, content type, body of at most
``MAX_REPLY_BYTES``); ``ExternalError`` when it does not answer so."""


@dataclass(frozen=True)
class PolicyWitness:
    name: str
    verifier: notes.Verifier
    url: str | None


@dataclass(frozen=True)
class Policy:
    """A parsed tlog-policy: log keys, witnesses by name, groups, the quorum name (None: ``none``)."""

    logs: tuple[notes.Verifier, ...]
    witnesses: dict[str, PolicyWitness]
    groups: dict[str, tuple[int, tuple[str, ...]]]
    quorum: str | None

    def satisfied(self, cosigned: set[str], name: str | None = None) -> bool:
        """Whether the witnesses named in ``cosigned`` meet the quorum (or the group ``name``)."""
        target = self.quorum if name is None else name
        if target is None:
            return True
        if target in self.witnesses:
            return target in cosigned
        need, members = self.groups[target]
        return sum(self.satisfied(cosigned, m) for m in members) >= need


def parse_policy(text: str) -> Policy:
    """Parse a tlog-policy file; ``FormatError`` names the line."""
    if len(text) > MAX_POLICY_BYTES:
        raise FormatError(f"policy file is larger than {MAX_POLICY_BYTES} bytes")
    logs: list[notes.Verifier] = []
    witnesses: dict[str, PolicyWitness] = {}
    groups: dict[str, tuple[int, tuple[str, ...]]] = {}
    quorum: str | None = None
    seen_quorum = False
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.replace("\t", " ").split()
        if not words or words[0].startswith("#"):
            continue
        keyword, args = words[0], words[1:]
        where = f"policy line {number}"
        if keyword == "log" and len(args) in (1, 2):
            verifier = notes.parse_vkey(args[0])
            if verifier.is_cosigner:
                raise FormatError(f"{where}: a log key must be type 0x01, not a cosigner key")
            logs.append(verifier)
        elif keyword == "witness" and len(args) in (2, 3):
            name = args[0]
            if name == "none" or name in witnesses or name in groups:
                raise FormatError(f"{where}: the name {name!r} is taken")
            verifier = notes.parse_vkey(args[1])
            if not verifier.is_cosigner:
                raise FormatError(f"{where}: a witness key must be a cosigner key (type 0x04)")
            if any(w.verifier.public_raw == verifier.public_raw for w in witnesses.values()):
                raise FormatError(f"{where}: the same witness key is listed twice")
            url = args[2] if len(args) == 3 else None
            if url is not None and not url.startswith(("http://", "https://")):
                raise FormatError(f"{where}: the witness URL must be http:// or https://")
            witnesses[name] = PolicyWitness(name, verifier, url)
        elif keyword == "group" and len(args) >= 3:
            name, threshold, members = args[0], args[1], tuple(args[2:])
            if name == "none" or name in witnesses or name in groups:
                raise FormatError(f"{where}: the name {name!r} is taken")
            unknown = [m for m in members if m not in witnesses and m not in groups]
            if unknown or len(set(members)) != len(members):
                raise FormatError(f"{where}: members must be distinct witnesses or groups defined above")
            if threshold == "all":
                need = len(members)
            elif threshold == "any":
                need = 1
            elif threshold.isdigit() and 1 <= int(threshold) <= len(members):
                need = int(threshold)
            else:
                raise FormatError(f"{where}: the threshold must be all, any or 1..{len(members)}")
            groups[name] = (need, members)
        elif keyword == "quorum" and len(args) == 1:
            if seen_quorum:
                raise FormatError(f"{where}: a second quorum line")
            seen_quorum = True
            if args[0] != "none" and args[0] not in witnesses and args[0] not in groups:
                raise FormatError(f"{where}: the quorum names no witness or group defined above")
            quorum = None if args[0] == "none" else args[0]
        else:
            raise FormatError(f"{where}: expected log, witness, group or quorum with its arguments")
    if not seen_quorum:
        raise FormatError("the policy has no quorum line")
    return Policy(tuple(logs), witnesses, groups, quorum)


@dataclass
class Collected:
    """What the witnesses gave: the verified lines by witness name, and why the others failed."""

    lines: dict[str, notes.NoteSignature] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    quorum: bool = False


class _Proofs:
    """One consistency proof per old size, computed once however many witnesses need it."""

    def __init__(self, fetch: ProofFetch, new: int) -> None:
        self.fetch, self.new = fetch, new
        self.lock = threading.Lock()
        self.done: dict[int, tuple[bytes, ...]] = {}
        self.calls = 0

    def get(self, old: int) -> tuple[bytes, ...]:
        if old in (0, self.new):
            return ()
        with self.lock:
            if old not in self.done:
                self.calls += 1
                self.done[old] = tuple(self.fetch(old, self.new))
            return self.done[old]


def httpx_post(url: str, body: bytes, deadline_s: float) -> tuple[int, str, bytes]:
    """The default ``Post``: httpx, no redirects, each read bounded by what is left of the deadline."""
    import httpx

    deadline = time.monotonic() + deadline_s
    try:
        with httpx.Client(timeout=deadline_s, follow_redirects=False) as client, \
                client.stream("POST", url, content=body) as response:
            chunks, total = [], 0
            for chunk in response.iter_bytes():
                total += len(chunk)
                if total > MAX_REPLY_BYTES:
                    raise ExternalError(f"reply larger than {MAX_REPLY_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ExternalError(f"no whole answer within {deadline_s:g} s")
                chunks.append(chunk)
            return response.status_code, response.headers.get("content-type", ""), b"".join(chunks)
    except httpx.HTTPError as exc:
        raise ExternalError(f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _ask(witness: PolicyWitness, note: str, size: int, proofs: _Proofs, timeout: float,
         sleep: Callable[[float], None], post: Post) -> notes.NoteSignature:
    """One witness's cosignature for ``note`` (Tessera's retry rules); raises with the reason."""
    assert witness.url is not None
    url = witness.url.rstrip("/") + "/add-checkpoint"
    text = notes.parse_note(note).text
    old, delay = 0, BACKOFF_FIRST_S
    deadline = time.monotonic() + timeout
    for attempt in range(MAX_TRIES):
        body = "".join([f"old {old}\n", *(b64.encode(h) + "\n" for h in proofs.get(old)), "\n", note])
        left = deadline - time.monotonic()
        if left <= 0:
            raise ExternalError(f"no answer within {timeout:g} s")
        status, kind, reply = post(url, body.encode("utf-8"), left)
        if status == 200:
            return _verified_line(witness, text, reply)
        if status == 409 and kind.split(";")[0].strip() == "text/x.tlog.size":
            told = reply.decode("ascii", "replace").strip()
            if not told.isdigit() or len(told) > 19:
                raise ExternalError(f"409 with a body that is not a size: {told[:40]!r}")
            if int(told) > size:
                raise PolicyError(f"the witness has cosigned size {told}, larger than this log's {size}")
            old = int(told)
            if attempt + 1 < MAX_TRIES:
                sleep(delay)
                delay = min(delay * BACKOFF_FACTOR, BACKOFF_MAX_S)
            continue
        first = reply.decode("utf-8", "replace").strip().splitlines()[:1]
        raise ExternalError(f"HTTP {status}{': ' + first[0][:200] if first else ''}")
    raise ExternalError(f"still out of date after {MAX_TRIES} tries (409)")


def _verified_line(witness: PolicyWitness, text: str, reply: bytes) -> notes.NoteSignature:
    try:
        block = reply.decode("utf-8")
        parsed = notes.parse_note(text + "\n" + block)
        opened = notes.open_note(parsed, [witness.verifier])
    except (FormatError, VerificationError) as exc:
        raise VerificationError(f"its reply does not verify: {exc}", rule="witness") from None
    cosigs = [v for v in opened.signers(notes.SIG_COSIGNATURE) if v.timestamp]
    if not cosigs:
        raise VerificationError("its reply has no timestamped cosignature by its key", rule="witness")
    return cosigs[0].signature


def collect_cosignatures(note: str, policy: Policy, proof_for: ProofFetch, *, timeout: float = 10.0,
                         fail_open: bool = False, sleep: Callable[[float], None] = time.sleep,
                         post: Post = httpx_post) -> Collected:
    """Cosignatures on the log-signed ``note`` from the policy's witnesses; ``ExternalError`` short of quorum."""
    size = parse_checkpoint(notes.parse_note(note).text).size
    asked = [w for w in policy.witnesses.values() if w.url is not None]
    proofs = _Proofs(proof_for, size)
    collected = Collected()
    if asked:
        with ThreadPoolExecutor(max_workers=min(16, len(asked))) as pool:
            futures = {w.name: pool.submit(_ask, w, note, size, proofs, timeout, sleep, post) for w in asked}
            for name, future in futures.items():
                try:
                    collected.lines[name] = future.result()
                except Exception as exc:  # each witness's failure is reported, none stops the others
                    collected.failures[name] = str(exc.args[0]) if exc.args else type(exc).__name__
    collected.quorum = policy.satisfied(set(collected.lines))
    if not collected.quorum and not fail_open:
        reasons = "; ".join(f"{name}: {why}" for name, why in sorted(collected.failures.items()))
        raise ExternalError(f"witness quorum not met: {len(collected.lines)} of {len(policy.witnesses)} witnesses "
                          f"cosigned ({reasons or 'no witness has a URL'}); nothing cosigned is printed")
    return collected
