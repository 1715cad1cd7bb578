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

Checker = Callable[[Any, str], Any]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {int: "an integer", float: "a number", str: "a string", dict: "an object", list: "an array"}.get(
        type(value), type(value).__name__)


def _compile(tp: Any) -> Checker:
    origin = get_origin(tp)
    if origin is Annotated:
        base, pattern = get_args(tp)[0], get_args(tp)[1]
        regex = re.compile(pattern)
        inner = _compile(base)

        def check_pattern(value: Any, path: str) -> Any:
            value = inner(value, path)
            if not regex.fullmatch(value):
                raise PayloadError(path, f"{value!r} does not match {pattern}")
            return value

        return check_pattern
    if origin is Literal:
        allowed = get_args(tp)

        def check_literal(value: Any, path: str) -> Any:
            if not isinstance(value, str) or value not in allowed:
                raise PayloadError(path, f"expected one of {', '.join(map(str, allowed))}, got {value!r}")
            return value

        return check_literal
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        nullable = type(None) in options
        rest = [option for option in options if option is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"unsupported union {tp}")
        inner = _compile(rest[0])

        def check_optional(value: Any, path: str) -> Any:
            if value is None and nullable:
                return None
            return inner(value, path)

        return check_optional
    if origin is list:
        (item_type,) = get_args(tp)
        item = _compile(item_type)

        def check_list(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise PayloadError(path, f"expected an array, got {_kind(value)}")
            return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

        return check_list
    if origin is dict:
        _key_type, value_type = get_args(tp)
        if value_type is Any:
            def check_object(value: Any, path: str) -> Any:
                if not isinstance(value, dict):
                    raise PayloadError(path, f"expected an object, got {_kind(value)}")
                return value

            return check_object
        member = _compile(value_type)

        def check_dict(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise PayloadError(path, f"expected an object, got {_kind(value)}")
            return {k: member(v, f"{path}.{k}") for k, v in value.items()}

        return check_dict
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _compile_dataclass(tp)
    if tp is Any:
        return lambda value, path: value
    if tp is str:
        def check_str(value: Any, path: str) -> Any:
            if not isinstance(value, str):
                raise PayloadError(path, f"expected a string, got {_kind(value)}")
            return value

        return check_str
    if tp is bool:
        def check_bool(value: Any, path: str) -> Any:
            if not isinstance(value, bool):
                raise PayloadError(path, f"expected true or false, got {_kind(value)}")
            return value

        return check_bool
    if tp is int:
        def check_int(value: Any, path: str) -> Any:
            if isinstance(value, bool) or not isinstance(value, int):
                raise PayloadError(path, f"expected an integer, got {_kind(value)}")
            return value

        return check_int
    if tp is float:
        def check_float(value: Any, path: str) -> Any:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise PayloadError(path, f"expected a number, got {_kind(value)}")
            if isinstance(value, float) and not math.isfinite(value):
                raise PayloadError(path, "NaN and Infinity are not allowed")
            return value

        return check_float
    raise TypeError(f"unsupported payload type {tp!r}")


_COMPILED: dict[type, Checker] = {}


def _compile_dataclass(cls: type) -> Checker:
    if cls in _COMPILED:
        return _COMPILED[cls]
    hints = get_type_hints(cls, include_extras=True)
    spec: list[tuple[str, Checker, bool]] = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        spec.append((f.name, _compile(hints[f.name]), required))
    names = {name for name, _, _ in spec}
    has_check = hasattr(cls, "check")

    def check_dataclass(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise PayloadError(path, f"expected an object, got {_kind(value)}")
        kwargs = {}
        for name, checker, required in spec:
            if name in value:
                kwargs[name] = checker(value[name], f"{path}.{name}")
            elif required:
                raise PayloadError(f"{path}.{name}", "required")
        if len(value) > len(kwargs):
            extra = sorted(set(value) - names)
            raise PayloadError(f"{path}.{extra[0]}", f"unknown member (expected {', '.join(sorted(names))})")
        obj = cls(**kwargs)
        if has_check:
            for where, problem in obj.check():
                raise PayloadError(f"{path}.{where}", problem)
        return obj

    _COMPILED[cls] = check_dataclass
    return check_dataclass


_VALIDATORS: dict[str, Checker] = {name: _compile_dataclass(cls) for name, cls in CATALOGUE.items()}


def validate_payload(type_: str, payload: Mapping[str, Any]) -> p.WindowPayload:
    """The typed payload of a window event; ``PayloadError`` (exit 2) names what is wrong."""
    checker = _VALIDATORS.get(type_)
    if checker is None:
        raise FormatError(f"{type_!r} is not a window event type (known: {', '.join(sorted(CATALOGUE))})")
    result: p.WindowPayload = checker(payload, "payload")
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
