"""What every command shares: global options, the error-to-exit-code map, output.

Keep this module light: ``tally --version`` imports it, and heavy libraries
(SQLAlchemy, numpy, httpx, ...) are imported inside the commands that need them.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, TypeVar

import typer

from ledger.errors import (
    ExternalError,
    FormatError,
    IntegrityError,
    PolicyError,
    StorageError,
    TallyError,
)
from ledger.event import check_seq

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Ledger
    from runner.drivers.base import HostDriver
    from runner.plan.register import Registration


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_NO_ANSWER",
    "EXIT_OK",
    "MAX_INPUT_BYTES",
    "OutDir",
    "State",
    "check_out",
    "check_seq",
    "command",
    "exit_code",
    "fail",
    "print_json",
    "printable",
    "read_bounded",
    "read_json_arg",
    "read_json_file",
    "staged_out",
    "state",
    "write_data",
    "write_out_file",
]


EXIT_OK = 0


EXIT_FAILED = 1


EXIT_BAD_INPUT = 2


EXIT_NO_ANSWER = 3


F = TypeVar("F", bound=Callable[..., Any])

MAX_INPUT_BYTES = 64 << 20  # the most the CLI reads of any one input file (strictjson's document bound)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def exit_code(error: BaseException) -> int:
    """The one place where the error tree becomes exit codes (README, exit codes)."""
    if isinstance(error, FormatError):
        return EXIT_BAD_INPUT
    if isinstance(error, ExternalError):
        return EXIT_NO_ANSWER
    if isinstance(error, IntegrityError | PolicyError | StorageError):
        return EXIT_FAILED
    if isinstance(error, TallyError):
        return EXIT_FAILED
    return EXIT_FAILED


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    """Print one line on stderr and return the ``typer.Exit`` to raise."""
    print("tally: " + " ".join(message.split()), file=sys.stderr)
    return typer.Exit(code)


@dataclass
class State:
    """Global options (``--db``, ``--key``), read by every command."""

    db: str | None = None
    key: str | None = None

    def ledger(self) -> Ledger:
        """The ledger the global options name; it must exist."""
        from ledger.store import Ledger

        return Ledger.open(self.db)

    def key_path(self, ledger_url: str | None = None) -> Path:
        """``--key``, else ``$TALLY_KEY``, else ``.tally/root.pem`` beside the database."""
        if self.key:
            return Path(self.key)
        if os.environ.get("TALLY_KEY"):
            return Path(os.environ["TALLY_KEY"])
        return default_key_path(ledger_url or self.db)

    def signer(self, ledger_url: str | None = None) -> Signer:
        from ledger.keys import load_signer

        path = self.key_path(ledger_url)
        if not path.exists():
            raise FormatError(f"no signing key at {path}; pass --key PATH or set TALLY_KEY")
        return load_signer(path)


def default_key_path(db: str | None) -> Path:
    """``.tally/root.pem`` in the directory of a SQLite file, else the working directory."""
    from ledger.db import normalise_url

    url = normalise_url(db)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        base = Path(url[len("sqlite:///"):]).expanduser().resolve().parent
    else:
        base = Path.cwd()
    return base / ".tally" / "root.pem"


state = State()


def printable(text: str) -> str:
    """One line whatever a server or a bundle put in ``text``: whitespace collapsed, control characters escaped."""
    flat = " ".join(text.split())
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in flat)


def encodes_everything(stream: Any) -> bool:
    """Whether a text stream's encoding can write every character (a UTF encoding)."""
    import codecs

    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name.startswith("utf")
    except LookupError:
        return False


def write_data(text: str) -> None:
    """Write machine output (JSON, event lines, signed notes) as its UTF-8 bytes, whatever the locale.

    The bytes are the same in every locale: a checkpoint note saved from an ASCII
    terminal (``LC_ALL=POSIX``) still verifies, a JSON line is still UTF-8 JSON. Text for
    people goes through ``print``, whose stream escapes what its encoding cannot write
    (``cli.app.main`` sets ``errors="backslashreplace"``).
    """
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    if buffer is None or encodes_everything(out):
        out.write(text)
        return
    out.flush()
    buffer.write(text.encode("utf-8"))


