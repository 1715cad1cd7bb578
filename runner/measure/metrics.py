"""Server counters from ``/metrics``: parse (prometheus_client's reading, ``.exposition``), sum, subtract.

Pure: :func:`parse_metrics` turns exposition text into a :class:`MetricsSnapshot`
(every sample summed over its ``engine`` and other labels, ``_created`` samples kept
apart and never counted; a per-position label outside 0..255 is refused, so a hostile
server cannot make the per-position list huge), and :func:`counter_deltas` subtracts
two snapshots into the ``counters`` of a ``wave.measured`` event. A series absent from either scrape is
reported *missing* (``None`` and named in ``missing``), never zero; a counter that went
backwards or whose ``_created`` time changed was reset by a server restart, and its
delta is unknown (missing, with a problem).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import FormatError

from .exposition import samples

__all__ = [
    "COUNTER_SERIES",
    "POSITION_SERIES",
    "SPEC_SERIES_NAMES",
    "CounterDeltas",
    "DeltaReader",
    "MetricsSnapshot",
    "counter_deltas",
    "merge_snapshots",
    "parse_metrics",
    "series_deltas",
]

# wave.measured counter key -> the exposed series it is the delta of (reference/vllm.md 1.1-1.2)
COUNTER_SERIES: dict[str, str] = {
    "rounds": "vllm:spec_decode_num_drafts_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "decode_s": "vllm:request_decode_time_seconds_sum",
    "generation_tokens": "vllm:generation_tokens_total",
}
SPEC_SERIES_NAMES = tuple(v for k, v in COUNTER_SERIES.items() if k in ("rounds", "accepted", "draft_tokens",
                                                                          "accepted_per_pos"))
_PER_POS = COUNTER_SERIES["accepted_per_pos"]
_INTEGER_KEYS = ("rounds", "accepted", "draft_tokens", "generation_tokens")
MAX_POSITIONS = 256   # draft positions (num_speculative_tokens): a larger label is not a real server's
# Series counted per draft position (a ``position`` label), vLLM's and llama.cpp's.
POSITION_SERIES = frozenset({_PER_POS, "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"})


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape: each sample name summed over label sets (histogram buckets left out)."""

    values: Mapping[str, float]
    per_pos: Mapping[int, float]    # vLLM's per-position series, by position
    created: Mapping[str, float]    # series -> smallest ``_created`` timestamp seen for it
    peaks: Mapping[str, float] = field(default_factory=dict)   # sample name -> largest value over label sets
    positions: Mapping[str, Mapping[int, float]] = field(default_factory=dict)   # per-position series, by name

    def has(self, series: str) -> bool:
        if series in POSITION_SERIES:
            return bool(self.by_position(series))
        return series in self.values

    def by_position(self, series: str) -> Mapping[int, float]:
        """A per-position series (``POSITION_SERIES``) by position (empty when absent)."""
        if series == _PER_POS:
            return self.per_pos
        return self.positions.get(series, {})

    def has_spec_series(self) -> bool:
        return any(self.has(name) for name in SPEC_SERIES_NAMES)


