"""What every command shares: global options, the error-to-exit-code map, output.

A command parses its options, calls the application layer (``runner.app``) and prints;
this module holds what they share for that. Keep it light: ``tally --version`` imports
it, and heavy libraries (SQLAlchemy, numpy, httpx, ...) are imported inside the
application layer's functions.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ledger import ExternalError, FormatError, IntegrityError, PolicyError, StorageError, TallyError, check_seq
from runner.app import Session

if TYPE_CHECKING:
    from ledger import Event


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_NO_ANSWER",
    "EXIT_OK",
    "check_seq",
    "command",
    "exit_code",
    "fail",
    "print_appended",
    "print_json",
    "printable",
    "session",
    "write_data",
]


EXIT_OK = 0


EXIT_FAILED = 1


EXIT_BAD_INPUT = 2


EXIT_NO_ANSWER = 3


F = TypeVar("F", bound=Callable[..., Any])


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
    """Print one line on stderr and return the ``typer.Exit`` to raise: whitespace collapsed and control
    characters escaped (an error may carry what a site, a server or a bundle wrote: an escape sequence
    must reach the terminal as text, never act on it)."""
    print("tally: " + printable(message), file=sys.stderr)
    return typer.Exit(code)


session = Session()
"""The global options of this invocation (set by ``cli.app``)."""


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


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No step lines while running; the result only.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Every step line, repeated ones too.")]


WindowArg = Annotated[str, typer.Argument(metavar="WINDOW", help="Window id (as registered).")]


SiteOpt = Annotated[Path, typer.Option("--site", help="Site file (docs/site.md): hosts, endpoints, actions.")]


def print_appended(event: Event, json_out: bool) -> None:
    """What ``append`` prints once the event is stored (after: a failed print loses output, never the event)."""
    if json_out:
        write_data(event.line() + "\n")
    else:
        print(event.seq)
