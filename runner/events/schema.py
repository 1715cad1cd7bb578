"""Payload classes on the wire: a validator compiled from each class, and the typed round trip.

A payload class is a frozen, keyword-only dataclass declared with :func:`payload`.
Its fields say what the JSON payload may hold: a field without a default is required,
``X | None`` may be null, ``Annotated[str, pattern]`` is a string of that shape,
``Literal[...]`` a closed vocabulary, and nested payload classes, ``list[...]`` and
``dict[str, ...]`` nest. A class may add cross-member rules in a static ``check``.

- :func:`compile_checker` turns a class into a checker of JSON values that raises
  ``FieldError`` naming the offending member (``payload.client.requests``);
- :func:`to_wire` turns an instance into its JSON payload: the required members and
  the optional members its producer set (a member left at its default is not written,
  so payloads keep exactly the members their producers chose);
- :func:`from_wire` builds the typed instance of a checked JSON payload (members the
  payload lacks take their defaults).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, dataclass_transform, get_args, get_origin, get_type_hints

from ledger.errors import FieldError

__all__ = ["ALWAYS_REQUIRED", "Checker", "compile_checker", "from_wire", "payload", "to_wire"]

Checker = Callable[[Any], None]
T = TypeVar("T")

# Members every window payload must carry even though producers leave them to the log.
ALWAYS_REQUIRED = frozenset({"window", "plan_sha256"})
_GIVEN = "_given"


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field,))
def payload(cls: type[T]) -> type[T]:
    """Declare a payload class: a frozen keyword-only dataclass that remembers which members were set."""
    made = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    generated = made.__init__

    def __init__(self: Any, **members: Any) -> None:
        generated(self, **members)
        object.__setattr__(self, _GIVEN, frozenset(members))

    __init__.__doc__ = generated.__doc__
    made.__init__ = __init__  # type: ignore[method-assign]
    return made


# ---------------------------------------------------------------------- checking


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {int: "an integer", float: "a number", str: "a string", dict: "an object", list: "an array"}.get(
        type(value), type(value).__name__)


def _check_str(value: Any) -> None:
    if type(value) is not str:
        raise FieldError("", f"expected a string, got {_kind(value)}")


def _check_bool(value: Any) -> None:
    if type(value) is not bool:
        raise FieldError("", f"expected true or false, got {_kind(value)}")


def _check_int(value: Any) -> None:
    if type(value) is not int:
        raise FieldError("", f"expected an integer, got {_kind(value)}")


def _check_float(value: Any) -> None:
    kind = type(value)
    if kind is float:
        if not math.isfinite(value):
            raise FieldError("", "NaN and Infinity are not allowed")
    elif kind is not int:
        raise FieldError("", f"expected a number, got {_kind(value)}")


_SCALARS: dict[Any, Checker] = {str: _check_str, bool: _check_bool, int: _check_int, float: _check_float}
_COMPILED: dict[type, Checker] = {}


def _compile(tp: Any) -> Checker:
    """A checker for JSON values of type ``tp``; it raises ``FieldError`` with a path relative to the value."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, pattern = get_args(tp)[0], get_args(tp)[1]
        match = re.compile(pattern).fullmatch
        inner = _compile(base)

        def check_pattern(value: Any) -> None:
            inner(value)
            if not match(value):
                raise FieldError("", f"{value!r} does not match {pattern}")

        return check_pattern
    if origin is Literal:
        allowed = frozenset(get_args(tp))
        shown = ", ".join(map(str, get_args(tp)))

        def check_literal(value: Any) -> None:
            if type(value) is not str or value not in allowed:
                raise FieldError("", f"expected one of {shown}, got {value!r}")

        return check_literal
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        nullable = type(None) in options
        rest = [option for option in options if option is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"unsupported union {tp}")
        inner = _compile(rest[0])

        def check_optional(value: Any) -> None:
            if value is None and nullable:
                return
            inner(value)

        return check_optional
    if origin is list:
        (item_type,) = get_args(tp)
        item = _compile(item_type)

        def check_list(value: Any) -> None:
            if type(value) is not list and type(value) is not tuple:
                raise FieldError("", f"expected an array, got {_kind(value)}")
            for index, v in enumerate(value):
                try:
                    item(v)
                except FieldError as error:
                    raise error.under(f"[{index}]") from None

        return check_list
    if origin is dict:
        _key_type, value_type = get_args(tp)
        member = None if value_type is Any else _compile(value_type)

        def check_dict(value: Any) -> None:
            if type(value) is not dict:
                raise FieldError("", f"expected an object, got {_kind(value)}")
            if member is not None:
                for key, v in value.items():
                    try:
                        member(v)
                    except FieldError as error:
                        raise error.under(f".{key}") from None

        return check_dict
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return compile_checker(tp)
    if tp is Any:
        return lambda value: None
    if tp in _SCALARS:
        return _SCALARS[tp]
    raise TypeError(f"unsupported payload type {tp!r}")


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.name in ALWAYS_REQUIRED or (
        f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def compile_checker(cls: type) -> Checker:
    """The checker of one payload class (cached): members, their types, no unknown member, ``check``."""
    if cls in _COMPILED:
        return _COMPILED[cls]
    hints = get_type_hints(cls, include_extras=True)
    spec = [(f.name, _compile(hints[f.name]), _required(f)) for f in dataclasses.fields(cls)]
    names = frozenset(name for name, _, _ in spec)
    known = ", ".join(sorted(names))
    cross = getattr(cls, "check", None)

    def check_dataclass(value: Any) -> None:
        if type(value) is not dict:
            raise FieldError("", f"expected an object, got {_kind(value)}")
        seen = 0
        for name, checker, required in spec:
            if name in value:
                seen += 1
                try:
                    checker(value[name])
                except FieldError as error:
                    raise error.under(f".{name}") from None
            elif required:
                raise FieldError(f".{name}", "required")
        if len(value) > seen:
            extra = sorted(set(value) - names)
            raise FieldError(f".{extra[0]}", f"unknown member (expected {known})")
        if cross is not None:
            for where, problem in cross(value):
                raise FieldError(f".{where}", problem)

    _COMPILED[cls] = check_dataclass
    return check_dataclass


# ---------------------------------------------------------------------- the typed round trip


def _wire_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_wire(value)
    if isinstance(value, list | tuple):
        return [_wire_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _wire_value(v) for k, v in value.items()}
    return value


def to_wire(obj: Any) -> dict[str, Any]:
    """The JSON payload of a payload instance: required members and the members its producer set."""
    given: frozenset[str] = getattr(obj, _GIVEN, frozenset())
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name in given or (f.name not in ALWAYS_REQUIRED and _required(f)):
            out[f.name] = _wire_value(getattr(obj, f.name))
    return out


_BUILDERS: dict[type, dict[str, Callable[[Any], Any]]] = {}


def _builder(tp: Any) -> Callable[[Any], Any] | None:
    """How to turn a checked JSON value of type ``tp`` into its typed value (None: as it is)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _builder(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        inner = _builder(next(o for o in get_args(tp) if o is not type(None)))
        if inner is None:
            return None
        return lambda value: None if value is None else inner(value)
    if origin is list:
        item = _builder(get_args(tp)[0])
        return (lambda value: list(value)) if item is None else (lambda value: [item(v) for v in value])
    if origin is dict:
        member = _builder(get_args(tp)[1])
        return None if member is None else (lambda value: {k: member(v) for k, v in value.items()})
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        cls = tp
        return lambda value: from_wire(cls, value)
    return None


def from_wire(cls: type[T], data: Mapping[str, Any]) -> T:
    """The typed payload of checked JSON ``data`` (``compile_checker(cls)`` must accept it)."""
    builders = _BUILDERS.get(cls)
    if builders is None:
        hints = get_type_hints(cls, include_extras=True)
        builders = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            build = _builder(hints[f.name])
            if build is not None:
                builders[f.name] = build
        _BUILDERS[cls] = builders
    members = {key: (builders[key](value) if key in builders else value) for key, value in data.items()}
    return cls(**members)
