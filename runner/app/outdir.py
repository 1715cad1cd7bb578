"""Everything the CLI writes under ``--out``, written so that no planted symlink is written through.

The directory is opened without following a symlink (a symlinked ``--out`` is refused),
each file is written to a fresh temporary name (``O_CREAT | O_EXCL | O_NOFOLLOW``), synced
and renamed into place, so a pre-planted symlink is never written through, and an error
(a full disk, a read-only file system) leaves the old file or nothing, never half a file.
Only the last component of ``--out`` is checked: a symlink higher up the path is the
operator's.

::

    from runner.app import OutDir

    with OutDir.open(Path("out")) as out:
        out.write("summary.json", data)
        with out.growing("requests.jsonl") as log:   # a log others may follow as it grows
            log.write(line)
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from ledger.errors import FormatError

__all__ = ["OutDir", "check_out", "restage", "staged_out", "write_out_file"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _lstat(path: Path | str, dir_fd: int | None = None) -> os.stat_result | None:
    try:
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def check_out(path: Path | None, *names: str, option: str = "--out") -> None:
    """Refuse (one line, exit 2) an ``--out`` directory that is a symlink or not a directory,
    and any of ``names`` in it that is a symlink or not a regular file. Creates nothing.

    For writers that are not (yet) routed through ``OutDir``: it refuses what was planted
    before the command started.
    """
    if path is None:
        return
    info = _lstat(path)
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        raise FormatError(f"{option} {path}: is a symbolic link; refusing to write through it")
    if not stat.S_ISDIR(info.st_mode):
        raise FormatError(f"{option} {path}: exists and is not a directory")
    for name in names:
        _check_target(path / name, _lstat(path / name), option)


def _check_target(path: Path, info: os.stat_result | None, option: str, *, directory: bool = False) -> None:
    """Refuse what ``info`` (an ``lstat`` of ``path``, ``None``: nothing there) shows planted: a symlink, or
    not a regular file (``directory``: not a directory)."""
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        raise FormatError(f"{option}: {path} is a symbolic link; refusing to write through it")
    if directory and not stat.S_ISDIR(info.st_mode):
        raise FormatError(f"{option}: {path} exists and is not a directory")
    if not directory and not stat.S_ISREG(info.st_mode):
        raise FormatError(f"{option}: {path} exists and is not a regular file")


def _write_error(option: str, path: Path, exc: OSError) -> FormatError:
    return FormatError(f"{option}: cannot write {path}: {exc.strerror or exc}")


class OutDir:
    """An ``--out`` directory opened without following symlinks; files are written atomically in it."""

    def __init__(self, path: Path, fd: int, option: str) -> None:
        self.path = path
        self.fd = fd
        self.option = option

    @classmethod
    @contextmanager
    def open(cls, path: Path, option: str = "--out") -> Iterator[OutDir]:
        """Create ``path`` if needed (with its parents) and open it; refuse a symlink or a non-directory."""
        check_out(path, option=option)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):
                os.mkdir(path, 0o777)  # mkdir does not follow a symlink planted at path
            fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        except OSError as exc:
            check_out(path, option=option)  # replaced by a symlink meanwhile: say so
            raise FormatError(f"{option} {path}: cannot create the directory: {exc.strerror or exc}") from None
        try:
            yield cls(path, fd, option)
        finally:
            os.close(fd)

    @contextmanager
    def sub(self, name: str) -> Iterator[OutDir]:
        """A subdirectory (``plots``), created if needed, opened without following a symlink."""
        _plain_name(name)
        target = self.path / name
        _check_target(target, _lstat(name, self.fd), self.option, directory=True)
        try:
            with suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=self.fd)
            fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            _check_target(target, _lstat(name, self.fd), self.option, directory=True)
            raise FormatError(f"{self.option}: cannot create {target}: {exc.strerror or exc}") from None
        try:
            yield OutDir(target, fd, self.option)
        finally:
            os.close(fd)

    def write(self, name: str, data: bytes, mode: int = 0o666) -> Path:
        """Write ``name`` whole (temporary file, fsync, rename); refuse a symlink or a non-file there."""
        with self.stream(name, mode) as handle:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(handle.fileno(), view):]
            except OSError as exc:
                raise _write_error(self.option, self.path / name, exc) from None
        return self.path / name

    @contextmanager
    def stream(self, name: str, mode: int = 0o666) -> Iterator[BinaryIO]:
        """Write ``name`` as it is produced: a fresh temporary file (``O_CREAT | O_EXCL | O_NOFOLLOW``),
        synced and renamed into place when the block ends; removed if the block raises.

        A symlink or a non-file at ``name`` is refused before anything is written; the rename
        replaces whatever appeared there meanwhile (a link included) and never follows it.
        """
        _plain_name(name)
        target = self.path / name
        _check_target(target, _lstat(name, self.fd), self.option)
        temp = f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.fd)
        except OSError as exc:
            raise _write_error(self.option, target, exc) from None
        handle = os.fdopen(fd, "wb")
        finished = False
        try:
            yield handle
            finished = True
        finally:
            if not finished:
                self._discard(handle, temp)
        try:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)  # replaces a link, never follows it
        except OSError as exc:
            self._discard(handle, temp)
            raise _write_error(self.option, target, exc) from None
        except BaseException:
            self._discard(handle, temp)
            raise
        with suppress(OSError):  # the rename is durable once the directory is synced
            os.fsync(self.fd)

    @contextmanager
    def growing(self, name: str, mode: int = 0o666) -> Iterator[BinaryIO]:
        """Write ``name`` in place as it grows (a log others may follow while it is written).

        An old regular file there is removed first, then ``name`` is created with
        ``O_CREAT | O_EXCL | O_NOFOLLOW``: a symlink or a non-file there is refused, and
        one planted between the removal and the creation makes the creation fail (one
        line), so nothing is written through a link. What was written stays if the block
        raises (it is a record of what happened); the file is synced when the block ends.
        """
        _plain_name(name)
        target = self.path / name
        _check_target(target, _lstat(name, self.fd), self.option)
        try:
            with suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.fd)
        except OSError as exc:
            _check_target(target, _lstat(name, self.fd), self.option)  # planted meanwhile: say so
            raise _write_error(self.option, target, exc) from None
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            with suppress(OSError):
                os.fsync(handle.fileno())

    def _discard(self, handle: BinaryIO, temp: str) -> None:
        with suppress(OSError):
            handle.close()
        with suppress(OSError):
            os.unlink(temp, dir_fd=self.fd)

    def publish(self, stage: Path) -> None:
        """Copy every file under ``stage`` (a private staging directory) into this directory."""
        for entry in sorted(stage.iterdir()):
            if entry.is_symlink():
                continue
            if entry.is_dir():
                with self.sub(entry.name) as sub:
                    sub.publish(entry)
            elif entry.is_file():
                self.write(entry.name, entry.read_bytes())


def _plain_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")


def write_out_file(path: Path, data: bytes, option: str = "--out", mode: int = 0o666) -> Path:
    """Write one ``--out FILE`` atomically, refusing a symlink or a directory at ``path``.

    The parent directory must exist (it is followed if it is a symlink; only ``path``
    itself is guarded).
    """
    info = _lstat(path)
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise FormatError(f"{option} {path}: is a symbolic link; refusing to write through it")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise FormatError(f"{option} {path}: is a directory; give a file name")
    parent = path.parent
    try:
        fd = os.open(parent, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError as exc:
        raise FormatError(f"{option} {path}: cannot open the directory {parent}: {exc.strerror or exc}") from None
    try:
        return OutDir(parent, fd, option).write(path.name, data, mode)
    finally:
        os.close(fd)


@contextmanager
def staged_out(out: Path, option: str = "--out") -> Iterator[Path]:
    """A private staging directory for a writer that takes a path; published into ``out`` on success.

    ``out`` is checked first (a symlink or a non-directory is refused before any work);
    the writer fills the staging directory (mode 0700, removed afterwards); then every
    file is copied into ``out`` through ``OutDir``. If the writer fails nothing reaches
    ``out``; if publishing fails (a full disk), each file there is whole, old or new.
    """
    check_out(out, option=option)
    stage = Path(tempfile.mkdtemp(prefix="tally-out-"))
    try:
        yield stage
        with OutDir.open(out, option) as target:
            target.publish(stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def restage(path: str | Path, stage: Path, out: Path) -> str:
    """Where a path the writer reported under ``stage`` lives under ``out``."""
    return str(out / Path(path).relative_to(stage))
