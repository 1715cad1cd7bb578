"""A checkpoint witness (C2SP tlog-witness semantics, run as a command, ``docs/format.md``).

``Witness.cosign`` checks a checkpoint's log signature, checks that it is consistent
with the last checkpoint this witness cosigned for the same origin, and returns the
checkpoint with a timestamped ``cosignature/v1`` line (type 0x04) added. Its meaning:
"as of time T, this is the largest consistent tree I have seen for this origin".

State lives in ``DIR/<hex sha256(origin)>/``: ``checkpoint`` (the latest cosigned note,
kept whole so that a split view can be shown to others), ``origin`` and ``vkeys`` (the
log keys trusted for it). The check and the update happen under an exclusive lock on
that directory, and the new state is written to a temporary file, fsynced and renamed
over the old one (then the directory is fsynced), so that a crash leaves either the
old or the new state and two cosigners can never both advance from the same state.
Nothing there is used through a symlink (``ledger.strictwrite``): a planted link at the
directory, its ``.lock`` or a state file is refused (``FormatError``) and left as it was.

Refusals: a smaller tree than the state (``rollback``), the same size with another
root or a consistency proof that does not hold (``fork``), a proof from a size other
than the state's (it names the state's size), a missing proof.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import note as notes
from .checkpoint import Checkpoint, ConsistencyProof, as_verifier, open_checkpoint, parse_checkpoint
from .errors import FormatError, PolicyError, StorageError, VerificationError
from .keys import Signer
from .strictfile import read_optional
from .strictwrite import open_dir, open_lock, write_whole
from .witness_rules import INCONSISTENT, judge

__all__ = ["CosignResult", "Witness", "WitnessState", "state_dir_name"]


def state_dir_name(origin: str) -> str:
    """The per-origin directory name: hex SHA-256 of the origin (as the tlog-witness monitor API)."""
    return hashlib.sha256(origin.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class WitnessState:
    """The last checkpoint this witness cosigned for an origin."""

    checkpoint: Checkpoint
    note: str


@dataclass(frozen=True)
class CosignResult:
    """A cosigned checkpoint: the note with our line added, and what it advanced from."""

    checkpoint: Checkpoint
    note: str
    cosignature: notes.NoteSignature
    old_size: int
    timestamp: int

    @property
    def line(self) -> str:
        return self.cosignature.line()


MAX_STATE_BYTES = 1 << 20  # a state file (a cosigned note, the vkeys) is far smaller


def _write_atomic(directory: _StateDir, name: str, text: str) -> None:
    """A state file, whole: a fresh temporary name (never a symlink followed), fsync, rename, fsync the directory."""
    write_whole(name, text.encode("utf-8"), "witness state", mode=0o644, dir_fd=directory.fd,
                shown=directory.path / name)


def _read_state(path: Path) -> str | None:
    """A state file's text (``None`` when absent); a symlink, a FIFO or an oversized file is refused."""
    data = read_optional(path, "witness state", MAX_STATE_BYTES)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise StorageError(f"witness state {path} is not UTF-8") from None


@dataclass(frozen=True)
class _StateDir:
    path: Path
    fd: int


