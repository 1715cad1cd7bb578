"""The window event catalogue: which types exist, their payloads, how to append them.

Every window event is validated against its payload class (``runner.events.payloads``) before
it is appended; an unknown type is refused (fail closed), as are unknown members,
mistyped members and blob references that are neither attached nor already stored.
Window events go to stream ``window/<id>``; ``archive.control_start`` goes to stream
``archive``. Both carry ``window`` and ``plan_sha256``.

The runner appends with ``append_window_event`` (or a ``WindowLog`` bound to one
window), or builds validated ``NewEvent``s with ``window_event`` for ``append_many``.
A payload is given as its typed payload class instance (the runner's way: mypy checks
it) or as a plain JSON object (tests, tools).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ledger.errors import FieldError, FormatError, PayloadError

from . import payloads as p
from .schema import Checker, compile_checker, from_wire, to_wire

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
    "bundle_companions",
    "is_window_stream",
    "parse_payload",
    "read_payload",
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
    "params.attested": p.ParamsAttested,
    "priming.done": p.PrimingDone,
    "start.ended": p.StartEnded,
    "wave.measured": p.WaveMeasured,
    "smoke.result": p.SmokeResult,
    "thermal.event": p.ThermalEvent,
    "measurement.ended": p.MeasurementEnded,
    "budget.decision": p.BudgetDecision,
    "pressure.crossed": p.PressureCrossed,
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
    "archive.imported": p.ArchiveImported,
}

_OTHER_STREAMS = {"archive.control_start": ARCHIVE_STREAM, "archive.imported": ARCHIVE_STREAM}
_VALIDATORS: dict[str, Checker] = {name: compile_checker(cls) for name, cls in CATALOGUE.items()}
PayloadLike = Mapping[str, Any] | p.WindowPayload


def validate_payload(type_: str, payload: Mapping[str, Any]) -> None:
    """Check a window event's payload; ``PayloadError`` (exit 2) names what is wrong."""
    checker = _VALIDATORS.get(type_)
    if checker is None:
        raise FormatError(f"{type_!r} is not a window event type (known: {', '.join(sorted(CATALOGUE))})")
    try:
        checker(payload)
    except FieldError as error:
        raise PayloadError(f"payload{error.path}", error.problem) from None


def parse_payload(type_: str, payload: Mapping[str, Any]) -> p.WindowPayload:
    """The typed payload (``runner.events.payloads``) of a valid window event."""
    validate_payload(type_, payload)
    return from_wire(CATALOGUE[type_], payload)


W = TypeVar("W", bound=p.WindowPayload)


def read_payload(event: Event, cls: type[W]) -> W:
    """The typed payload of a stored window event, as ``cls`` (how readers outside the fold read events).

    ``FormatError`` (exit 2), naming the event's seq, when its type's payload class is not
    ``cls`` or its payload does not validate: a reader never guesses at a member.
    """
    if CATALOGUE.get(event.type) is not cls:
        raise FormatError(f"seq {event.seq}: a {event.type} event does not carry a {cls.__name__} payload")
    try:
        return cast(W, parse_payload(event.type, event.payload))
    except FormatError as error:
        raise FormatError(f"seq {event.seq} ({event.type}): {error}") from None


def _wire(payload: PayloadLike) -> dict[str, Any]:
    return to_wire(payload) if isinstance(payload, p.WindowPayload) else dict(payload)


def is_window_stream(stream: str) -> bool:
    return stream.startswith(WINDOW_STREAM_PREFIX)


def window_of_stream(stream: str) -> str | None:
    return stream[len(WINDOW_STREAM_PREFIX):] if stream.startswith(WINDOW_STREAM_PREFIX) else None


def bundle_companions(stream: str | None) -> tuple[str, ...]:
    """The streams a partial bundle of ``stream`` must carry besides it: a window's decision
    also rests on other windows' control starts (the archive)."""
    return (ARCHIVE_STREAM,) if stream is not None and is_window_stream(stream) else ()


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


def _full_payload(window: str, plan_sha256: str, payload: PayloadLike) -> dict[str, Any]:
    full = _wire(payload)
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
    payload: PayloadLike,
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
    payload: PayloadLike,
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

    def event(self, type_: str, payload: PayloadLike, blobs: Sequence[Blob] = ()) -> NewEvent:
        return window_event(self.window, self.plan_sha256, type_, payload, blobs, ledger=self.ledger)

    def append(self, type_: str, payload: PayloadLike, blobs: Sequence[Blob] = ()) -> Event:
        return append_window_event(self.ledger, self.signer, self.window, self.plan_sha256, type_, payload, blobs)

    def append_many(self, items: Sequence[tuple[str, PayloadLike, Sequence[Blob]]]) -> list[Event]:
        events = [self.event(type_, payload, blobs) for type_, payload, blobs in items]
        return self.ledger.append_many(events, self.signer)
