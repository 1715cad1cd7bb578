"""Reading TOML from outside as hostile input: bounded in size and nesting.

``read_toml(raw, what)`` is how tally reads every TOML document it did not write (a
plan, a site file, a simulator configuration): one ``FormatError`` line naming ``what``
for bytes that are not UTF-8, a document over ``max_bytes``, or nesting deeper than
``max_depth``, the TOML counterpart of ``ledger.strictjson.read_json``. What it adds to
tomllib's own cost is O(depth) memory (``bench/strict.py`` measures the whole per byte).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from typing import Any

from .errors import FormatError

__all__ = ["MAX_TOML_BYTES", "MAX_TOML_DEPTH", "read_toml"]

MAX_TOML_DEPTH = 64  # tables and arrays inside each other, as for JSON (ledger.strictjson.MAX_DEPTH)
MAX_TOML_BYTES = 16 << 20
_END = object()


def _toml_depth(value: Any, limit: int) -> int:
    """How deep tables and arrays nest in a parsed document.

    Iterative (no recursion to exhaust) and O(depth) in memory: the stack holds one
    iterator per open table or array, never the children of a wide one.
    """
    deepest = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        if isinstance(item, dict):
            stack.append(iter(item.values()))
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            continue
        deepest = max(deepest, len(stack) - 1)
        if deepest > limit:
            break
    return deepest


def read_toml(raw: bytes, what: str, *, max_bytes: int = MAX_TOML_BYTES, max_depth: int = MAX_TOML_DEPTH,
              invalid: str = "not valid TOML") -> dict[str, Any]:
    """Parse a TOML document from outside; one ``FormatError`` line naming ``what`` otherwise.

    Refuses bytes that are not UTF-8, documents over ``max_bytes``, and nesting deeper
    than ``max_depth`` (``a = [[[...]]]``, ``{a = {a = ...}}``, ``[a.a.a...]``): tomllib
    recurses on nested arrays and inline tables, so a deep one is caught as the
    RecursionError it raises, and every shallower one is measured after parsing.
    """
    if len(raw) > max_bytes:
        raise FormatError(f"{what}: over the {max_bytes}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{what}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"{what}: {invalid}: {exc}") from None
    except RecursionError:
        raise FormatError(f"{what}: nests deeper than {max_depth} levels") from None
    if _toml_depth(data, max_depth) > max_depth:
        raise FormatError(f"{what}: nests deeper than {max_depth} levels")
    return data
