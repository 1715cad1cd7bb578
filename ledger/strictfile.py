"""Reading a file from outside as hostile input: a regular file, never through a symlink, bounded.

``read_limited(path, what, limit)`` is the one bounded file read: every reader of an
operator's file (plans, sites, family files, receipts, captures, probes, policies,
simulator configs, the CLI's ``@FILE`` arguments) goes through it before
``ledger.strictjson`` or ``ledger.stricttoml`` parse the bytes. It opens the path with
``O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`` (a symbolic link in the last component is
refused, a FIFO does not block the open), checks the opened descriptor with ``fstat``
(a FIFO, a device, a directory or a socket is refused: no race between a check and the
read), then reads at most ``limit`` bytes. Every refusal is one ``FormatError`` line
naming ``what``:

- ``cannot read {what} {path}: {reason}``
- ``{what} {path} is a symbolic link; refusing to follow it``
- ``{what} {path} is a FIFO, not a regular file``
- ``{what} {path} is over the {limit}-byte limit``

``read_optional`` is the same read for a file that may be absent (``None`` then).
``follow_symlinks=True`` follows a link in the last component (the signing key's reader:
secret mounts present keys through links; the checks are on the file reached), and
``check`` sees the opened file's ``stat`` before a byte is read (the key's 0600 check).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from .errors import FormatError

__all__ = ["file_kind", "read_limited", "read_optional"]

_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
          | getattr(os, "O_CLOEXEC", 0))


def file_kind(mode: int) -> str:
    """What a ``st_mode`` names, for a refusal line ("FIFO", "directory", ...)."""
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISLNK(mode):
        return "symbolic link"
    return "special file"


Check = Callable[[os.stat_result], None]


def read_limited(path: str | Path, what: str, limit: int, *, follow_symlinks: bool = False,
                 check: Check | None = None) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); ``FormatError`` otherwise (see the module)."""
    data = _read(path, what, limit, missing_ok=False, follow_symlinks=follow_symlinks, check=check)
    assert data is not None
    return data


def read_optional(path: str | Path, what: str, limit: int) -> bytes | None:
    """As :func:`read_limited`, but ``None`` when nothing is at ``path``."""
    return _read(path, what, limit, missing_ok=True)


def _read(path: str | Path, what: str, limit: int, *, missing_ok: bool, follow_symlinks: bool = False,
          check: Check | None = None) -> bytes | None:
    try:
        fd = os.open(path, _FLAGS & ~getattr(os, "O_NOFOLLOW", 0) if follow_symlinks else _FLAGS)
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise FormatError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise FormatError(f"{what} {path} is a symbolic link; refusing to follow it") from None
        raise FormatError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(f"{what} {path} is a {file_kind(info.st_mode)}, not a regular file")
        if check is not None:
            check(info)
        # One read of the size fstat gives (and a byte more, to see a file over the limit): the bytes are
        # held once, not as chunks and their join. A file that grew since fstat is read on, to the limit.
        data = os.read(fd, min(limit, info.st_size) + 1)
        if len(data) <= limit:
            parts, total = [data], len(data)
            while total <= limit and (chunk := os.read(fd, min(limit + 1 - total, 1 << 20))):
                parts.append(chunk)
                total += len(chunk)
            if len(parts) > 1:
                data = b"".join(parts)
    except OSError as exc:
        raise FormatError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FormatError(f"{what} {path} is over the {limit}-byte limit")
    return data
