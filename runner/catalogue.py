"""The window event catalogue (SPEC 5.2): which types exist, their payloads, how to append them.

Every window event is validated against its payload class (``runner.payloads``) before
it is appended; an unknown type is refused (fail closed), as are unknown members,
mistyped members and blob references that are neither attached nor already stored.
Window events go to stream ``window/<id>``; ``archive.control_start`` goes to stream
``archive``. Both carry ``window`` and ``plan_sha256``.

The runner appends with ``append_window_event`` (or a ``WindowLog`` bound to one
window), or builds validated ``NewEvent``s with ``window_event`` for ``append_many``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from ledger.errors import FormatError, PayloadError, PolicyError

from . import payloads as p

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Blob, Ledger, NewEvent

__all__ = [
    "ARCHIVE_STREAM",
    "CATALOGUE",
    "WINDOW_STREAM_PREFIX",
    "WindowLog",
    "append_window_event",
    "blob_refs",
    "is_window_stream",
    "parse_payload",
    "stream_for",
    "validate_payload",
    "window_event",
    "window_of_stream",
]

WINDOW_STREAM_PREFIX = "window/"
ARCHIVE_STREAM = "archive"

CATALOGUE: Mapping[str, type[p.WindowPayload]] = {
    "window.registered": p.WindowRegistered,
    "gate.result": p.GateResult,
    "window.admitted": p.WindowAdmitted,
    "hold.opened": p.HoldOpened,
    "hold.closed": p.HoldClosed,
    "production.snapshot": p.ProductionSnapshot,
    "production.state": p.ProductionState,
    "host.action": p.HostAction,
    "start.began": p.StartBegan,
    "warmup.done": p.WarmupDone,
    "start.ended": p.StartEnded,
    "wave.measured": p.WaveMeasured,
    "thermal.event": p.ThermalEvent,
    "measurement.ended": p.MeasurementEnded,
    "budget.decision": p.BudgetDecision,
    "placeholder.up": p.Placeholder,
    "placeholder.down": p.Placeholder,
    "chain.marker.set": p.ChainMarkerSet,
    "chain.marker.cleared": p.ChainMarkerCleared,
    "chain.aborted": p.ChainAborted,
    "restore.finished": p.RestoreFinished,
    "watch.result": p.WatchResult,
    "window.interrupted": p.WindowInterrupted,
    "window.closed": p.WindowClosed,
    "decision.recorded": p.DecisionRecorded,
    "archive.control_start": p.ArchiveControlStart,
}

_OTHER_STREAMS = {"archive.control_start": ARCHIVE_STREAM}

Checker = Callable[[Any], None]


class _Bad(Exception):
    """A refusal deep inside a payload; containers add their path segment on the way out."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.segments: list[str] = []

    def path(self, root: str) -> str:
        return root + "".join(reversed(self.segments))


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {int: "an integer", float: "a number", str: "a string", dict: "an object", list: "an array"}.get(
        type(value), type(value).__name__)


