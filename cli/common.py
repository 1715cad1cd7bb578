"""What every command shares: global options, the error-to-exit-code map, output.

Keep this module light: ``tally --version`` imports it, and heavy libraries
(SQLAlchemy, numpy, httpx, ...) are imported inside the commands that need them.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ledger.errors import (
    ExternalError,
    FormatError,
    IntegrityError,
    PolicyError,
    StorageError,
    TallyError,
)

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
    "State",
    "command",
    "exit_code",
    "fail",
    "print_json",
    "state",
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


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=None, sort_keys=False) + "\n")


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


def read_json_arg(value: str, what: str = "payload") -> Any:
    """A JSON argument given inline or as ``@FILE`` (``@-`` reads stdin)."""
    if value.startswith("@"):
        source = value[1:]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise FormatError(f"cannot read {what} file {source}: {exc.strerror}") from None
    else:
        text = value
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


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


def read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FormatError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(f"{what} {path} is not UTF-8 text") from None


def print_appended(event: Event, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(event.line() + "\n")
    else:
        print(event.seq)


def site_driver(path: Path) -> tuple[HostDriver, float]:
    """The driver a site file describes, and its time scale."""
    from runner.drivers.site import load_site, site_time_scale

    driver = load_site(path)
    return driver, site_time_scale(driver)
