"""Creating the files tally owns (locks, state, outputs): never through a symlink, never over a foreign file.

The write-side twin of :mod:`ledger.strictfile`. A name tally creates in a directory
someone else can write to may have been planted first: a symlink to a victim, a hard
link to one, a FIFO. Each helper opens with ``O_NOFOLLOW`` and checks the opened
descriptor (``fstat``), so there is no race between a check and the use:

- :func:`open_dir` creates a directory (its parents as needed) and opens it
  ``O_DIRECTORY | O_NOFOLLOW``: a symlink at its name is refused.
- :func:`open_lock` opens (or creates) a lock file ``O_RDWR | O_CREAT | O_NOFOLLOW``,
  never ``O_TRUNC``; the file it opened must be a regular file with one link whose
  content is empty or a pid line (what tally writes there), else it is left untouched
  and refused. :func:`stamp_pid` then writes the caller's pid into the locked file.
- :func:`write_whole` writes a file whole: a fresh temporary name
  (``O_CREAT | O_EXCL | O_NOFOLLOW``), fsync, then a rename over the name, which
  replaces a link and never follows it; a symlink or a non-file already at the name is
  refused first, so the caller hears of the planted link.

Every refusal is one :class:`~ledger.errors.FormatError` line (exit 2) naming ``what``
and the path; the file planted there is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from pathlib import Path

from .errors import FormatError
from .strictfile import file_kind

__all__ = ["open_dir", "open_lock", "stamp_pid", "write_whole"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_PID_LINE = re.compile(rb"\d{1,20}\n?")
_LOCK_PEEK = 64


def _symlink_refusal(what: str, path: Path | str) -> FormatError:
    return FormatError(f"{what} {path} is a symbolic link; refusing to follow it")


def _lstat(name: str | Path, dir_fd: int | None) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _shown(name: str | Path, shown: Path | str | None) -> Path | str:
    return shown if shown is not None else name


def open_dir(path: Path, what: str, *, dir_fd: int | None = None, parents: bool = True) -> int:
    """Create the directory ``path`` if needed and open it, never through a symlink at its name.

    With ``dir_fd``, ``path`` is a plain name inside that directory (and ``parents`` is
    ignored). Returns the directory's descriptor (the caller closes it).
    """
    try:
        if parents and dir_fd is None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o777, dir_fd=dir_fd)  # mkdir never follows a symlink at its name
        return os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        info = _lstat(path, dir_fd)
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise _symlink_refusal(what, path) from None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise FormatError(f"{what} {path} is a {file_kind(info.st_mode)}, not a directory") from None
        raise FormatError(f"cannot create {what} {path}: {exc.strerror or exc}") from None


def open_lock(path: Path | str, what: str, *, dir_fd: int | None = None, mode: int = 0o600,
              shown: Path | str | None = None) -> int:
    """Open or create the lock file ``path`` (see the module): its descriptor, for ``flock``.

    With ``dir_fd``, ``path`` is a plain name inside that directory; ``shown`` is how
    refusals name it.
    """
    shown = _shown(path, shown)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise _symlink_refusal(what, shown) from None
        raise FormatError(f"cannot open {what} {shown}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(f"{what} {shown} is a {file_kind(info.st_mode)}, not a regular file")
        if info.st_nlink != 1:
            raise FormatError(f"{what} {shown} has {info.st_nlink} links: another file's name; refusing to use it")
        head = os.pread(fd, _LOCK_PEEK, 0)
        if head and not _PID_LINE.fullmatch(head):
            raise FormatError(f"{what} {shown} holds something other than a pid; refusing to write over it")
    except OSError as exc:
        os.close(fd)
        raise FormatError(f"cannot open {what} {shown}: {exc.strerror or exc}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def stamp_pid(fd: int) -> None:
    """Write this process's pid into the lock file ``fd`` (opened by :func:`open_lock`, held)."""
    line = f"{os.getpid()}\n".encode()
    os.pwrite(fd, line, 0)
    os.ftruncate(fd, len(line))


def write_whole(path: Path | str, data: bytes, what: str, *, mode: int = 0o600, dir_fd: int | None = None,
                shown: Path | str | None = None, sync: bool = True) -> None:
    """Write ``path`` whole (see the module); ``FormatError`` for a symlink or a non-file there, or a failed write.

    With ``dir_fd``, ``path`` is a plain name inside that directory; ``shown`` is how
    refusals name it. ``sync=False`` skips the two fsyncs (the caller syncs many files at
    once before it writes what depends on them).
    """
    where = _shown(path, shown)
    if dir_fd is not None:
        parent_fd, name, own = dir_fd, str(path), False
    else:
        try:
            parent_fd = os.open(Path(path).parent, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        except OSError as exc:
            raise FormatError(f"cannot write {what} {where}: {exc.strerror or exc}") from None
        name, own = Path(path).name, True
    try:
        info = _lstat(name, parent_fd)
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise _symlink_refusal(what, where)
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise FormatError(f"{what} {where} is a {file_kind(info.st_mode)}, not a regular file")
        temp = f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=parent_fd)
        except OSError as exc:
            raise FormatError(f"cannot write {what} {where}: {exc.strerror or exc}") from None
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            if sync:
                os.fsync(parent_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent_fd)
            raise FormatError(f"cannot write {what} {where}: {exc.strerror or exc}") from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent_fd)
            raise
    finally:
        if own:
            os.close(parent_fd)
