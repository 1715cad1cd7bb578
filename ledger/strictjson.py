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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

from .errors import FormatError

__all__ = ["MAX_DEPTH", "MAX_DOCUMENT_BYTES", "nesting_depth", "read_json"]

MAX_DEPTH = 64
MAX_DOCUMENT_BYTES = 64 << 20
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (strings skipped); 0 for a scalar."""
    steps = [_STEP[c] for c in _BRACKET.findall(_STRING.sub("", text))]
    return max(accumulate(steps), default=0)


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
