"""The control archive: finished control starts across windows, and which of them compare.

Two event types feed it (stream ``archive``): ``archive.control_start`` (a control start a
window finished) and ``archive.imported`` (rows of an existing ``control-archive.jsonl``,
the file kept as a blob). :func:`archive_rows` reads both as :class:`ArchiveRow`.

Rows compare only when they were measured the same way: :func:`comparability_key` is the
one definition, ``(cell, control config digest, production commit, clock cap, max_tokens)``.
A row whose start saw a thermal dial-back is archived at its real (dialled-back) cap and
flagged; :func:`day_to_day_rows` leaves it out of the day-to-day spread.

Pure: events (or payloads) in, rows out; :func:`validate_import_row` checks one row of an
imported file (hostile input: every field checked, strings bounded).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from ledger.errors import FormatError

__all__ = [
    "ARCHIVE_TYPES",
    "MAX_IMPORT_ROWS",
    "PER_REPEAT_METRICS",
    "ArchiveKey",
    "ArchiveRow",
    "archive_rows",
    "comparability_key",
    "day_to_day_rows",
    "production_commit",
    "validate_import_row",
]

ARCHIVE_TYPES = ("archive.control_start", "archive.imported")
MAX_IMPORT_ROWS = 10_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_ROLES = ("A", "P")
_MAX_FIGURES = 64


class ArchiveKey(NamedTuple):
    """What two control starts must share for their rates to compare (day-to-day spread)."""

    cell: str
    control_config_digest: str | None
    production_commit: str | None
    clock_cap_mhz: int | None
    max_tokens: int


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def comparability_key(row: Mapping[str, object]) -> ArchiveKey:
    """The comparability key of an archive row (an ``archive.control_start`` payload or an imported row).

    Both are checked before they are recorded (the catalogue, ``validate_import_row``): a member of
    another type than the key's reads as absent.
    """
    return ArchiveKey(str(row.get("cell")), _str_or_none(row.get("control_config_digest")),
                      _str_or_none(row.get("production_commit")), _int_or_none(row.get("clock_cap_mhz")),
                      _int_or_none(row.get("max_tokens")) or 0)


def production_commit(identity: object) -> str | None:
    """The commit production runs, from its recorded identity (``commit`` or ``production_commit``)."""
    if not isinstance(identity, Mapping):
        return None
    for name in ("production_commit", "commit"):
        value = identity.get(name)
        if isinstance(value, str) and _COMMIT.fullmatch(value):
            return value
    return None


@dataclass(frozen=True)
class ArchiveRow:
    """One control start in the archive, wherever it came from."""

    key: ArchiveKey
    window: str
    start: str
    pooled_rate_tps: float | None
    dial_back: bool
    seq: int                       # the event that holds it
    source: str                    # "window" | "import"
    payload: Mapping[str, object]

    def to_json(self) -> dict[str, object]:
        return {"cell": self.key.cell, "control_config_digest": self.key.control_config_digest,
                "production_commit": self.key.production_commit, "clock_cap_mhz": self.key.clock_cap_mhz,
                "max_tokens": self.key.max_tokens, "window": self.window, "start": self.start,
                "pooled_rate_tps": self.pooled_rate_tps, "dial_back": self.dial_back, "seq": self.seq,
                "source": self.source}


def _rate(row: Mapping[str, object]) -> float | None:
    figures = row.get("figures")
    rate = figures.get("pooled_rate_tps") if isinstance(figures, Mapping) else None
    return float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool) else None


def _row(payload: Mapping[str, object], seq: int, source: str) -> ArchiveRow:
    return ArchiveRow(comparability_key(payload), str(payload.get("window")), str(payload.get("start")),
                      _rate(payload), bool(payload.get("dial_back")), seq, source, payload)


class ArchiveEvent(Protocol):
    """What ``archive_rows`` reads of an event (a stored ``Event``, or a test's stand-in)."""

    @property
    def type(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def payload(self) -> Mapping[str, object]: ...


def archive_rows(events: Iterable[ArchiveEvent]) -> list[ArchiveRow]:
    """Every row of the archive events given (``Event`` objects with ``type``, ``seq``, ``payload``)."""
    rows: list[ArchiveRow] = []
    for event in events:
        if event.type == "archive.control_start":
            rows.append(_row(event.payload, event.seq, "window"))
        elif event.type == "archive.imported":
            imported = event.payload.get("rows")
            if isinstance(imported, list):
                rows.extend(_row(r, event.seq, "import") for r in imported if isinstance(r, Mapping))
    return rows


def day_to_day_rows(rows: Iterable[ArchiveRow], key: ArchiveKey, *,
                    exclude_window: str | None = None) -> list[ArchiveRow]:
    """The rows that count for the day-to-day spread of ``key``: the same key, a rate, no dial-back."""
    return [r for r in rows if r.key == key and r.pooled_rate_tps is not None and not r.dial_back
            and (exclude_window is None or r.window != exclude_window)]


# ---------------------------------------------------------------------- import

def _fail(line: int, what: str) -> FormatError:
    return FormatError(f"control archive line {line}: {what}")


def _string(row: Mapping[str, object], key: str, line: int, pattern: re.Pattern[str], what: str,
            *, required: bool = True) -> str | None:
    value = row.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise _fail(line, f"{key} must be {what}, got {str(value)[:80]!r}")
    return value


def _integer(row: Mapping[str, object], key: str, line: int, *, required: bool = True) -> int | None:
    value = row.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1_000_000:
        raise _fail(line, f"{key} must be a positive integer, got {str(value)[:80]!r}")
    return value


def validate_import_row(row: object, line: int) -> dict[str, object]:
    """One row of an imported ``control-archive.jsonl``, checked and normalised (``FormatError`` names the line).

    Required: ``window``, ``start``, ``cell`` (names), ``max_tokens``, ``figures.pooled_rate_tps``
    (a finite number > 0). Optional: ``role`` (A or P), ``clock_cap_mhz``, ``control_config_digest``
    (sha256), ``production_commit`` and ``commit`` (commits), ``dial_back`` (bool), other numeric
    ``figures`` (at most 64), ``per_repeat`` (the start's value per repeat, in repeat order, of
    ``pooled_rate_tps`` (required in it) and optionally ``accepted_per_round`` and ``decode_tps``:
    lists of one length, at most 64, numbers > 0 or null; what the spread and the power gate
    compare, as they compare a native control start's waves).
    """
    if not isinstance(row, Mapping):
        raise _fail(line, "must be a JSON object")
    known = {"window", "start", "role", "cell", "max_tokens", "clock_cap_mhz", "control_config_digest",
             "production_commit", "commit", "dial_back", "figures", "nominal_clock_cap_mhz", "per_repeat"}
    unknown = sorted(set(row) - known)
    if unknown:
        raise _fail(line, f"unknown field {unknown[0][:80]!r}")
    out: dict[str, object] = {
        "window": _string(row, "window", line, _NAME, "a name (letters, digits, . _ -)"),
        "start": _string(row, "start", line, _NAME, "a name"),
        "cell": _string(row, "cell", line, _NAME, "a name"),
        "max_tokens": _integer(row, "max_tokens", line),
        "clock_cap_mhz": _integer(row, "clock_cap_mhz", line, required=False),
        "control_config_digest": _string(row, "control_config_digest", line, _SHA256, "a sha256", required=False),
        "production_commit": _string(row, "production_commit", line, _COMMIT, "a commit", required=False),
    }
    role = row.get("role", "A")
    if role not in _ROLES:
        raise _fail(line, f"role must be A or P (a control), got {str(role)[:20]!r}")
    out["role"] = role
    if row.get("commit") is not None:
        out["commit"] = _string(row, "commit", line, _COMMIT, "a commit")
    if row.get("nominal_clock_cap_mhz") is not None:
        out["nominal_clock_cap_mhz"] = _integer(row, "nominal_clock_cap_mhz", line)
    dial_back = row.get("dial_back", False)
    if not isinstance(dial_back, bool):
        raise _fail(line, "dial_back must be true or false")
    out["dial_back"] = dial_back
    figures = row.get("figures")
    if not isinstance(figures, Mapping) or len(figures) > _MAX_FIGURES:
        raise _fail(line, f"figures must be an object of at most {_MAX_FIGURES} numbers")
    clean: dict[str, float | int] = {}
    for name, value in figures.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _fail(line, f"figures: {str(name)[:80]!r} is not a figure name")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise _fail(line, f"figures.{name} must be a finite number")
        clean[name] = value
    rate = clean.get("pooled_rate_tps")
    if rate is None or rate <= 0:
        raise _fail(line, "figures.pooled_rate_tps must be a number > 0 (the rate the spread compares)")
    out["figures"] = clean
    if row.get("per_repeat") is not None:
        out["per_repeat"] = _per_repeat(row["per_repeat"], line)
    return out


PER_REPEAT_METRICS = ("pooled_rate_tps", "accepted_per_round", "decode_tps")


def _per_repeat(value: object, line: int) -> dict[str, list[float | None]]:
    if not isinstance(value, Mapping) or "pooled_rate_tps" not in value:
        raise _fail(line, "per_repeat must be an object with pooled_rate_tps (a list per metric)")
    out: dict[str, list[float | None]] = {}
    for name, values in value.items():
        if name not in PER_REPEAT_METRICS:
            raise _fail(line, f"per_repeat: {str(name)[:80]!r} is not one of {', '.join(PER_REPEAT_METRICS)}")
        if not isinstance(values, list) or not 0 < len(values) <= _MAX_FIGURES:
            raise _fail(line, f"per_repeat.{name} must be a list of 1 to {_MAX_FIGURES} values")
        for v in values:
            if v is None and name != "pooled_rate_tps":
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise _fail(line, f"per_repeat.{name} values must be numbers > 0"
                                  + (" or null" if name != "pooled_rate_tps" else ""))
        out[name] = list(values)
    lengths = {len(v) for v in out.values()}
    if len(lengths) != 1:
        raise _fail(line, "per_repeat lists must have one length (a value per repeat)")
    return out
