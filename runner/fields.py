"""Reading a parsed document (TOML or JSON) field by field, naming the exact field in error.

The one field reader of tally: plans, site files, simulator configs and rule inputs
are all read through it, and every refusal is a ``FieldError`` (``ledger.errors``)
whose message starts with the member's path::

    plan.cells[1].context: expected one of short, 32k, ..., got '33k'
    waves[3].rounds: must be >= 0, got -1
    site file site.toml: hosts[0].role: expected one of head, worker, got 'boss'

``Fields(data, "plan")`` wraps one table; each accessor checks one member. ``done()``
refuses members nobody asked for, so a misspelt key never passes silently.

Absent and ``null`` are the same for optional members (TOML has no null; the JSON form
of a plan writes absent optionals as null). A ``nullable`` member must be present but
may be null (rule inputs name every member, ``null`` meaning "not measured").

This module is a foundation of ``runner``: it imports only ``ledger.errors``, and every
layer (events, plans, drivers, the simulator, the rules) may import it.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ledger.errors import FieldError

__all__ = ["MAX_INT", "MISSING", "FieldError", "Fields", "json_value", "kind_of"]

MAX_INT = 2**53 - 1  # JSON interoperability (and the ledger's payload rule)
Dialect = Literal["toml", "json"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def kind_of(value: Any, dialect: Dialect = "toml") -> str:
    """How a value is named in a message: ``a string``, ``an integer``, ``a table``/``an object``..."""
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a table" if dialect == "toml" else "an object"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, _dt.date | _dt.time):
        return "a date/time"
    return type(value).__name__


def join(path: str, key: str) -> str:
    """``path.key`` (``key`` alone at the top of a document)."""
    return f"{path}.{key}" if path else key


def json_value(value: Any, path: str) -> Any:
    """``value`` as plain JSON (dict/list/str/int/float/bool); refuses dates, NaN, Infinity."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise FieldError(path, f"integer {value} is outside +/-(2^53-1)")
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise FieldError(path, "NaN and Infinity are not allowed")
        return value
    if isinstance(value, Mapping):
        return {str(k): json_value(v, join(path, str(k))) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise FieldError(path, f"{kind_of(value)} is not allowed here (use a string)")


class Fields:
    """One table of a document, read member by member.

    ``source`` names the document in every message (``site file x.toml``); ``dialect``
    says whether containers are tables (TOML) or objects (JSON).
    """

    def __init__(self, data: Any, path: str, *, source: str | None = None, dialect: Dialect = "toml") -> None:
        self.path = path
        self.source = source
        self.dialect: Dialect = dialect
        if not isinstance(data, Mapping):
            raise self._error(path, f"expected {self._table_word()}, got {kind_of(data, dialect)}")
        self.data: Mapping[str, Any] = data
        self._seen: set[str] = set()

    def _table_word(self) -> str:
        return "a table" if self.dialect == "toml" else "an object"

    def _error(self, path: str, problem: str) -> FieldError:
        return FieldError(path, problem, source=self.source)

    def at(self, key: str) -> str:
        return join(self.path, key)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        self._seen.add(key)
        return self.data.get(key)

    def _get(self, key: str, default: Any, nullable: bool = False) -> Any:
        self._seen.add(key)
        if nullable:
            if key not in self.data:
                raise self.fail(key, "required")
            return self.data[key]
        value = self.data.get(key)
        if value is None:
            if default is MISSING:
                raise self.fail(key, "required")
            return default
        return value

    def fail(self, key: str, problem: str) -> FieldError:
        """The error for member ``key`` of this table."""
        return self._error(self.at(key), problem)

    def fail_here(self, problem: str) -> FieldError:
        """The error for this table itself."""
        return self._error(self.path, problem)

    def _kind(self, value: Any) -> str:
        return kind_of(value, self.dialect)

    # -------------------------------------------------------------- scalars

    def string(
        self,
        key: str,
        default: Any = MISSING,
        *,
        choices: Sequence[str] | None = None,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
        nonempty: bool = False,
        nullable: bool = False,
    ) -> Any:
        value = self._get(key, default, nullable)
        if value is None and nullable:
            return None
        if value is default and default is not MISSING:
            return value
        return self._check_string(self.at(key), value, choices, pattern, what, nonempty)

    def _check_string(self, where: str, value: Any, choices: Sequence[str] | None, pattern: re.Pattern[str] | None,
                      what: str, nonempty: bool) -> str:
        if not isinstance(value, str):
            raise self._error(where, f"expected a string, got {self._kind(value)}")
        if nonempty and not value:
            raise self._error(where, "expected a non-empty string")
        if choices is not None and value not in choices:
            raise self._error(where, f"expected one of {', '.join(choices)}, got {value!r}")
        if pattern is not None and not pattern.fullmatch(value):
            raise self._error(where, f"{value!r} is not {what or 'well formed'}")
        return value

    def integer(self, key: str, default: Any = MISSING, *, low: int | None = None, high: int | None = None,
                nullable: bool = False) -> Any:
        value = self._get(key, default, nullable)
        if value is None and nullable:
            return None
        if value is default and default is not MISSING:
            return value
        return self._check_integer(self.at(key), value, low, high)

    def _check_integer(self, where: str, value: Any, low: int | None, high: int | None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._error(where, f"expected an integer, got {self._kind(value)}")
        if abs(value) > MAX_INT:
            raise self._error(where, f"integer {value} is outside +/-(2^53-1)")
        if low is not None and value < low:
            raise self._error(where, f"must be >= {low}, got {value}")
        if high is not None and value > high:
            raise self._error(where, f"must be <= {high}, got {value}")
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
        nullable: bool = False,
    ) -> Any:
        value = self._get(key, default, nullable)
        if value is None and nullable:
            return None
        if value is default and default is not MISSING:
            return value
        return self._check_number(self.at(key), value, low, high, low_open, high_open)

    def _check_number(self, where: str, value: Any, low: float | None, high: float | None, low_open: bool,
                      high_open: bool) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._error(where, f"expected a number, got {self._kind(value)}")
        if isinstance(value, int) and abs(value) > MAX_INT:
            raise self._error(where, f"integer {value} is outside +/-(2^53-1)")
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            raise self._error(where, "NaN and Infinity are not allowed")
        if low is not None and (number < low or (low_open and number == low)):
            raise self._error(where, f"must be {'>' if low_open else '>='} {low:g}, got {number:g}")
        if high is not None and (number > high or (high_open and number == high)):
            raise self._error(where, f"must be {'<' if high_open else '<='} {high:g}, got {number:g}")
        return number

    def boolean(self, key: str, default: Any = MISSING) -> Any:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {self._kind(value)}")
        return value

    # -------------------------------------------------------------- containers

    def _array(self, key: str, default: Any, what: str) -> Any:
        value = self._get(key, default)
        if value is default and default is not MISSING:
            return None
        if not isinstance(value, list | tuple):
            raise self.fail(key, f"expected an array of {what}, got {self._kind(value)}")
        return value

    def strings(
        self,
        key: str,
        default: Any = MISSING,
        *,
        choices: Sequence[str] | None = None,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
        unique: bool = True,
        nonempty: bool = False,
    ) -> Any:
        value = self._array(key, default, "strings")
        if value is None:
            return default
        seen: set[str] = set()
        for index, item in enumerate(value):
            where = f"{self.at(key)}[{index}]"
            self._check_string(where, item, choices, pattern, what, nonempty)
            if unique and item in seen:
                raise self._error(where, f"{item!r} appears twice")
            seen.add(item)
        return tuple(value)

    def numbers(self, key: str, default: Any = MISSING, *, low: float | None = None) -> Any:
        """An array of finite numbers, as a tuple of floats."""
        value = self._array(key, default, "numbers")
        if value is None:
            return default
        return tuple(self._check_number(f"{self.at(key)}[{i}]", item, low, None, False, False)
                     for i, item in enumerate(value))

    def table(self, key: str, *, required: bool = False) -> Fields:
        value = self._get(key, MISSING if required else {})
        return Fields(value, self.at(key), source=self.source, dialect=self.dialect)

    def tables(self, key: str, *, required: bool = True) -> list[Fields]:
        value = self._get(key, MISSING if required else [])
        if not isinstance(value, list | tuple):
            wanted = f"tables ([[{key}]])" if self.dialect == "toml" else "objects"
            raise self.fail(key, f"expected an array of {wanted}, got {self._kind(value)}")
        return [Fields(item, f"{self.at(key)}[{index}]", source=self.source, dialect=self.dialect)
                for index, item in enumerate(value)]

    def json(self, key: str, default: Any = MISSING) -> Any:
        value = self._get(key, default)
        return json_value(value, self.at(key))

    def done(self, also: Iterable[str] = ()) -> None:
        """Refuse members nobody read (typos, fields of another protocol)."""
        known = self._seen | set(also)
        for key, value in self.data.items():
            if key not in known and (value is not None or self.dialect == "json"):
                expected = ", ".join(sorted(known)) or "nothing"
                raise self.fail(str(key), f"unknown field (expected one of {expected})")
