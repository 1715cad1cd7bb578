"""Source families: JSONL files of prompts in a frozen order, hashed for registration.

One prompt per line: ``{"id": str, "prompt": str, "kind": str}`` (``kind`` optional,
e.g. ``short``/``long``; ``id`` defaults to ``<family>-<line>``), or ``"messages"``
(a chat) instead of ``"prompt"``. The family's sha256 is that of the file's bytes, so
the registered digest pins both the prompts and their order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import FieldError, FormatError
from ledger.strictfile import read_limited
from ledger.strictjson import MAX_DEPTH, nesting_depth, read_json
from ledger.strictwrite import write_whole

from ..fields import Fields

__all__ = ["MAX_FAMILY_BYTES", "Family", "Prompt", "family_bytes", "load_family", "parse_family", "write_family"]

MAX_FAMILY_BYTES = 256 << 20  # a family file (seed 003's largest is ~1 MiB: 153600-word contexts)


@dataclass(frozen=True)
class Prompt:
    """One frozen prompt of a family."""

    id: str
    text: str
    kind: str = ""
    messages: tuple[Mapping[str, str], ...] | None = None

    def chat_messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages (one user message when only text was given)."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.text}]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.messages is not None:
            out["messages"] = [dict(m) for m in self.messages]
        else:
            out["prompt"] = self.text
        if self.kind:
            out["kind"] = self.kind
        return out


@dataclass(frozen=True)
class Family:
    """A loaded family file: its prompts in order and the sha256 of its bytes."""

    name: str
    prompts: tuple[Prompt, ...]
    sha256: str
    path: str | None = None


def _line_prompt(obj: Any, number: int, name: str, where: str) -> Prompt:
    line = f"line {number}"
    if not isinstance(obj, dict):
        raise FieldError(line, "must be a JSON object", source=where)
    f = Fields(obj, line, source=where, dialect="json")
    pid = f.string("id", f"{name}-{number}", nonempty=True)
    kind = f.string("kind", "")
    if "messages" in obj:
        messages = f.raw("messages")
        if (not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)):
            raise f.fail("messages", "must be a non-empty list of {role, content}")
        text = "\n".join(m["content"] for m in messages)
        return Prompt(pid, text, kind, tuple({"role": m["role"], "content": m["content"]} for m in messages))
    prompt = f.raw("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise f.fail("prompt", "must be a non-empty string")
    return Prompt(pid, prompt, kind)


def _lines(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(number, byte offset, bytes) of each line of ``data``; lines end at ``\n`` only.

    One line at a time, sliced from ``data``: reading a family costs its bytes and the
    prompts it holds, never a second copy of the whole file (its text, its list of lines).
    """
    start, number, size = 0, 0, len(data)
    while start <= size:
        end = data.find(b"\n", start)
        if end < 0:
            end = size
        number += 1
        yield number, start, data[start:end]
        start = end + 1


def _check_utf8(data: bytes, where: str) -> None:
    """The whole file is UTF-8 (checked line by line: no text of the whole file is built)."""
    if data.isascii():
        return
    for _number, offset, raw in _lines(data):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FieldError("", f"not UTF-8 ({exc.reason} at byte {offset + exc.start})", source=where) from None


def parse_family(data: bytes, name: str, where: str = "family") -> Family:
    """Parse family bytes; ``FieldError`` names the first bad line (and member)."""
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    _check_utf8(data, where)
    # Lines end at "\n" only: str.splitlines() would also split inside JSON strings at U+0085, U+2028...
    for number, _offset, raw in _lines(data):
        line = raw.decode("utf-8").removesuffix("\r")
        del raw
        if not line.strip():
            continue
        # Hostile input: nesting bounded before any parser recurses, then one value per
        # member and no NaN (ledger.strictjson); syntax errors keep json's own wording.
        depth = nesting_depth(line)
        if depth > MAX_DEPTH:
            raise FieldError(f"line {number}", f"nests {depth} levels deep, more than {MAX_DEPTH}", source=where)
        try:
            json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise FieldError(f"line {number}", f"not valid JSON ({exc})", source=where) from None
        try:
            obj = read_json(line, "the line")
        except FormatError as exc:
            raise FieldError(f"line {number}", str(exc).removeprefix("the line "), source=where) from None
        del line
        prompt = _line_prompt(obj, number, name, where)
        if prompt.id in seen:
            raise FieldError(f"line {number}", f"duplicate id {prompt.id!r} (first on line {seen[prompt.id]})",
                             source=where)
        seen[prompt.id] = number
        prompts.append(prompt)
    if not prompts:
        raise FieldError("", "holds no prompts", source=where)
    return Family(name, tuple(prompts), hashlib.sha256(data).hexdigest())


def load_family(path: str | Path, name: str | None = None) -> Family:
    """Read a family file; its name defaults to the file's stem."""
    path = Path(path)
    data = read_limited(path, "family file", MAX_FAMILY_BYTES)  # a regular file, not through a symlink
    family = parse_family(data, name or path.stem, str(path))
    return Family(family.name, family.prompts, family.sha256, str(path))


def family_bytes(prompts: Iterable[Prompt]) -> bytes:
    """The canonical JSONL bytes of prompts (sorted keys, compact, one per line)."""
    return b"".join(
        json.dumps(p.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        for p in prompts
    )


def write_family(path: str | Path, prompts: Sequence[Prompt]) -> str:
    """Write a family file (whole, never through a symlink); returns its sha256 (what a plan registers)."""
    data = family_bytes(prompts)
    write_whole(path, data, "family file", mode=0o644)
    return hashlib.sha256(data).hexdigest()