def _created_key(sample_name: str) -> str:
    """The series a ``_created`` sample stamps (``x_created`` stamps ``x_total`` or ``x_sum``...)."""
    return sample_name[: -len("_created")]


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition; ``FormatError`` if it is not exposition text."""
    values: dict[str, float] = {}
    positions: dict[str, dict[int, float]] = {}
    created: dict[str, float] = {}
    peaks: dict[str, float] = {}
    try:
        for name, labels, value in samples(text):
            if value is None or not math.isfinite(value):
                continue
            if name.endswith("_created"):
                key = _created_key(name)
                created[key] = min(value, created.get(key, value))
                continue
            if "le" in labels or "quantile" in labels:
                continue
            if name in POSITION_SERIES:
                try:
                    position = int(labels.get("position", ""))
                except ValueError:
                    continue
                if not 0 <= position < MAX_POSITIONS:
                    raise FormatError(f"{name} has position {position}, outside 0..{MAX_POSITIONS - 1}")
                by_position = positions.setdefault(name, {})
                by_position[position] = by_position.get(position, 0.0) + value
                continue
            values[name] = values.get(name, 0.0) + value
            peaks[name] = max(value, peaks.get(name, value))
    except (ValueError, TypeError, IndexError, OverflowError) as exc:   # Overflow: an integer past any float
        raise FormatError(f"metrics text is not Prometheus exposition: {exc}") from None
    return MetricsSnapshot(values, positions.get(_PER_POS, {}), created, peaks, positions)


@dataclass(frozen=True)
class CounterDeltas:
    """The ``counters`` of a wave (``None`` = missing), what was missing and what went wrong.

    The first six are the ``counters`` of ``wave.measured`` since its first version;
    ``drafts`` (draft-verification steps) was added when sources other than vLLM came,
    whose decode steps (``rounds``) and drafts differ; ``accepted_delivered`` (the accepted
    drafts the requests delivered: ``accepted`` capped at generation tokens - first tokens
    - rounds, since vLLM counts drafts accepted past ``max_tokens``, EOS or a stop token
    that the request then discards) when real vLLM showed ``accepted`` counting them. ``derived`` says how each counter
    was obtained from which series, ``resolution`` how coarse a delta may be (a server
    printing few significant digits), ``absent`` why no server counters were read at all.
    """

    rounds: int | None
    accepted: int | None
    draft_tokens: int | None
    accepted_per_pos: tuple[int, ...] | None
    decode_s: float | None
    generation_tokens: int | None
    missing: tuple[str, ...]
    problems: tuple[str, ...]
    drafts: int | None = None
    derived: Mapping[str, str] = field(default_factory=dict)
    resolution: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    absent: str | None = None
    accepted_delivered: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "accepted": self.accepted,
            "draft_tokens": self.draft_tokens,
            "accepted_per_pos": list(self.accepted_per_pos) if self.accepted_per_pos is not None else None,
            "decode_s": self.decode_s,
            "generation_tokens": self.generation_tokens,
            "drafts": self.drafts,
            "accepted_delivered": self.accepted_delivered,
        }

    @classmethod
    def unavailable(cls, problems: tuple[str, ...] = (), series: tuple[str, ...] | None = None) -> CounterDeltas:
        """No scrape at all: every counter missing (``series``: the names read, vLLM's by default)."""
        names = tuple(COUNTER_SERIES.values()) if series is None else series
        return cls(None, None, None, None, None, None, names, problems)

    @classmethod
    def not_read(cls, reason: str) -> CounterDeltas:
        """No server counters by design (counter source ``none``): absent, not missing."""
        return cls(None, None, None, None, None, None, (), (), absent=reason)


def _creation_changed(before: MetricsSnapshot, after: MetricsSnapshot, series: str) -> bool:
    """``_created`` of the series moved: the counter was created again (a restart)."""
    stamp = series
    for suffix in ("_total", "_sum", "_count"):
        if series.endswith(suffix):
            stamp = series[: -len(suffix)]
    return stamp in before.created and stamp in after.created and before.created[stamp] != after.created[stamp]


@dataclass
class DeltaReader:
    """after - before of series between two scrapes, noting what was missing and what was reset.

    A series absent from either scrape is ``None`` and named in ``missing``; one that went
    down or was created again (``_created`` moved) is ``None``, named missing, and a
    problem ("counter reset during the wave"). Each series is judged once.
    """

    before: MetricsSnapshot
    after: MetricsSnapshot
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _seen: dict[str, Any] = field(default_factory=dict)

    def present(self, series: str) -> bool:
        """Both scrapes have the series (nothing is recorded)."""
        return self.before.has(series) and self.after.has(series)

    def _absent(self, series: str) -> None:
        if series not in self.missing:
            self.missing.append(series)

    def _reset(self, series: str) -> None:
        self._absent(series)
        self.problems.append(f"counter reset during the wave: {series} (server restarted?)")

    def delta(self, series: str) -> float | None:
        if series in self._seen:
            return self._seen[series]
        value: float | None = None
        if not self.present(series):
            self._absent(series)
        else:
            value = self.after.values[series] - self.before.values[series]
            if value < 0 or _creation_changed(self.before, self.after, series):
                self._reset(series)
                value = None
        self._seen[series] = value
        return value

    def count(self, series: str) -> int | None:
        value = self.delta(series)
        return None if value is None else round(value)

    def positions(self, series: str) -> tuple[int, ...] | None:
        if series in self._seen:
            return self._seen[series]
        out: tuple[int, ...] | None = None
        if not self.present(series):
            self._absent(series)
        else:
            after, before = self.after.by_position(series), self.before.by_position(series)
            deltas = [after.get(p, 0.0) - before.get(p, 0.0) for p in range(max(after) + 1)]
            if any(d < 0 for d in deltas) or _creation_changed(self.before, self.after, series):
                self._reset(series)
            else:
                out = tuple(round(d) for d in deltas)
        self._seen[series] = out
        return out


def counter_deltas(before: MetricsSnapshot, after: MetricsSnapshot) -> CounterDeltas:
    """after - before for each of vLLM's counters of a wave (:data:`COUNTER_SERIES`, nothing derived)."""
    reader = DeltaReader(before, after)
    out: dict[str, Any] = {}
    for key, series in COUNTER_SERIES.items():
        if key != "accepted_per_pos":
            out[key] = reader.count(series) if key in _INTEGER_KEYS else reader.delta(series)
    out["accepted_per_pos"] = reader.positions(_PER_POS)
    return CounterDeltas(
        rounds=out["rounds"], accepted=out["accepted"], draft_tokens=out["draft_tokens"],
        accepted_per_pos=out["accepted_per_pos"], decode_s=out["decode_s"],
        generation_tokens=out["generation_tokens"], missing=tuple(reader.missing), problems=tuple(reader.problems),
        drafts=out["rounds"],
    )


def merge_snapshots(snapshots: list[MetricsSnapshot]) -> MetricsSnapshot:
    """Several scrapes (one per metrics URL: engines, hosts) as one: values and positions summed,
    peaks the largest, ``_created`` the earliest. One snapshot is returned as is."""
    if len(snapshots) == 1:
        return snapshots[0]
    values: dict[str, float] = {}
    peaks: dict[str, float] = {}
    created: dict[str, float] = {}
    positions: dict[str, dict[int, float]] = {}
    for snap in snapshots:
        for name, value in snap.values.items():
            values[name] = values.get(name, 0.0) + value
        for name, value in snap.peaks.items():
            peaks[name] = max(value, peaks.get(name, value))
        for name, value in snap.created.items():
            created[name] = min(value, created.get(name, value))
        by_name = dict(snap.positions)
        if snap.per_pos:
            by_name[_PER_POS] = snap.per_pos
        for name, by_position in by_name.items():
            into = positions.setdefault(name, {})
            for position, value in by_position.items():
                into[position] = into.get(position, 0.0) + value
    return MetricsSnapshot(values, positions.get(_PER_POS, {}), created, peaks, positions)


def series_deltas(before: MetricsSnapshot, after: MetricsSnapshot,
                  names: tuple[str, ...]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """after - before of each named series of one metrics URL (``None``: absent or reset) and the problems."""
    reader = DeltaReader(before, after)
    out: dict[str, Any] = {}
    for name in names:
        if name in POSITION_SERIES:
            positions = reader.positions(name)
            out[name] = None if positions is None else list(positions)
        else:
            out[name] = reader.delta(name)
    return out, tuple(reader.problems)
