"""Reading JSON from outside as hostile input: bounded in size and nesting, one value per member.

``read_json(text, what)`` is how tally reads every JSON document it did not write itself
in this process (a payload file, a rule input, a receipt, a bundle's manifest, a
server's reply): it refuses, with one ``FormatError`` line naming ``what``,

- bytes that are not UTF-8, and documents over ``max_bytes``;
- nesting deeper than ``max_depth`` (``[[[...]]]``, ``{"a":{"a":...}}``) before parsing,
  so no parser or later walk can recurse without bound;
- an object with the same member twice (``{"verdict":"FAIL","verdict":"PASS"}``): two
  readers could see two different values;
- ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON.

Memory is bounded too: ``nesting_depth`` scans the text in chunks of ``SCAN_CHUNK``
characters and keeps nothing but two counters, so the guard costs a constant (under a
megabyte) whatever the document's size; a document of ``MAX_DOCUMENT_BYTES`` costs its
bytes, its text and its parsed value (``bench/strict.py`` measures it per byte).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

from .errors import FormatError

__all__ = ["MAX_DEPTH", "MAX_DOCUMENT_BYTES", "SCAN_CHUNK", "nesting_depth", "read_json"]

MAX_DEPTH = 64
MAX_DOCUMENT_BYTES = 64 << 20
SCAN_CHUNK = 1 << 16  # characters nesting_depth looks at in one step
# A JSON string: possessive repeats, so the regular expression engine keeps no backtracking state per character.
_BODY = r'(?:[^"\\]++|\\.)*+'
_STRINGS = re.compile(rf'(?<!\\)"{_BODY}"', re.S)  # whole strings (a string never follows a backslash in JSON)
_STRING_OPEN = re.compile(rf'"{_BODY}"?', re.S)  # one string from its opening quote, closed or not
_STRING_START = re.compile(r'(?<!\\)"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (strings skipped); 0 for a scalar.

    Linear in time, constant in memory: the text is read in chunks of ``SCAN_CHUNK``
    characters; in each, whole strings are removed and the brackets left are counted.
    A chunk that ends inside a string is cut before that string (the next chunk starts
    with it); a string longer than a chunk is skipped in one pass of the pattern. After
    an unterminated string the rest of the text is inside it, as a JSON reader sees it.
    For text that is not JSON (a backslash outside a string) the count is an upper
    estimate from that point: a JSON parser refuses such text there anyway.
    """
    depth = deepest = 0
    pos, size = 0, len(text)
    step = _STEP.__getitem__
    while pos < size:
        end = min(size, pos + SCAN_CHUNK)
        piece = text[pos:end]
        if '"' in piece:
            piece = _STRINGS.sub("", piece)
            cut = _STRING_START.search(piece)
            if cut is not None:  # a string this chunk does not close: the next chunk starts with it
                end -= len(piece) - cut.start()
                if end == pos:  # it is longer than a chunk (or never closed): skip it whole
                    found = _STRING_OPEN.match(text, pos)
                    assert found is not None
                    pos = found.end()
                    continue
                piece = piece[:cut.start()]
        pos = end
        brackets = piece.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
        if brackets:
            opens = brackets.count(b"[") + brackets.count(b"{")
            if depth + opens > deepest:
                deepest = max(deepest, max(accumulate(map(step, brackets), initial=depth)))
            depth += 2 * opens - len(brackets)
    return deepest


class _Duplicate(ValueError):
    pass


def _object(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(f"member {key!r} appears twice in one object")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_json(data: str | bytes, what: str, *, max_bytes: int = MAX_DOCUMENT_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:
    """Parse one JSON document from outside (see the module docstring); ``FormatError`` otherwise."""
    if isinstance(data, bytes):
        if len(data) > max_bytes:
            raise FormatError(f"{what} is {len(data)} bytes, over the {max_bytes}-byte limit")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{what} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    else:
        text = data
        if len(text) > max_bytes:
            raise FormatError(f"{what} is over the {max_bytes}-byte limit")
    depth = nesting_depth(text)
    if depth > max_depth:
        raise FormatError(f"{what} nests {depth} levels deep, more than {max_depth}")
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except _Duplicate as exc:
        raise FormatError(f"{what} is not acceptable JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{what} is not valid JSON: {exc}") from None