class Witness:
    """A witness with a name, an Ed25519 key and a state directory."""

    def __init__(self, state: Path, name: str, signer: Signer):
        if not notes.is_valid_name(name):
            raise FormatError(f"witness name {name!r} must be non-empty, without spaces or '+'")
        self.root = Path(state)
        self.name = name
        self.signer = signer

    @property
    def verifier(self) -> notes.Verifier:
        return notes.Verifier(self.name, notes.SIG_COSIGNATURE, self.signer.public_raw)

    def vkey(self) -> str:
        return self.verifier.vkey()

    def _dir(self, origin: str) -> Path:
        return self.root / state_dir_name(origin)

    @contextmanager
    def _locked(self, origin: str) -> Iterator[_StateDir]:
        """The origin's state directory, opened (never through a symlink) and locked exclusively."""
        directory = self._dir(origin)
        fd = open_dir(directory, "witness state")
        try:
            lock = open_lock(".lock", "witness state", dir_fd=fd, shown=directory / ".lock")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                yield _StateDir(directory, fd)
            finally:
                os.close(lock)
        finally:
            os.close(fd)

    def state(self, origin: str) -> WitnessState | None:
        """The last checkpoint cosigned for ``origin``, or None."""
        path = self._dir(origin) / "checkpoint"
        text = _read_state(path)
        if text is None:
            return None
        try:
            checkpoint = parse_checkpoint(notes.parse_note(text).text)
        except FormatError as exc:
            raise StorageError(f"witness state {path} is corrupt: {exc}") from None
        if checkpoint.origin != origin:
            raise StorageError(f"witness state {path} is for {checkpoint.origin!r}, not {origin!r}")
        return WitnessState(checkpoint, text)

    def trusted_keys(self, origin: str) -> list[str]:
        """Log vkeys remembered for ``origin`` (from an earlier ``cosign``)."""
        text = _read_state(self._dir(origin) / "vkeys")
        return [] if text is None else [line.strip() for line in text.splitlines() if line.strip()]

    def cosign(
        self,
        message: str,
        log_keys: Sequence[str | bytes | notes.Verifier],
        proof: ConsistencyProof | None,
        *,
        now: int,
    ) -> CosignResult:
        """Check ``message`` (a checkpoint note) and cosign it at unix time ``now``.

        ``log_keys`` are the log's vkeys (or raw public keys, named after the origin);
        when empty, those remembered for the origin are used. Raises
        ``VerificationError`` for a bad signature, a rollback or a fork, ``PolicyError``
        for a proof from the wrong size or a missing proof.
        """
        origin = _origin_of(message)
        given = [as_verifier(k, origin) for k in log_keys]
        keys = given or [notes.parse_vkey(k) for k in self.trusted_keys(origin)]
        if not keys:
            raise FormatError(f"no log key known for {origin!r}; pass the log's vkey")
        verified = open_checkpoint(message, keys, threshold=0, origin=origin)
        new = verified.checkpoint
        with self._locked(origin) as directory:
            state = self.state(origin)
            old_size = 0 if state is None else state.checkpoint.size
            self._check_step(state, new, proof)
            line = notes.cosign(notes.parse_note(message).text, self.name, self.signer, now)
            cosigned = notes.with_signatures(message, [line])
            if given:
                _write_atomic(directory, "vkeys", "".join(k.vkey() + "\n" for k in given))
            _write_atomic(directory, "origin", origin + "\n")
            _write_atomic(directory, "checkpoint", cosigned)
        return CosignResult(new, cosigned, line, old_size, now)

    def _check_step(self, state: WitnessState | None, new: Checkpoint, proof: ConsistencyProof | None) -> None:
        """The step from ``state`` to ``new`` by the rules every tally witness shares (``witness_rules.judge``)."""
        hashes: tuple[bytes, ...] = proof.hashes if proof is not None else ()
        if proof is not None and proof.new is not None and proof.new != new.size:
            raise FormatError(f"the consistency proof is to size {proof.new}, the checkpoint is size {new.size}")
        if state is None and (hashes or (proof is not None and proof.old != 0)):
            raise PolicyError(f"this witness has no state for {new.origin!r}: it starts from 'old 0' with an "
                              "empty proof")
        known = None if state is None else state.checkpoint
        if known is not None and new.size < known.size:
            raise VerificationError(
                f"rollback: checkpoint size {new.size} is smaller than size {known.size} this witness cosigned",
                rule="witness",
            )
        old = proof.old if proof is not None else (0 if known is None else known.size)
        if known is not None and proof is None and new.size > known.size:
            raise PolicyError(f"a consistency proof from size {known.size} is needed "
                              f"(tally prove consistency {known.size} {new.size})")
        refusal = judge(known, old, new, hashes)
        if refusal is None:
            return
        if refusal.kind in ("stale", "old_too_large"):
            raise PolicyError(
                f"the consistency proof starts at size {old}, this witness is at size {refusal.known_size}"
            )
        if refusal.kind == "bad_proof" and known is not None and new.size == known.size:
            raise PolicyError("equal sizes take an empty consistency proof")
        if refusal.kind in INCONSISTENT:
            raise VerificationError(f"fork: {refusal.message}", rule="witness")
        raise VerificationError(refusal.message, rule="witness")


def _origin_of(message: str) -> str:
    try:
        return parse_checkpoint(notes.parse_note(message).text).origin
    except FormatError as exc:
        raise VerificationError(f"checkpoint is malformed: {exc}", rule="checkpoint") from None
