"""Readers for rule inputs: each returns a typed value or raises a ``FormatError`` naming the field.

A field is named by its path in the input, e.g. ``waves[3].rounds``; the message says what
was expected (``waves[3].rounds: expected a non-negative integer``). JSON booleans are not
numbers here, numbers must be finite, and objects refuse keys they do not know (a typo must
not silently fall back to a default).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ledger.errors import FormatError

MAX_INT = 2**53 - 1  # JSON interoperability (and the ledger's payload rule)

__all__ = [
    "MAX_INT",
    "bad",
    "check_keys",
    "get_bool",
    "get_int",
    "get_list",
    "get_number",
    "get_object",
    "get_str",
    "is_number",
]


def bad(path: str, problem: str) -> FormatError:
    """The error for field ``path`` (one line: ``path: problem``)."""
    return FormatError(f"{path}: {problem}")


def is_number(value: Any) -> bool:
    """A finite JSON number (int or float, not a boolean)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def check_keys(obj: Mapping[str, Any], path: str, required: Iterable[str], optional: Iterable[str] = ()) -> None:
    """Every required key present and no key outside ``required`` and ``optional``."""
    required = tuple(required)
    allowed = set(required) | set(optional)
    for key in required:
        if key not in obj:
            raise bad(_join(path, key), "missing")
    for key in obj:
        if key not in allowed:
            raise bad(_join(path, str(key)), f"unknown field (expected {', '.join(sorted(allowed))})")


def get_object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(path, "expected an object")
    return value


def get_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad(path, "expected a list")
    return value


def get_str(value: Any, path: str, *, choices: Iterable[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise bad(path, "expected a non-empty string")
    if choices is not None:
        options = tuple(choices)
        if value not in options:
            raise bad(path, f"expected one of {', '.join(repr(o) for o in options)}, got {value!r}")
    return value


def get_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise bad(path, "expected true or false")
    return value


def get_int(value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None,
            nullable: bool = False) -> int | None:
    """An integer (``1.0`` is refused: counters are integers); ``None`` only when ``nullable``."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(path, _expected_int(minimum, maximum, nullable))
    if abs(value) > MAX_INT:
        raise bad(path, f"integer beyond +/-(2^53-1), got {value}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise bad(path, _expected_int(minimum, maximum, nullable) + f", got {value}")
    return value


def get_number(value: Any, path: str, *, minimum: float | None = None, above: float | None = None,
               below: float | None = None, nullable: bool = False) -> float | None:
    """A finite number as a float; ``minimum`` inclusive, ``above``/``below`` exclusive bounds."""
    if value is None and nullable:
        return None
    what = _expected_number(minimum, above, below, nullable)
    if not is_number(value):
        raise bad(path, what)
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise bad(path, f"integer beyond +/-(2^53-1), got {value}")
    number = float(value)
    if ((minimum is not None and number < minimum) or (above is not None and number <= above)
            or (below is not None and number >= below)):
        raise bad(path, f"{what}, got {value!r}")
    return number


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _expected_int(minimum: int | None, maximum: int | None, nullable: bool) -> str:
    if minimum == 0 and maximum is None:
        text = "expected a non-negative integer"
    elif minimum is not None and maximum is not None:
        text = f"expected an integer from {minimum} to {maximum}"
    elif minimum is not None:
        text = f"expected an integer >= {minimum}"
    else:
        text = "expected an integer"
    return text + (" or null" if nullable else "")


def _expected_number(minimum: float | None, above: float | None, below: float | None, nullable: bool) -> str:
    if minimum == 0 and above is None and below is None:
        text = "expected a non-negative number"
    elif above is not None and below is not None:
        text = f"expected a number strictly between {above:g} and {below:g}"
    elif above is not None:
        text = f"expected a number > {above:g}"
    elif minimum is not None:
        text = f"expected a number >= {minimum:g}"
    else:
        text = "expected a finite number"
    return text + (" or null" if nullable else "")