def _compile(tp: Any) -> Checker:
    """A checker for JSON values of type ``tp``; it raises ``_Bad`` (the path is added by callers)."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, pattern = get_args(tp)[0], get_args(tp)[1]
        match = re.compile(pattern).fullmatch
        inner = _compile(base)

        def check_pattern(value: Any) -> None:
            inner(value)
            if not match(value):
                raise _Bad(f"{value!r} does not match {pattern}")

        return check_pattern
    if origin is Literal:
        allowed = frozenset(get_args(tp))
        shown = ", ".join(map(str, get_args(tp)))

        def check_literal(value: Any) -> None:
            if type(value) is not str or value not in allowed:
                raise _Bad(f"expected one of {shown}, got {value!r}")

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
                raise _Bad(f"expected an array, got {_kind(value)}")
            index = 0
            try:
                for index, v in enumerate(value):  # noqa: B007 - index names the failing item
                    item(v)
            except _Bad as bad:
                bad.segments.append(f"[{index}]")
                raise

        return check_list
    if origin is dict:
        _key_type, value_type = get_args(tp)
        member = None if value_type is Any else _compile(value_type)

        def check_dict(value: Any) -> None:
            if type(value) is not dict:
                raise _Bad(f"expected an object, got {_kind(value)}")
            if member is not None:
                key = ""
                try:
                    for key, v in value.items():  # noqa: B007 - key names the failing member
                        member(v)
                except _Bad as bad:
                    bad.segments.append(f".{key}")
                    raise

        return check_dict
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _compile_dataclass(tp)
    if tp is Any:
        return lambda value: None
    if tp in (str, bool, int, float):
        return _SCALARS[tp]
    raise TypeError(f"unsupported payload type {tp!r}")


def _check_str(value: Any) -> None:
    if type(value) is not str:
        raise _Bad(f"expected a string, got {_kind(value)}")


def _check_bool(value: Any) -> None:
    if type(value) is not bool:
        raise _Bad(f"expected true or false, got {_kind(value)}")


def _check_int(value: Any) -> None:
    if type(value) is not int:
        raise _Bad(f"expected an integer, got {_kind(value)}")


def _check_float(value: Any) -> None:
    kind = type(value)
    if kind is float:
        if not math.isfinite(value):
            raise _Bad("NaN and Infinity are not allowed")
    elif kind is not int:
        raise _Bad(f"expected a number, got {_kind(value)}")


_SCALARS: dict[Any, Checker] = {str: _check_str, bool: _check_bool, int: _check_int, float: _check_float}
_COMPILED: dict[type, Checker] = {}


def _compile_dataclass(cls: type) -> Checker:
    if cls in _COMPILED:
        return _COMPILED[cls]
    hints = get_type_hints(cls, include_extras=True)
    spec: list[tuple[str, Checker, bool]] = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        spec.append((f.name, _compile(hints[f.name]), required))
    names = frozenset(name for name, _, _ in spec)
    known = ", ".join(sorted(names))
    cross = getattr(cls, "check", None)

    def check_dataclass(value: Any) -> None:
        if type(value) is not dict:
            raise _Bad(f"expected an object, got {_kind(value)}")
        seen = 0
        name = ""
        try:
            for name, checker, required in spec:
                if name in value:
                    seen += 1
                    checker(value[name])
                elif required:
                    raise _Bad("required")
        except _Bad as bad:
            bad.segments.append(f".{name}")
            raise
        if len(value) > seen:
            extra = sorted(set(value) - names)
            unknown = _Bad(f"unknown member (expected {known})")
            unknown.segments.append(f".{extra[0]}")
            raise unknown
        if cross is not None:
            for where, problem in cross(value):
                broken = _Bad(problem)
                broken.segments.append(f".{where}")
                raise broken

    _COMPILED[cls] = check_dataclass
    return check_dataclass


_VALIDATORS: dict[str, Checker] = {name: _compile_dataclass(cls) for name, cls in CATALOGUE.items()}


def validate_payload(type_: str, payload: Mapping[str, Any]) -> None:
    """Check a window event's payload; ``PayloadError`` (exit 2) names what is wrong."""
    checker = _VALIDATORS.get(type_)
    if checker is None:
        raise FormatError(f"{type_!r} is not a window event type (known: {', '.join(sorted(CATALOGUE))})")
    try:
        checker(payload)
    except _Bad as bad:
        raise PayloadError(bad.path("payload"), bad.problem) from None


def _build(tp: Any, value: Any) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        return _build(get_args(tp)[0], value)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        return _build(next(o for o in get_args(tp) if o is not type(None)), value)
    if origin is list:
        return [_build(get_args(tp)[0], v) for v in value]
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = get_type_hints(tp, include_extras=True)
        return tp(**{k: _build(hints[k], v) for k, v in value.items()})
    return value


def parse_payload(type_: str, payload: Mapping[str, Any]) -> p.WindowPayload:
    """The typed payload (``runner.payloads`` dataclasses) of a valid window event."""
    validate_payload(type_, payload)
    result: p.WindowPayload = _build(CATALOGUE[type_], dict(payload))
    return result


def is_window_stream(stream: str) -> bool:
    return stream.startswith(WINDOW_STREAM_PREFIX)


def window_of_stream(stream: str) -> str | None:
    return stream[len(WINDOW_STREAM_PREFIX):] if stream.startswith(WINDOW_STREAM_PREFIX) else None


