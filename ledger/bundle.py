"""Export bundles (``docs/format.md``, export bundles): what an auditor needs, with no database.

A bundle directory holds ``manifest.json``, ``events.jsonl`` (one event per line,
JCS, in seq order), ``checkpoint.txt`` (the newest checkpoint covering every exported
event), ``blobs/<sha256>``, and for a partial (``--stream``) export ``proofs.jsonl``
(one inclusion proof per event against ``checkpoint.txt``).

``verify_bundle`` reads a bundle as hostile input: every file is opened without
following symbolic links and must be a regular file (no FIFO, device or directory)
within a size limit; lines are read one at a time with a length limit; JSON nests a
bounded number of levels and names no member twice; every ``events.jsonl`` line must be
exactly the canonical bytes of its event; the manifest's origin, ledger id, counts and
file digests must be what the bundle holds.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import count, pairwise
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, TypeVar

from . import merkle
from .canonical import MAX_BODY_BYTES
from .canonical import MAX_DEPTH as PAYLOAD_MAX_DEPTH
from .errors import FormatError, TallyError, VerificationError
from .event import Event, event_from_json, format_time, signing_message
from .keys import KEY_EVENT_TYPES, KeyRing, Signer, verify_signature
from .stored import referenced_blobs
from .strictfile import file_kind
from .strictjson import read_json
from .verify import check_body, check_role, verify_events

__all__ = [
    "BUNDLE_FORMAT",
    "MAX_BLOBS_BYTES",
    "MAX_BLOB_BYTES",
    "MAX_EVENTS_BYTES",
    "MAX_EVENT_LINE_BYTES",
    "MAX_SMALL_FILE_BYTES",
    "VerifiedBundle",
    "export_bundle",
    "is_blob_name",
    "verify_bundle",
]

BUNDLE_FORMAT = "tally-bundle/v1"

MAX_EVENTS_BYTES = 4 << 30  # events.jsonl
MAX_PROOFS_BYTES = 4 << 30  # proofs.jsonl
# An event line is its body (at most 1 MiB) plus its hash and sig members.
MAX_EVENT_LINE_BYTES = MAX_BODY_BYTES + 4096
MAX_SMALL_FILE_BYTES = 1 << 20  # manifest.json, checkpoint.txt
MAX_BLOB_BYTES = 4 << 30  # any one blob (and never more than its reference declares)
MAX_BLOBS_BYTES = 64 << 30  # all blobs of a bundle together
_CHUNK = 1 << 20

_BLOB_NAME = re.compile(r"[0-9a-f]{64}")
_HEX64 = _BLOB_NAME
T = TypeVar("T")


def is_blob_name(name: str) -> bool:
    """Whether ``name`` can name a blob: a SHA-256 digest, 64 lowercase hex characters."""
    return _BLOB_NAME.fullmatch(name) is not None


def _tally_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tally")
    except PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------------------
# Writing a bundle.


def _prepare_target(out: Path) -> Path:
    """Check the target (new or an empty real directory, in a real directory); make the temp dir beside it."""
    for place in (out, out.parent):
        if place.is_symlink():
            raise FormatError(f"{place} is a symbolic link; export to a directory given by its real path")
    try:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise FormatError(f"{out} exists and is not an empty directory")
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise FormatError(f"cannot export to {out}: {exc.strerror or exc}") from None


def _require_stream(book: Any, stream: str, size: int) -> None:
    """Refuse (``FormatError``) to export a stream that has no events: the bundle would prove nothing."""
    events = book.events(0, until=size, stream=stream, batch=1)
    try:
        first = next(events, None)
    finally:
        events.close()
    if first is None:
        raise FormatError(f"stream {stream!r} has no events; nothing exported")


def export_bundle(book: Any, out: Path, *, stream: str | None = None, signer: Signer | None = None,
                  with_streams: Sequence[str] = ()) -> dict[str, Any]:
    """Write a bundle of ``book`` (a ``Ledger``) to ``out``; returns the manifest.

    A partial bundle (``stream``) carries the key events, and the events of
    ``with_streams`` too (streams the caller's verdicts rest on; the ledger does not
    know which those are). The bundle is written to a temporary directory beside
    ``out`` and renamed into place: on any failure nothing is left behind. Refuses
    with ``FormatError`` a symbolically linked target or parent, a stream with no
    events, and any ``OSError`` while writing (one line); with ``VerificationError``
    (rule ``blob``) a referenced blob whose name is not a SHA-256 digest, that is
    absent, or whose bytes do not match it.
    """
    out = Path(out)
    size, head = book.head()
    if stream is not None:
        _require_stream(book, stream, size)
    tmp = _prepare_target(out)
    try:
        manifest = _write(book, tmp, size, head, stream, signer, tuple(with_streams))
        os.replace(tmp, out)  # onto a new name, or onto the empty directory it was given
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise FormatError(f"cannot write the bundle {out}: {exc.strerror or exc}; nothing was written") from None
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


def _blob_refs_to_write(event: Event) -> set[str]:
    """The blobs ``event`` refers to; a name that is not a SHA-256 digest (a path) is refused, rule ``blob``."""
    return referenced_blobs(event)


def _write_private(path: Path, data: bytes) -> None:
    """A blob file, mode 0600: blobs hold prompts, replies and emitted tokens (never world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _write(book: Any, tmp: Path, size: int, head: str, stream: str | None, signer: Signer | None,
           with_streams: tuple[str, ...]) -> dict[str, Any]:
    from .receipt import write_bundle_proofs

    blobs: dict[str, int] = {}  # name -> first seq referring to it
    seqs: list[int] = []
    digest = hashlib.sha256()
    with open(tmp / "events.jsonl", "w", encoding="utf-8", newline="\n") as handle:
        for event in _bundle_events(book, size, stream, with_streams):
            line = event.line() + "\n"
            handle.write(line)
            digest.update(line.encode("utf-8"))
            for sha in _blob_refs_to_write(event):
                blobs.setdefault(sha, event.seq)
            seqs.append(event.seq)
    files = {"events.jsonl": digest.hexdigest()}
    if blobs:
        (tmp / "blobs").mkdir()
        for sha in sorted(blobs):
            blob = book.blob(sha)
            if blob is None:
                raise VerificationError(f"blob {sha} is referenced but absent from the ledger; nothing exported",
                                        seq=blobs[sha], rule="blob")
            if hashlib.sha256(blob.data).hexdigest() != sha:
                raise VerificationError(f"blob {sha[:16]} in the ledger does not match its digest; nothing exported",
                                        seq=blobs[sha], rule="blob")
            _write_private(tmp / "blobs" / sha, blob.data)
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
# Reading a bundle as hostile input.


def _bundle_error(message: str, seq: int | None = None) -> VerificationError:
    return VerificationError(message, seq=seq, rule="bundle")


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Files:
    """A bundle directory, opened once; every file in it is opened as hostile input.

    Files are opened relative to the directory's descriptor, by plain names (never a
    path), with ``O_NOFOLLOW | O_NONBLOCK`` (a symbolic link fails, a FIFO does not
    block), and must be regular files (``fstat``) within a size limit. The SHA-256 of
    every file read is kept in ``digests`` under its name in the manifest's ``files``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise FormatError(f"{path} is not a bundle directory") from None
        except OSError as exc:
            raise FormatError(f"cannot open the bundle {path}: {exc.strerror}") from None
        self.blobs_fd: int | None = None
        self.digests: dict[str, str] = {}

    def __enter__(self) -> _Files:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.blobs_fd is not None:
            os.close(self.blobs_fd)
        os.close(self.fd)

    def _open(self, name: str, shown: str, limit: int, directory: int | None = None,
              limit_is: str = "limit") -> tuple[BinaryIO, int]:
        """Open ``name`` for reading: a regular file of at most ``limit`` bytes; returns it and its size."""
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=self.fd if directory is None else directory)
        except FileNotFoundError:
            raise _bundle_error(f"the bundle has no {shown}") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _bundle_error(f"{shown} is a symbolic link, not a regular file") from None
            raise FormatError(f"cannot read {self.path / shown}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _bundle_error(f"{shown} is a {file_kind(info.st_mode)}, not a regular file")
            if info.st_size > limit:
                raise _bundle_error(f"{shown} is {info.st_size} bytes, over the {limit}-byte {limit_is}")
            return os.fdopen(fd, "rb", buffering=_CHUNK), info.st_size
        except BaseException:
            os.close(fd)
            raise

    def read(self, name: str, limit: int = MAX_SMALL_FILE_BYTES) -> bytes:
        """A small file's bytes (``manifest.json``, ``checkpoint.txt``)."""
        handle, _ = self._open(name, name, limit)
        with handle:
            data = self._io(name, lambda: handle.read(limit + 1))
        if len(data) > limit:
            raise _bundle_error(f"{name} grew over the {limit}-byte limit while being read")
        self.digests[name] = hashlib.sha256(data).hexdigest()
        return data

    def lines(self, name: str, limit: int, line_limit: int) -> Iterator[tuple[int, bytes]]:
        """``(number, line)`` for each line of ``name`` (without its ``\\n``), each at most ``line_limit`` bytes.

        Every line, the last included, must end with ``\\n``. The file's digest is recorded
        once it has been read to its end.
        """
        handle, _ = self._open(name, name, limit)
        digest = hashlib.sha256()
        total = 0
        with handle:
            for number in count(1):
                raw = self._io(name, lambda: handle.readline(line_limit + 1))
                if not raw:
                    break
                total += len(raw)
                if total > limit:
                    raise _bundle_error(f"{name} grew over the {limit}-byte limit while being read")
                if not raw.endswith(b"\n"):
                    if len(raw) > line_limit:
                        raise _bundle_error(f"{name} line {number} is longer than {line_limit} bytes")
                    raise _bundle_error(f"{name} line {number} does not end with a newline (truncated?)")
                digest.update(raw)
                yield number, raw[:-1]
        self.digests[name] = digest.hexdigest()

    def blob_names(self) -> list[str]:
        """The entries of ``blobs/`` (none when there is no such directory); each must name a digest."""
        try:
            self.blobs_fd = os.open("blobs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                    dir_fd=self.fd)
        except FileNotFoundError:
            return []
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # Linux says ENOTDIR for a symlink with O_DIRECTORY
                mode = self._io("blobs", lambda: os.stat("blobs", dir_fd=self.fd, follow_symlinks=False)).st_mode
                raise _bundle_error(f"blobs is a {file_kind(mode)}, not a directory") from None
            raise FormatError(f"cannot read {self.path / 'blobs'}: {exc.strerror}") from None
        names = sorted(self._io("blobs", lambda: os.listdir(self.blobs_fd)))
        for name in names:
            if not is_blob_name(name):
                raise VerificationError(f"blobs/{name[:80]!r} is not named by a SHA-256 digest (64 lowercase hex)",
                                        rule="blob")
        return names

    def blob(self, name: str, limit: int, limit_is: str) -> tuple[int, str]:
        """Size and SHA-256 of ``blobs/<name>``, a regular file of at most ``limit`` bytes, read in chunks."""
        shown = f"blobs/{name}"
        handle, size = self._open(name, shown, limit, self.blobs_fd, limit_is)
        digest = hashlib.sha256()
        total = 0
        with handle:
            while chunk := self._io(shown, lambda: handle.read(_CHUNK)):
                total += len(chunk)
                if total > size:
                    raise _bundle_error(f"{shown} grew while being read")
                digest.update(chunk)
        self.digests[shown] = digest.hexdigest()
        return total, digest.hexdigest()

    def entries(self) -> list[str]:
        return sorted(self._io(".", lambda: os.listdir(self.fd)))

    def _io(self, shown: str, action: Callable[[], T]) -> T:
        try:
            return action()
        except OSError as exc:
            raise FormatError(f"cannot read {self.path / shown}: {exc.strerror or exc}") from None


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


# The manifest's members and their JSON types (exact: a bool is not an integer here).
_MANIFEST: dict[str, tuple[type, ...]] = {
    "format": (str,), "origin": (str,), "ledger": (str,), "tally_version": (str,), "exported_at": (str,),
    "ledger_size": (int,), "ledger_head": (str,), "stream": (str, type(None)), "partial": (bool,),
    "events": (int,), "first_seq": (int,), "last_seq": (int,), "checkpoint_size": (int,), "blobs": (int,),
    "files": (dict,),
}


def _read_manifest(files: _Files) -> dict[str, Any]:
    """``manifest.json``: strict JSON, a ``tally-bundle/v1`` manifest whose members have their types."""
    try:
        manifest = read_json(files.read("manifest.json"), "manifest.json", max_bytes=MAX_SMALL_FILE_BYTES,
                             max_depth=4)
    except FormatError as exc:
        raise _bundle_error(str(exc)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise _bundle_error(f"manifest.json is not a {BUNDLE_FORMAT} manifest")
    for member, types in _MANIFEST.items():
        if member not in manifest:
            raise _bundle_error(f"manifest.json has no {member!r}")
        if type(manifest[member]) not in types:
            raise _bundle_error(f"manifest.json member {member!r} is not a {' or '.join(_json_type(t) for t in types)}")
    listed = manifest["files"]
    for name, digest in listed.items():
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise _bundle_error(f"manifest.json lists {name[:80]!r} without a SHA-256 digest")
    if manifest["partial"] != (manifest["stream"] is not None):
        raise _bundle_error("manifest.json: a partial bundle names its stream, a full one none")
    return manifest


def _json_type(kind: type) -> str:
    return {str: "string", int: "integer", bool: "boolean", dict: "object", type(None): "null"}[kind]


def _load_events(files: _Files, partial: bool) -> list[Event]:
    """Every line of ``events.jsonl``, each exactly the canonical bytes (JCS) of the event it holds.

    Reading the line strictly (bounded nesting, no member twice) and comparing it with
    ``Event.line()`` refuses whitespace, ``1.0`` for ``1``, ``-0``, escapes JCS does not
    write, CRLF, and a member given twice: two readers of such a line could see two
    events under one hash. A seq given on two lines (a replayed line) is blamed on the
    later line.
    """
    events: list[Event] = []
    lines_of: dict[int, int] = {}
    for number, raw in files.lines("events.jsonl", MAX_EVENTS_BYTES, MAX_EVENT_LINE_BYTES):
        where = f"events.jsonl line {number}"
        try:
            obj = read_json(raw, where, max_bytes=MAX_EVENT_LINE_BYTES, max_depth=PAYLOAD_MAX_DEPTH + 1)
            event = event_from_json(obj, where)
            canonical = event.line().encode("utf-8")
        except FormatError as exc:
            raise _bundle_error(str(exc)) from None
        except (ValueError, RecursionError) as exc:
            raise _bundle_error(f"{where} cannot be read as an event ({type(exc).__name__})") from None
        if canonical != raw:
            at = next((i for i, (a, b) in enumerate(zip(canonical, raw, strict=False)) if a != b),
                      min(len(canonical), len(raw)))
            raise _bundle_error(f"{where} is not the canonical form (JCS) of its event: it differs at byte {at}",
                                seq=event.seq)
        first = lines_of.setdefault(event.seq, number)
        if first != number:
            raise VerificationError(f"{where} repeats seq {event.seq} of line {first} (a replayed line)",
                                    seq=event.seq, rule="bundle" if partial else 1)
        events.append(event)
    return events


def _proof_lines(files: _Files) -> Iterator[str]:
    from .receipt import MAX_PROOF_LINE_BYTES

    for number, raw in files.lines("proofs.jsonl", MAX_PROOFS_BYTES, MAX_PROOF_LINE_BYTES):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise VerificationError(f"proofs.jsonl line {number} is not UTF-8", rule="proof") from None


def _checkpoint_note(files: _Files) -> str:
    try:
        return files.read("checkpoint.txt").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bundle_error(f"checkpoint.txt is not UTF-8 ({exc.reason} at byte {exc.start})") from None


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
    referenced blob must be present. Then the manifest: its origin, ledger id, counts
    and file digests must be the bundle's. Trust rests on ``root_key`` (pinned genesis
    root) and/or ``vkeys`` (the log's published vkey, plus witnesses); without either,
    the bundle is only shown to be self-consistent, and ``trust`` says so.

    The bundle is hostile input (module docstring). Its failures are
    ``VerificationError`` (rule ``bundle`` for the files themselves, the rule numbers,
    ``proof``, ``blob``, ``checkpoint``), with the first failing seq where there is one;
    ``FormatError`` for bad arguments, a path that is not a directory, or a file that
    cannot be read.
    """
    from .note import parse_vkey

    log_keys = [parse_vkey(v) for v in vkeys if not parse_vkey(v).is_cosigner]
    witnesses = [parse_vkey(v) for v in vkeys if parse_vkey(v).is_cosigner]
    if not 0 <= witness_threshold <= len({w.public_raw for w in witnesses}):
        raise FormatError(f"witness threshold {witness_threshold} is not between 0 and the "
                          f"{len(witnesses)} witness vkey(s) given")
    trust = []
    if root_key:
        trust.append(f"root key {root_key} pinned")
    if log_keys:
        trust.append("log vkey " + ", ".join(v.vkey() for v in log_keys))
    if witnesses:
        trust.append(f"{witness_threshold} of {len(witnesses)} witness(es)")
    if not trust:
        trust.append("none pinned: self-consistent only (pass --root-key or --vkey)")
    path = Path(path)
    with _Files(path) as files:
        return _verify(files, root_key, log_keys, witnesses, witness_threshold, trust)


def _verify(files: _Files, root_key: str | None, log_keys: list[Any], witnesses: list[Any], witness_threshold: int,
            trust: list[str]) -> VerifiedBundle:
    from .checkpoint import log_verifiers, open_checkpoint
    from .receipt import verify_bundle_proofs

    manifest = _read_manifest(files)
    partial: bool = manifest["partial"]
    events = _load_events(files, partial)
    if not events:
        raise _bundle_error("events.jsonl holds no events")
    note = _checkpoint_note(files)

    def opened_checkpoint(keys: list[Any], seq: int | None, rule: int | str) -> Any:
        if not keys:
            raise VerificationError("checkpoint.txt: no key of this ledger may sign checkpoints", seq=seq, rule=rule)
        try:
            return open_checkpoint(note, keys, witnesses=witnesses, threshold=witness_threshold, origin=origin)
        except TallyError as exc:  # FormatError here comes of the bundle's keys, not the auditor's
            raise VerificationError(f"checkpoint.txt: {exc.args[0]}", seq=seq, rule=rule) from None

    if not partial:
        checkpoint_size = events[-1].seq

        def on_size(size: int, frontier: merkle.Frontier, ring: KeyRing) -> None:
            try:
                keys = log_keys or log_verifiers(origin, ring, size)
            except FormatError as exc:
                raise VerificationError(f"checkpoint.txt: {exc}", seq=size, rule=8) from None
            opened = opened_checkpoint(keys, size, 8)
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
        try:
            keys = log_keys or log_verifiers(origin, ring)
        except FormatError as exc:
            raise VerificationError(f"checkpoint.txt: {exc}", rule="checkpoint") from None
        checkpoint = opened_checkpoint(keys, None, "checkpoint")
        verify_bundle_proofs(_proof_lines(files), events, checkpoint)
        ledger_id = events[0].ledger
        if any(e.ledger != ledger_id for e in events):
            bad = next(e for e in events if e.ledger != ledger_id)
            raise VerificationError(f"ledger id {bad.ledger} differs from {ledger_id}", seq=bad.seq, rule=3)
    blobs = _check_blobs(files, events)
    _check_manifest(manifest, files, events, origin, ledger_id, checkpoint.size, blobs)
    return VerifiedBundle(files.path, origin, ledger_id, partial, manifest["stream"], tuple(events), checkpoint,
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
    """Rules 4-7 and 9 over a partial bundle, in seq order, building the key ring as it goes.

    The bundle carries every key event, so each event's body is checked (rule 4), its
    actor against the keys known (and not revoked) at its seq and their roles (rule 5),
    and its signature verified.
    """
    ring = KeyRing()
    for event in events:
        check_body(event)
        if event.seq == 1 and event.type == "ledger.created":
            _apply(ring, event)
            if root_key is not None and "root" not in getattr(ring.keys.get(root_key), "roles", ()):
                raise VerificationError(f"genesis does not name the pinned key {root_key[:16]} as root",
                                        seq=1, rule=9)
        key = ring.keys.get(event.actor)
        if key is None or (key.revoked_at_seq is not None and key.revoked_at_seq < event.seq):
            raise VerificationError("actor is not a key known at this seq", seq=event.seq, rule=5)
        check_role(key, event.seq)
        try:
            signature = event.raw_sig
        except ValueError:
            raise VerificationError("sig is not base64", seq=event.seq, rule=6) from None
        if not _hex64(event.hash) or not verify_signature(key.public_raw, signature, signing_message(event.hash)):
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


def _hex64(value: str) -> bool:
    return _HEX64.fullmatch(value) is not None


def _apply(ring: KeyRing, event: Event) -> None:
    try:
        ring.apply(event.seq, event.type, event.payload)
    except (FormatError, ValueError) as exc:
        raise VerificationError(f"malformed key event: {exc}", seq=event.seq, rule=7) from None


def _declared_blobs(value: Any, out: dict[str, int | None]) -> None:
    """Blob references in a payload (``{"blob": "sha256:<name>", "size": n}``): name -> smallest declared size."""
    if isinstance(value, dict):
        ref = value.get("blob")
        if isinstance(ref, str) and ref.startswith("sha256:"):
            name = ref[len("sha256:"):]
            size = value.get("size")
            declared = size if type(size) is int and size >= 0 else None
            out[name] = _smaller(out.get(name), declared)
        for item in value.values():
            _declared_blobs(item, out)
    elif isinstance(value, list):
        for item in value:
            _declared_blobs(item, out)


def _smaller(known: int | None, size: int | None) -> int | None:
    return size if known is None else known if size is None else min(known, size)


def _check_blobs(files: _Files, events: Sequence[Event]) -> int:
    """Every referenced blob present, named by its digest, no bigger than declared; nothing else in ``blobs/``."""
    declared: dict[str, int | None] = {}
    first_seq: dict[str, int] = {}
    for event in events:
        if "sha256:" not in event.payload_json:  # JCS writes every reference's "sha256:" as is
            continue
        found: dict[str, int | None] = {}
        _declared_blobs(event.payload, found)
        for name, size in found.items():
            if name not in first_seq:
                if not is_blob_name(name):
                    raise VerificationError(f"the payload refers to blob {name[:80]!r}, which is not a SHA-256 "
                                            "digest", seq=event.seq, rule="blob")
                first_seq[name] = event.seq
            declared[name] = _smaller(declared.get(name), size)
    present = files.blob_names()
    for name in present:
        if name not in first_seq:
            raise VerificationError(f"blobs/{name[:16]}... is not referenced by any event of the bundle", rule="blob")
    absent = sorted(set(first_seq) - set(present), key=lambda n: (first_seq[n], n))
    if absent:
        raise VerificationError(f"referenced blob {absent[0][:16]}... is absent from the bundle",
                                seq=first_seq[absent[0]], rule="blob")
    total = 0
    for name in present:
        size = declared[name]
        limit, limit_is = (MAX_BLOB_BYTES, "limit") if size is None or size > MAX_BLOB_BYTES else \
            (size, "size its reference declares")
        try:
            read, digest = files.blob(name, limit, limit_is)
        except VerificationError as exc:
            raise VerificationError(exc.args[0], seq=first_seq[name], rule="blob") from None
        total += read
        if total > MAX_BLOBS_BYTES:
            raise VerificationError(f"the bundle's blobs are over the {MAX_BLOBS_BYTES}-byte limit", rule="blob")
        if digest != name:
            raise VerificationError(f"blobs/{name[:16]}... does not match its digest", seq=first_seq[name],
                                    rule="blob")
    return len(present)


def _check_manifest(manifest: dict[str, Any], files: _Files, events: Sequence[Event], origin: str, ledger_id: str,
                    checkpoint_size: int, blobs: int) -> None:
    """The manifest says what the bundle holds: origin, ledger id, counts, and the digest of every file."""
    last = events[-1]
    expected: dict[str, Any] = {
        "origin": origin, "ledger": ledger_id, "events": len(events), "first_seq": events[0].seq,
        "last_seq": last.seq, "checkpoint_size": checkpoint_size, "blobs": blobs,
    }
    if not manifest["partial"] or manifest["ledger_size"] == last.seq:
        expected["ledger_size"] = last.seq
        expected["ledger_head"] = last.hash
    for member, value in expected.items():
        if manifest[member] != value:
            raise _bundle_error(f"manifest.json says {member} {_shown(manifest[member])}, "
                                f"the bundle holds {_shown(value)}")
    if manifest["ledger_size"] < checkpoint_size:
        raise _bundle_error(f"manifest.json says ledger_size {manifest['ledger_size']}, smaller than the "
                            f"checkpoint's {checkpoint_size}")
    stream = manifest["stream"]
    if stream is not None and not any(e.stream == stream for e in events):
        raise _bundle_error(f"manifest.json names stream {_shown(stream)}, of which the bundle holds no event")
    allowed = {"manifest.json", "blobs"} | {name for name in files.digests if "/" not in name}
    for entry in files.entries():
        if entry not in allowed:
            raise _bundle_error(f"the bundle holds {entry[:80]!r}, which is not a file of a "
                                f"{'partial' if manifest['partial'] else 'full'} bundle")
    listed: dict[str, str] = manifest["files"]
    read = {name: digest for name, digest in files.digests.items() if name != "manifest.json"}
    for name in sorted(read):
        if name not in listed:
            raise _bundle_error(f"{name} is in the bundle but not listed in manifest.json")
        if listed[name] != read[name]:
            raise _bundle_error(f"{name} does not match its digest in manifest.json")
    for name in sorted(listed):
        if name not in read:
            raise _bundle_error(f"manifest.json lists {name[:80]!r}, which is absent from the bundle")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 80 else text[:77] + "..."
