"""Ed25519 keys (``docs/format.md``, keys and roles): key ids, PEM files, signers, and the key ring.

Key id = SHA-256 of the raw 32-byte public key, as 64 hex characters. Private keys are
PKCS#8 PEM files with mode 0600, encrypted when ``TALLY_KEY_PASSPHRASE`` is set. A
private key file that its group or others may read or write is refused (``chmod 600``).
A new key and its ``.pub`` are never written over anything: both names must be free (no
file, no symlink, dangling or not), and both appear whole or not at all (written to
temporary names without following symlinks, synced, then linked into place).
The key ring is derived from key events only (``ledger.created``, ``key.added``,
``key.revoked``); the ``keys`` table is a cache of it.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import FormatError, PolicyError
from .strictfile import read_limited

__all__ = [
    "EVENT_ROLES",
    "KEY_EVENT_TYPES",
    "ROLES",
    "KeyInfo",
    "KeyRing",
    "Signer",
    "generate_key_file",
    "key_id",
    "load_public_key",
    "load_signer",
    "verify_signature",
]

ROLES = ("root", "signer", "witness")
EVENT_ROLES = ("root", "signer")  # the roles whose keys sign events and checkpoints; a witness key only cosigns
KEY_EVENT_TYPES = frozenset({"ledger.created", "key.added", "key.revoked"})
PASSPHRASE_ENV = "TALLY_KEY_PASSPHRASE"
MAX_KEY_FILE_BYTES = 64 << 10  # a PEM key is a few hundred bytes
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def key_id(public_raw: bytes) -> str:
    """SHA-256 of the raw 32-byte public key, hex."""
    return hashlib.sha256(public_raw).hexdigest()


def _raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class Signer:
    """A private key able to sign events; ``name`` is how the ledger knows it."""

    private: Ed25519PrivateKey
    public_raw: bytes
    name: str = ""

    @classmethod
    def from_private(cls, private: Ed25519PrivateKey, name: str = "") -> Signer:
        return cls(private=private, public_raw=_raw_public(private.public_key()), name=name)

    @classmethod
    def generate(cls, name: str = "") -> Signer:
        return cls.from_private(Ed25519PrivateKey.generate(), name)

    @property
    def id(self) -> str:
        return key_id(self.public_raw)

    @property
    def public_b64(self) -> str:
        return base64.b64encode(self.public_raw).decode("ascii")

    def sign(self, message: bytes) -> bytes:
        return self.private.sign(message)

    def private_pem(self, passphrase: str | None = None) -> bytes:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(passphrase.encode("utf-8"))
            if passphrase
            else serialization.NoEncryption()
        )
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def _passphrase() -> str | None:
    return os.environ.get(PASSPHRASE_ENV) or None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _remove(name: str, dir_fd: int) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _write_new_files(directory: Path, files: list[tuple[str, bytes, int]]) -> None:
    """Create every ``(name, data, mode)`` in ``directory``, all or none, over nothing.

    Each file is written to a temporary name (``O_CREAT | O_EXCL | O_NOFOLLOW``), given
    its mode, synced, then hard-linked to its name, which fails if anything (a file, a
    symlink, dangling or not) took the name meanwhile; on any error every file this
    call created is removed. ``OSError`` propagates (the caller words it).
    """
    dir_fd = os.open(directory, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    temps: list[str] = []
    placed: list[str] = []
    try:
        for name, data, mode in files:
            temp = f".{name}.{secrets.token_hex(6)}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)
            temps.append(temp)
            try:
                os.fchmod(fd, mode)
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        for (name, _, _), temp in zip(files, temps, strict=True):
            try:
                os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                # No hard links here (some network and FUSE file systems): rename, after a check.
                if _lexists(name, dir_fd):
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), name) from None
                os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            placed.append(name)
        for temp in temps:
            _remove(temp, dir_fd)
        temps = []
        os.fsync(dir_fd)
    except BaseException:
        for name in temps + placed:
            _remove(name, dir_fd)
        raise
    finally:
        os.close(dir_fd)


def _lexists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def generate_key_file(path: Path, name: str = "") -> Signer:
    """Create a new key at ``path`` (0600) and its public key at ``path.pub`` (0644).

    Refuses (``FormatError``, nothing written) when either name is taken, by a file or a
    symlink (dangling or not); on a write error (a full or read-only disk) neither file
    is left behind, not even empty.
    """
    path = Path(path)
    pub = path.with_name(path.name + ".pub")
    for target in (path, pub):
        if target.is_symlink():
            raise FormatError(f"{target} is a symbolic link; refusing to write a key through it")
        if os.path.lexists(target):
            raise FormatError(f"{target} exists; refusing to overwrite a key file")
    signer = Signer.generate(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_new_files(path.parent, [(path.name, signer.private_pem(_passphrase()), 0o600),
                                       (pub.name, signer.public_pem(), 0o644)])
    except FileExistsError as exc:
        raise FormatError(f"{path.parent / str(exc.filename or path.name)} appeared while writing the key; "
                          "nothing was written") from None
    except OSError as exc:
        raise FormatError(f"cannot write key {path}: {exc.strerror or exc}; nothing was written") from None
    return signer


def _read_key_file(path: Path, private: bool) -> bytes:
    """A key file's bytes (bounded, ``ledger.strictfile``); a private key must not be open to group or others.

    A symlink is followed on purpose: secret mounts (Kubernetes, systemd credentials)
    present keys through links; the regular-file and mode checks are on the file reached.
    """
    def owner_only(info: os.stat_result) -> None:
        if private and info.st_mode & 0o077:
            raise FormatError(f"key {path} has mode {stat.S_IMODE(info.st_mode):04o}: group or others can reach "
                              f"it; run chmod 600 {path}")

    return read_limited(path, "key", MAX_KEY_FILE_BYTES, follow_symlinks=True, check=owner_only)


def _private_from_pem(data: bytes, path: Path) -> Ed25519PrivateKey:
    passphrase = _passphrase()
    encrypted = b"ENCRYPTED PRIVATE KEY" in data
    if encrypted and not passphrase:
        raise FormatError(f"key {path} is encrypted; set TALLY_KEY_PASSPHRASE")
    try:
        private = serialization.load_pem_private_key(
            data, password=passphrase.encode("utf-8") if encrypted and passphrase else None
        )
    except (TypeError, ValueError):
        raise FormatError(f"key {path} is not a PEM private key, or the passphrase is wrong") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise FormatError(f"key {path} is not an Ed25519 key")
    return private


def load_signer(path: Path | str, name: str = "") -> Signer:
    """Read a PKCS#8 PEM private key; decrypt with ``TALLY_KEY_PASSPHRASE`` if set.

    Refuses a file group or others may read or write (mode & 0o077): ``chmod 600`` it.
    """
    path = Path(path)
    private = _private_from_pem(_read_key_file(path, private=True), path)
    return Signer.from_private(private, name or path.stem)


def load_public_key(path: Path | str) -> bytes:
    """Raw 32-byte public key from a PEM public key, a PEM private key, or base64 text."""
    path = Path(path)
    text = _read_key_file(path, private=False).strip()
    if text.startswith(b"-----BEGIN PUBLIC KEY-----"):
        try:
            public = serialization.load_pem_public_key(text)
        except ValueError:
            raise FormatError(f"{path} is not a valid PEM public key") from None
        if not isinstance(public, Ed25519PublicKey):
            raise FormatError(f"{path} is not an Ed25519 public key")
        return _raw_public(public)
    if text.startswith(b"-----BEGIN"):  # a private key: only its public half is used here
        return _raw_public(_private_from_pem(text, path).public_key())
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise FormatError(f"{path} is neither a PEM key nor base64 of a raw 32-byte Ed25519 key")
    return raw


def verify_signature(public_raw: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class KeyInfo:
    id: str
    name: str
    public_raw: bytes
    roles: tuple[str, ...]
    added_seq: int
    revoked_at_seq: int | None = None

    @property
    def public_b64(self) -> str:
        return base64.b64encode(self.public_raw).decode("ascii")

    @property
    def signs_events(self) -> bool:
        """Whether the key holds a role that may sign events (``EVENT_ROLES``: root or signer)."""
        return any(role in EVENT_ROLES for role in self.roles)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "roles": list(self.roles),
                "revoked_at_seq": self.revoked_at_seq}


def key_entry(signer_public: bytes, name: str, roles: Iterable[str]) -> dict[str, Any]:
    """The key object carried by ``ledger.created`` and ``key.added``."""
    return {
        "id": key_id(signer_public),
        "name": name,
        "public_key": base64.b64encode(signer_public).decode("ascii"),
        "roles": list(roles),
    }


def parse_key_entry(entry: Any, where: str) -> tuple[str, str, bytes, tuple[str, ...]]:
    """Validate a key object of a key event; returns (id, name, public_raw, roles)."""
    if not isinstance(entry, dict):
        raise FormatError(f"{where}: key entry is not an object")
    try:
        public_raw = base64.b64decode(entry["public_key"], validate=True)
        kid, name, roles = entry["id"], entry["name"], entry["roles"]
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"{where}: malformed key entry ({exc})") from None
    if len(public_raw) != 32:
        raise FormatError(f"{where}: public_key is not 32 bytes")
    if kid != key_id(public_raw):
        raise FormatError(f"{where}: id is not the SHA-256 of public_key")
    if not isinstance(name, str) or not isinstance(roles, list) or not roles:
        raise FormatError(f"{where}: name must be a string and roles a non-empty list")
    unknown = [role for role in roles if role not in ROLES]
    if unknown:
        raise FormatError(f"{where}: unknown roles {unknown}; known: {', '.join(ROLES)}")
    return kid, name, public_raw, tuple(roles)


@dataclass
class KeyRing:
    """Keys known at a point of the ledger, built by applying key events in order."""

    keys: dict[str, KeyInfo] = field(default_factory=dict)

    def apply(self, seq: int, type_: str, payload: dict[str, Any]) -> None:
        """Apply one key event. Raises ``FormatError`` on a malformed one."""
        where = f"seq {seq} {type_}"
        if type_ == "ledger.created":
            entries = payload.get("keys")
            if not isinstance(entries, list) or not entries:
                raise FormatError(f"{where}: keys must be a non-empty list")
            for entry in entries:
                self._add(seq, entry, where)
        elif type_ == "key.added":
            self._add(seq, payload, where)
        elif type_ == "key.revoked":
            kid = payload.get("id")
            info = self.keys.get(kid) if isinstance(kid, str) else None
            if info is None:
                raise FormatError(f"{where}: revokes unknown key {kid!r}")
            if info.revoked_at_seq is None:
                self.keys[info.id] = replace(info, revoked_at_seq=seq)

    def _add(self, seq: int, entry: Any, where: str) -> None:
        kid, name, public_raw, roles = parse_key_entry(entry, where)
        if kid in self.keys:
            raise FormatError(f"{where}: key {kid[:16]} is already known")
        self.keys[kid] = KeyInfo(kid, name, public_raw, roles, seq)

    def active(self, kid: str) -> KeyInfo | None:
        """The key if it is known and not revoked, else None."""
        info = self.keys.get(kid)
        if info is None or info.revoked_at_seq is not None:
            return None
        return info

    def require(self, kid: str, roles: Iterable[str]) -> KeyInfo:
        """The active key, if it holds one of ``roles``; a ``PolicyError`` otherwise."""
        info = self.keys.get(kid)
        if info is None:
            raise PolicyError(f"key {kid[:16]} is not known to this ledger")
        if info.revoked_at_seq is not None:
            raise PolicyError(f"key {kid[:16]} ({info.name}) was revoked at seq {info.revoked_at_seq}")
        wanted = tuple(roles)
        if not set(wanted) & set(info.roles):
            raise PolicyError(
                f"key {kid[:16]} ({info.name}) has roles {list(info.roles)}, needs one of {list(wanted)}"
            )
        return info

    def find(self, ref: str) -> KeyInfo:
        """A key by full id, unique id prefix, or name."""
        if ref in self.keys:
            return self.keys[ref]
        matches = [k for k in self.keys.values() if k.id.startswith(ref) or k.name == ref]
        if len(matches) != 1:
            raise FormatError(f"no single key matches {ref!r}")
        return matches[0]