def stream_for(type_: str, window: str) -> str:
    return _OTHER_STREAMS.get(type_, WINDOW_STREAM_PREFIX + window)


def blob_refs(value: Any, path: str = "payload") -> Iterable[tuple[str, dict[str, Any]]]:
    """Every ``{"blob": "sha256:...", ...}`` reference inside a payload, with its path."""
    if isinstance(value, dict):
        ref = value.get("blob")
        if isinstance(ref, str) and ref.startswith("sha256:") and "size" in value:
            yield path, value
        for key, item in value.items():
            yield from blob_refs(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from blob_refs(item, f"{path}[{index}]")


def _full_payload(window: str, plan_sha256: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    full = dict(payload)
    for key, value in (("window", window), ("plan_sha256", plan_sha256)):
        if key in full and full[key] != value:
            raise PayloadError(f"payload.{key}", f"{full[key]!r} differs from the event's {key} {value!r}")
        full[key] = value
    return full


def _check_blobs(full: Mapping[str, Any], blobs: Sequence[Blob], ledger: Ledger | None) -> None:
    attached = {blob.sha256: blob for blob in blobs}
    for path, ref in blob_refs(full):
        sha = ref["blob"].removeprefix("sha256:")
        blob = attached.get(sha)
        if blob is not None:
            if ref.get("size") != len(blob.data):
                raise PayloadError(f"{path}.size",
                                   f"{ref.get('size')} but the attached blob has {len(blob.data)} bytes")
            continue
        if ledger is None or ledger.blob(sha) is None:
            raise PayloadError(path, f"blob sha256:{sha[:16]}... is neither attached nor stored")


def window_event(
    window: str,
    plan_sha256: str,
    type_: str,
    payload: Mapping[str, Any],
    blobs: Sequence[Blob] = (),
    *,
    ledger: Ledger | None = None,
) -> NewEvent:
    """A validated ``NewEvent`` for a window (``window``/``plan_sha256`` added to the payload)."""
    from ledger.store import NewEvent

    full = _full_payload(window, plan_sha256, payload)
    validate_payload(type_, full)
    _check_blobs(full, blobs, ledger)
    return NewEvent(stream_for(type_, window), type_, full, tuple(blobs))


def append_window_event(
    ledger: Ledger,
    signer: Signer,
    window: str,
    plan_sha256: str,
    type_: str,
    payload: Mapping[str, Any],
    blobs: Sequence[Blob] = (),
) -> Event:
    """Validate and append one window event; returns it as stored."""
    item = window_event(window, plan_sha256, type_, payload, blobs, ledger=ledger)
    return ledger.append(item.stream, item.type, item.payload, signer, item.blobs)


class WindowLog:
    """Appends the events of one registered window (binds its id and plan digest)."""

    def __init__(self, ledger: Ledger, signer: Signer, window: str, plan_sha256: str) -> None:
        self.ledger = ledger
        self.signer = signer
        self.window = window
        self.plan_sha256 = plan_sha256

    @classmethod
    def open(cls, ledger: Ledger, signer: Signer, window: str) -> WindowLog:
        """Bind to a registered window; ``PolicyError`` if it is not registered."""
        from .registration import registered

        reg = registered(ledger, window)
        if reg is None:
            raise PolicyError(f"window {window} is not registered")
        return cls(ledger, signer, window, reg.plan_sha256)

    def event(self, type_: str, payload: Mapping[str, Any], blobs: Sequence[Blob] = ()) -> NewEvent:
        return window_event(self.window, self.plan_sha256, type_, payload, blobs, ledger=self.ledger)

    def append(self, type_: str, payload: Mapping[str, Any], blobs: Sequence[Blob] = ()) -> Event:
        return append_window_event(self.ledger, self.signer, self.window, self.plan_sha256, type_, payload, blobs)

    def append_many(self, items: Sequence[tuple[str, Mapping[str, Any], Sequence[Blob]]]) -> list[Event]:
        events = [self.event(type_, payload, blobs) for type_, payload, blobs in items]
        return self.ledger.append_many(events, self.signer)
