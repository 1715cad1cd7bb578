"""The files a command reads, read as hostile input: bounded, regular files only, never through a symlink.

``read_bounded`` is the one reader (``-`` is stdin); the others decode what it read:
UTF-8 text (``read_text``, ``read_optional_text``) or one strict JSON document
(``read_json_file``, ``read_json_arg``). Every refusal is one ``FormatError`` line (exit 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

if TYPE_CHECKING:
    from ledger.note import Verifier

__all__ = ["MAX_INPUT_BYTES", "read_bounded", "read_json_arg", "read_json_file", "read_optional_text", "read_text",
           "read_vkeys"]

MAX_INPUT_BYTES = 64 << 20  # the most a command reads of any one input file (strictjson's document bound)


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


def read_vkeys(values: list[str]) -> list[Verifier]:
    """vkeys given inline, or files holding one vkey per line (every ``--vkey``)."""
    from ledger.note import parse_vkey

    out: list[Verifier] = []
    for value in values:
        path = Path(value)
        if "+" not in value and path.is_file():
            lines = [line.strip() for line in read_text(path, "vkey file").splitlines()]
            out.extend(parse_vkey(line) for line in lines if line and not line.startswith("#"))
        else:
            out.append(parse_vkey(value))
    return out