def discard_stdout() -> None:
    """Point stdout at /dev/null: it failed (a closed pipe, a terminal gone, a full disk), so later
    writes, and the interpreter's last flush, cannot fail again."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def never_fails(show: Callable[..., None]) -> Callable[..., None]:
    """``show`` (a progress line, a wave) made harmless: if printing fails, the rest is discarded.

    For output written while state advances (a window's step lines): the work must go on
    to its recorded end (a restore) whether or not anyone still reads the terminal.
    """
    def call(*args: Any) -> None:
        try:
            show(*args)
        except (OSError, ValueError):  # ValueError: a closed file
            discard_stdout()

    return call


def print_json(value: Any) -> None:
    write_data(json.dumps(value, ensure_ascii=False, indent=None, sort_keys=False) + "\n")


def handle_errors(fn: F) -> F:
    """Turn a ``TallyError`` into one stderr line and its exit code; no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TallyError as error:
            raise fail(str(error), exit_code(error)) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper  # type: ignore[return-value]


def command(group: typer.Typer, name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Register ``fn`` as a command of ``group`` with tally's error handling."""

    def decorate(fn: F) -> F:
        group.command(name, **kwargs)(handle_errors(fn))
        return fn

    return decorate


def read_bounded(source: str | Path, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """At most ``limit`` bytes of a file (``-`` is stdin); ``FormatError`` if unreadable or longer.

    A file is read with ``ledger.strictfile.read_limited``: a regular file, never through
    a symbolic link, a FIFO refused without blocking.
    """
    if str(source) != "-":
        from ledger.strictfile import read_limited

        return read_limited(source, what, limit)
    try:
        data = sys.stdin.buffer.read(limit + 1)
    except OSError as exc:
        raise FormatError(f"cannot read {what} {source}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FormatError(f"{what} {source} is over the {limit}-byte limit")
    return data


def read_json_file(source: str | Path, what: str, name: str | None = None) -> Any:
    """One JSON document from a file (``-`` = stdin), read as hostile input (``read_bounded``, then
    ``ledger.strictjson``). Read errors name ``what`` and the file; parse errors name ``name``
    (default ``"{what} {source}"``)."""
    from ledger.strictjson import read_json

    return read_json(read_bounded(source, what), f"{what} {source}" if name is None else name)


def read_json_arg(value: str, what: str = "payload", *, payload_rules: bool = False) -> Any:
    """A JSON argument given inline or as ``@FILE`` (``@-`` reads stdin), read with ``ledger.strictjson``.

    ``payload_rules``: the value becomes an event payload, whose rules refuse NaN and
    Infinity naming the member (``payload.x: Infinity is not allowed``); such a document
    (already within the size and nesting bounds) is handed on for them to say so.
    """
    from ledger.strictjson import read_json

    data: str | bytes = read_bounded(value[1:], f"{what} file") if value.startswith("@") else value
    try:
        return read_json(data, what)
    except FormatError as error:
        if not (payload_rules and str(error).endswith("is not a JSON number")):
            raise
    return json.loads(data)  # bounded and UTF-8 (read_json checked both first); refused by the payload rules


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


WindowArg = Annotated[str, typer.Argument(metavar="WINDOW", help="Window id (as registered).")]


SiteOpt = Annotated[Path, typer.Option("--site", help="Site file (docs/site.md): hosts, endpoints, actions.")]


def ledger_and_signer() -> tuple[Ledger, Signer]:
    """The ledger of the global options and its signing key."""
    book = state.ledger()
    return book, state.signer(book.url)


def registered(book: Ledger, window: str) -> Registration:
    """The window's registration; one error (exit 2) when it has none."""
    from runner.plan.register import registered_plan

    return registered_plan(book, window)


def read_text(path: Path, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """A UTF-8 text file of at most ``limit`` bytes; ``FormatError`` otherwise."""
    try:
        return read_bounded(path, what, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{what} {path} is not UTF-8 text") from None


def read_optional_text(path: Path, what: str, limit: int = MAX_INPUT_BYTES) -> str | None:
    """As :func:`read_text`, but ``None`` when nothing is at ``path`` (a symlink there is still refused)."""
    from ledger.strictfile import read_optional

    data = read_optional(path, what, limit)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{what} {path} is not UTF-8 text") from None


def print_appended(event: Event, json_out: bool) -> None:
    """What ``append`` prints once the event is stored (after: a failed print loses output, never the event)."""
    if json_out:
        write_data(event.line() + "\n")
    else:
        print(event.seq)


def site_driver(path: Path) -> tuple[HostDriver, float]:
    """The driver a site file describes, and its time scale."""
    from runner.drivers.site import load_site, site_time_scale

    driver = load_site(path)
    return driver, site_time_scale(driver)


# ---------------------------------------------------------------------------- --out
#
# Every file the CLI writes under --out goes through OutDir: the directory is opened
# without following a symlink (a symlinked --out is refused), each file is written to
# a fresh temporary name (O_CREAT | O_EXCL | O_NOFOLLOW), synced and renamed into place,
# so a pre-planted symlink is never written through, and an error (a full disk, a
# read-only file system) leaves the old file or nothing, never half a file. Only the
# last component of --out is checked: a symlink higher up the path is the operator's.


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


def _check_target(path: Path, info: os.stat_result | None, option: str) -> None:
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        raise FormatError(f"{option}: {path} is a symbolic link; refusing to write through it")
    if not stat.S_ISREG(info.st_mode):
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
        _check_dir(target, _lstat(name, self.fd), self.option)
        try:
            with suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=self.fd)
            fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            _check_dir(target, _lstat(name, self.fd), self.option)
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


def _check_dir(path: Path, info: os.stat_result | None, option: str) -> None:
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        raise FormatError(f"{option}: {path} is a symbolic link; refusing to write through it")
    if not stat.S_ISDIR(info.st_mode):
        raise FormatError(f"{option}: {path} exists and is not a directory")


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
