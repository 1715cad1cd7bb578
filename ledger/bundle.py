"""Export bundles (``docs/format.md``, export bundles): what an auditor needs, with no database.

A bundle directory holds ``manifest.json``, ``events.jsonl`` (one event per line,
JCS, in seq order), ``checkpoint.txt`` (the newest checkpoint covering every exported
event), ``blobs/<sha256>``, and for a partial (``--stream``) export ``proofs.jsonl``
(one inclusion proof per event against ``checkpoint.txt``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from . import merkle
from .errors import FormatError, VerificationError
from .event import Event, event_from_json, format_time, signing_message
from .keys import KEY_EVENT_TYPES, KeyRing, Signer, verify_signature
from .stored import referenced_blobs
from .verify import verify_events

__all__ = ["BUNDLE_FORMAT", "VerifiedBundle", "export_bundle", "verify_bundle"]

BUNDLE_FORMAT = "tally-bundle/v1"


def _tally_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tally")
    except PackageNotFoundError:
        return "unknown"


def _prepare_target(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FormatError(f"{out} exists and is not an empty directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))


def export_bundle(book: Any, out: Path, *, stream: str | None = None, signer: Signer | None = None,
                  with_streams: Sequence[str] = ()) -> dict[str, Any]:
    """Write a bundle of ``book`` (a ``Ledger``) to ``out``; returns the manifest.

    A partial bundle (``stream``) carries the key events, and the events of
    ``with_streams`` too (streams the caller's verdicts rest on; the ledger does not
    know which those are).
    """
    out = Path(out)
    tmp = _prepare_target(out)
    try:
        manifest = _write(book, tmp, stream, signer, tuple(with_streams))
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _bundle_events(book: Any, size: int, stream: str | None, with_streams: tuple[str, ...]) -> Iterator[Event]:
    """A full export's events, or a stream's events plus every key event (seq order).

    A partial bundle carries the key events so that an auditor can check every
    signature with the key ring the ledger had at each seq.
    """
    if stream is None:
        yield from book.events(0, until=size)
        return
    from heapq import merge

    keys = book.events(0, until=size, types=sorted(KEY_EVENT_TYPES)) if stream != "ledger" else iter(())
    others = [book.events(0, until=size, stream=name) for name in dict.fromkeys(with_streams) if name != stream]
    yield from merge(book.events(0, until=size, stream=stream), keys, *others, key=lambda e: e.seq)


def _write(book: Any, tmp: Path, stream: str | None, signer: Signer | None,
           with_streams: tuple[str, ...]) -> dict[str, Any]:
    from .receipt import write_bundle_proofs

    size, head = book.head()
    blobs: set[str] = set()
    seqs: list[int] = []
    digest = hashlib.sha256()
    with open(tmp / "events.jsonl", "w", encoding="utf-8", newline="\n") as handle:
        for event in _bundle_events(book, size, stream, with_streams):
            line = event.line() + "\n"
            handle.write(line)
            digest.update(line.encode("utf-8"))
            blobs |= referenced_blobs(event)
            seqs.append(event.seq)
    files = {"events.jsonl": digest.hexdigest()}
    if blobs:
        (tmp / "blobs").mkdir()
        for sha in sorted(blobs):
            blob = book.blob(sha)
            if blob is None:
                raise FormatError(f"blob {sha} is referenced but absent from the ledger")
            (tmp / "blobs" / sha).write_bytes(blob.data)
            files[f"blobs/{sha}"] = sha
    proofs = write_bundle_proofs(book, tmp, size, stream, signer, seqs)
    checkpoint_size = proofs.pop("checkpoint_size")
    files.update(proofs)
    manifest = {
        "format": BUNDLE_FORMAT,
        "origin": book.info.origin,
        "ledger": book.info.ledger_id,
        "tally_version": _tally_version(),
        "exported_at": format_time(),
        "ledger_size": size,
        "ledger_head": head,
        "stream": stream,
        "partial": stream is not None,
        "events": len(seqs),
        "first_seq": seqs[0] if seqs else None,
        "last_seq": seqs[-1] if seqs else None,
        "checkpoint_size": checkpoint_size,
        "blobs": len(blobs),
        "files": files,
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


# ---------------------------------------------------------------------------
# Auditing a bundle offline.


@dataclass(frozen=True)
class VerifiedBundle:
    """What the bundle proved: its events, checkpoint, blobs, and the trust it rests on."""

    path: Path
    origin: str
    ledger_id: str
    partial: bool
    stream: str | None
    events: tuple[Event, ...]
    checkpoint: Any  # ledger.checkpoint.VerifiedCheckpoint
    blobs: int
    trust: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": str(self.path), "origin": self.origin, "ledger": self.ledger_id, "partial": self.partial,
            "stream": self.stream, "events": len(self.events),
            "first_seq": self.events[0].seq if self.events else None,
            "last_seq": self.events[-1].seq if self.events else None,
            "checkpoint": self.checkpoint.to_json(), "blobs": self.blobs, "trust": list(self.trust),
        }


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise VerificationError(f"the bundle has no {what}", rule="bundle") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"cannot read {path}: {exc}") from None


def _load_events(text: str) -> list[Event]:
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise VerificationError(f"events.jsonl line {number} is not JSON ({exc.msg})", rule="bundle") from None
        try:
            events.append(event_from_json(obj, f"events.jsonl line {number}"))
        except FormatError as exc:
            raise VerificationError(str(exc), rule="bundle") from None
    return events


def verify_bundle(
    path: Path,
    *,
    root_key: str | None = None,
    vkeys: Sequence[str] = (),
    witness_threshold: int = 0,
) -> VerifiedBundle:
    """Verify an exported bundle with nothing but its files (``docs/format.md``, export bundles).

    A full bundle is checked by its chain (rules 1-7, 9) and its checkpoint (rule 8:
    signed by a log key, root equal to the Merkle root of its events); a partial one by
    hashes, signatures under the key ring its key events build, and one inclusion proof
    per event against the checkpoint. Blobs are checked against their digests and every
    referenced blob must be present. Trust rests on ``root_key`` (pinned genesis root)
    and/or ``vkeys`` (the log's published vkey, plus witnesses); without either, the
    bundle is only shown to be self-consistent, and ``trust`` says so.
    """
    from .checkpoint import log_verifiers, open_checkpoint
    from .note import parse_vkey
    from .receipt import verify_bundle_proofs

    path = Path(path)
    if not path.is_dir():
        raise FormatError(f"{path} is not a bundle directory")
    try:
        manifest = json.loads(_read(path / "manifest.json", "manifest.json"))
    except json.JSONDecodeError as exc:
        raise VerificationError(f"manifest.json is not JSON ({exc.msg})", rule="bundle") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise VerificationError(f"manifest.json is not a {BUNDLE_FORMAT} manifest", rule="bundle")
    events = _load_events(_read(path / "events.jsonl", "events.jsonl"))
    if not events:
        raise VerificationError("events.jsonl holds no events", rule="bundle")
    note = _read(path / "checkpoint.txt", "checkpoint.txt")
    partial = bool(manifest.get("partial"))
    log_keys = [parse_vkey(v) for v in vkeys if not parse_vkey(v).is_cosigner]
    witnesses = [parse_vkey(v) for v in vkeys if parse_vkey(v).is_cosigner]
    trust = []
    if root_key:
        trust.append(f"root key {root_key} pinned")
    if log_keys:
        trust.append("log vkey " + ", ".join(v.vkey() for v in log_keys))
    if witnesses:
        trust.append(f"{witness_threshold} of {len(witnesses)} witness(es)")
    if not trust:
        trust.append("none pinned: self-consistent only (pass --root-key or --vkey)")

    if not partial:
        checkpoint_size = events[-1].seq

        def on_size(size: int, frontier: merkle.Frontier, ring: KeyRing) -> None:
            keys = log_keys or log_verifiers(origin, ring, size)
            try:
                opened = open_checkpoint(note, keys, witnesses=witnesses, threshold=witness_threshold,
                                         origin=origin)
            except VerificationError as exc:
                raise VerificationError(f"checkpoint.txt: {exc.args[0]}", seq=size, rule=8) from None
            if opened.size != size or opened.root != frontier.root():
                raise VerificationError(
                    f"checkpoint.txt (size {opened.size}) does not commit to these {size} events", seq=size, rule=8)
            checked.append(opened)

        origin = _genesis_origin(events[0])
        checked: list[Any] = []
        verified = verify_events(events, root_key=root_key, checkpoint_sizes=[checkpoint_size], on_size=on_size)
        if not checked:
            raise VerificationError("checkpoint.txt was not checked", rule=8)
        checkpoint = checked[0]
        ledger_id, origin = verified.ledger_id, verified.origin
    else:
        for before, after in pairwise(events):
            if after.seq <= before.seq:
                raise VerificationError(f"events.jsonl is not in strictly increasing seq order ({before.seq} then "
                                        f"{after.seq})", seq=after.seq, rule="bundle")
        origin = _genesis_origin(events[0])
        ring = _partial_ring(events, root_key)
        trust.append("partial export: each event is proven to be in the ledger, but not that the stream is "
                     "complete (audit a full export for that)")
        keys = log_keys or log_verifiers(origin, ring)
        checkpoint = open_checkpoint(note, keys, witnesses=witnesses, threshold=witness_threshold, origin=origin)
        proofs = _read(path / "proofs.jsonl", "proofs.jsonl").splitlines()
        verify_bundle_proofs(proofs, events, checkpoint)
        ledger_id = events[0].ledger
        if any(e.ledger != ledger_id for e in events):
            bad = next(e for e in events if e.ledger != ledger_id)
            raise VerificationError(f"ledger id {bad.ledger} differs from {ledger_id}", seq=bad.seq, rule=3)
    blobs = _check_blobs(path, events)
    return VerifiedBundle(path, origin, ledger_id, partial, manifest.get("stream"), tuple(events), checkpoint,
                          blobs, tuple(trust))


def _genesis_origin(first: Event) -> str:
    if first.seq != 1 or first.type != "ledger.created":
        raise VerificationError("the bundle does not start with the genesis event", seq=first.seq, rule=1)
    try:
        origin = first.payload.get("origin")
    except (ValueError, FormatError):
        origin = None
    if not isinstance(origin, str) or not origin:
        raise VerificationError("the genesis names no origin", seq=1, rule=7)
    return origin


def _partial_ring(events: Sequence[Event], root_key: str | None) -> KeyRing:
    """Rules 5-7 and 9 over a partial bundle, in seq order, building the key ring as it goes.

    The bundle carries every key event, so each event's actor is checked against the keys
    known (and not revoked) at its seq, and its signature verified.
    """
    ring = KeyRing()
    for event in events:
        if event.seq == 1 and event.type == "ledger.created":
            _apply(ring, event)
            if root_key is not None and "root" not in getattr(ring.keys.get(root_key), "roles", ()):
                raise VerificationError(f"genesis does not name the pinned key {root_key[:16]} as root",
                                        seq=1, rule=9)
        key = ring.keys.get(event.actor)
        if key is None or (key.revoked_at_seq is not None and key.revoked_at_seq < event.seq):
            raise VerificationError("actor is not a key known at this seq", seq=event.seq, rule=5)
        try:
            signature = event.raw_sig
        except ValueError:
            raise VerificationError("sig is not base64", seq=event.seq, rule=6) from None
        if not verify_signature(key.public_raw, signature, signing_message(event.hash)):
            raise VerificationError("signature does not verify under the actor's key", seq=event.seq, rule=6)
        if event.type in KEY_EVENT_TYPES:
            if "root" not in key.roles:
                raise VerificationError(f"{event.type} signed by {key.name}, which is not a root key",
                                        seq=event.seq, rule=7)
            if event.seq > 1:
                _apply(ring, event)
    if not ring.keys:
        raise VerificationError("the bundle carries no genesis key event", rule="bundle")
    return ring


def _apply(ring: KeyRing, event: Event) -> None:
    try:
        ring.apply(event.seq, event.type, event.payload)
    except (FormatError, ValueError) as exc:
        raise VerificationError(f"malformed key event: {exc}", seq=event.seq, rule=7) from None


def _check_blobs(path: Path, events: Sequence[Event]) -> int:
    directory = path / "blobs"
    present = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    for name in sorted(present):
        try:
            data = (directory / name).read_bytes()
        except OSError as exc:
            raise VerificationError(f"blobs/{name[:16]}... cannot be read ({exc.strerror})", rule="blob") from None
        if hashlib.sha256(data).hexdigest() != name:
            raise VerificationError(f"blobs/{name[:16]}... does not match its digest", rule="blob")
    for event in events:
        missing = sorted(referenced_blobs(event) - present)
        if missing:
            raise VerificationError(f"referenced blob {missing[0][:16]}... is absent from the bundle",
                                    seq=event.seq, rule="blob")
    return len(present)
