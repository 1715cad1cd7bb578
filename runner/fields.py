"""Reading a parsed TOML/JSON document field by field, naming the exact field in error.

``Fields(data, "plan")`` wraps one table; each accessor checks one member and raises a
``FieldError`` whose message starts with the member's path
(``plan.cells[1].context: expected one of short, 32k, ...``). ``done()`` refuses members
that nobody asked for, so a misspelt key never passes silently.

Absent and ``null`` are the same for optional members (TOML has no null; the JSON form
of a plan writes absent optionals as null).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ledger.errors import FormatError

__all__ = ["MISSING", "FieldError", "Fields", "json_value"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FieldError(FormatError):
    """A document member that is missing, mistyped or out of range; ``path`` names it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, _dt.date | _dt.time):
        return "a date/time"
    return type(value).__name__


def json_value(value: Any, path: str) -> Any:
    """``value`` as plain JSON (dict/list/str/int/float/bool); refuses dates, NaN, Infinity."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if abs(value) > 2**53 - 1:
            raise FieldError(path, f"integer {value} is outside +/-(2^53-1)")
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise FieldError(path, "NaN and Infinity are not allowed")
        return value
    if isinstance(value, Mapping):
        return {str(k): json_value(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise FieldError(path, f"{_kind(value)} is not allowed here (use a string)")


class Fields:
    """One table of a document, read member by member."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise FieldError(path, f"expected a table, got {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.path = path
        self._seen: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        self._seen.add(key)
        return self.data.get(key)

    def _get(self, key: str, default: Any) -> Any:
        self._seen.add(key)
        value = self.data.get(key)
        if value is None:
            if default is MISSING:
                raise FieldError(self.at(key), "required")
            return default
        return value

    def fail(self, key: str, problem: str) -> FieldError:
        return FieldError(self.at(key), problem)

    # -------------------------------------------------------------- scalars

    def string(
        self,
        key: str,
        default: Any = MISSING,
        *,
        choices: Sequence[str] | None = None,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
    ) -> Any:
        value = self._get(key, default)
        if value is default and default is not MISSING:
            return value
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {_kind(value)}")
        if choices is not None and value not in choices:
            raise self.fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(key, f"{value!r} is not {what or 'well formed'}")
        return value

    def integer(self, key: str, default: Any = MISSING, *, low: int | None = None, high: int | None = None) -> Any:
        value = self._get(key, default)
        if value is default and default is not MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {_kind(value)}")
        if low is not None and value < low:
            raise self.fail(key, f"must be >= {low}, got {value}")
        if high is not None and value > high:
            raise self.fail(key, f"must be <= {high}, got {value}")
        return value

    def number(
        self,
        key: str,
        default: Any = MISSING,
        *,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
        high_open: bool = False,
    ) -> Any:
        value = self._get(key, default)
        if value is default and default is not MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {_kind(value)}")
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            raise self.fail(key, "NaN and Infinity are not allowed")
        if low is not None and (number < low or (low_open and number == low)):
            raise self.fail(key, f"must be {'>' if low_open else '>='} {low:g}, got {number:g}")
        if high is not None and (number > high or (high_open and number == high)):
            raise self.fail(key, f"must be {'<' if high_open else '<='} {high:g}, got {number:g}")
        return number

    def boolean(self, key: str, default: Any = MISSING) -> Any:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_kind(value)}")
        return value

    # -------------------------------------------------------------- containers

    def strings(
        self,
        key: str,
        default: Any = MISSING,
        *,
        choices: Sequence[str] | None = None,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
        unique: bool = True,
    ) -> Any:
        value = self._get(key, default)
        if value is default and default is not MISSING:
            return value
        if not isinstance(value, list | tuple):
            raise self.fail(key, f"expected an array of strings, got {_kind(value)}")
        seen: set[str] = set()
        for index, item in enumerate(value):
            where = f"{self.at(key)}[{index}]"
            if not isinstance(item, str):
                raise FieldError(where, f"expected a string, got {_kind(item)}")
            if choices is not None and item not in choices:
                raise FieldError(where, f"expected one of {', '.join(choices)}, got {item!r}")
            if pattern is not None and not pattern.fullmatch(item):
                raise FieldError(where, f"{item!r} is not {what or 'well formed'}")
            if unique and item in seen:
                raise FieldError(where, f"{item!r} appears twice")
            seen.add(item)
        return tuple(value)

    def table(self, key: str, *, required: bool = False) -> Fields:
        value = self._get(key, MISSING if required else {})
        return Fields(value, self.at(key))

    def tables(self, key: str, *, required: bool = True) -> list[Fields]:
        value = self._get(key, MISSING if required else [])
        if not isinstance(value, list | tuple):
            raise self.fail(key, f"expected an array of tables ([[{key}]]), got {_kind(value)}")
        return [Fields(item, f"{self.at(key)}[{index}]") for index, item in enumerate(value)]

    def json(self, key: str, default: Any = MISSING) -> Any:
        value = self._get(key, default)
        return json_value(value, self.at(key))

    def done(self, also: Iterable[str] = ()) -> None:
        """Refuse members nobody read (typos, fields of another protocol)."""
        known = self._seen | set(also)
        for key, value in self.data.items():
            if key not in known and value is not None:
                expected = ", ".join(sorted(known)) or "nothing"
                raise self.fail(key, f"unknown field (expected one of {expected})")
