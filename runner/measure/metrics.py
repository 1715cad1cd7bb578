"""Server counters from ``/metrics``: parse (prometheus_client's parser), sum, subtract.

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
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ledger.errors import FormatError

__all__ = [
    "COUNTER_SERIES",
    "SPEC_SERIES_NAMES",
    "CounterDeltas",
    "MetricsSnapshot",
    "counter_deltas",
    "parse_metrics",
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


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape: each sample name summed over label sets (histogram buckets left out)."""

    values: Mapping[str, float]
    per_pos: Mapping[int, float]
    created: Mapping[str, float]    # series -> smallest ``_created`` timestamp seen for it

    def has(self, series: str) -> bool:
        if series == _PER_POS:
            return bool(self.per_pos)
        return series in self.values

    def has_spec_series(self) -> bool:
        return any(self.has(name) for name in SPEC_SERIES_NAMES)


def _created_key(sample_name: str) -> str:
    """The series a ``_created`` sample stamps (``x_created`` stamps ``x_total`` or ``x_sum``...)."""
    return sample_name[: -len("_created")]


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition; ``FormatError`` if it is not exposition text."""
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    created: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, sample.value
                if value is None or not math.isfinite(value):
                    continue
                if name.endswith("_created"):
                    key = _created_key(name)
                    created[key] = min(value, created.get(key, value))
                    continue
                if "le" in labels or "quantile" in labels:
                    continue
                if name == _PER_POS:
                    try:
                        position = int(labels.get("position", ""))
                    except ValueError:
                        continue
                    if not 0 <= position < MAX_POSITIONS:
                        raise FormatError(f"{_PER_POS} has position {position}, outside 0..{MAX_POSITIONS - 1}")
                    per_pos[position] = per_pos.get(position, 0.0) + value
                    continue
                values[name] = values.get(name, 0.0) + value
    except (ValueError, TypeError, IndexError) as exc:
        raise FormatError(f"metrics text is not Prometheus exposition: {exc}") from None
    return MetricsSnapshot(values, per_pos, created)


@dataclass(frozen=True)
class CounterDeltas:
    """The ``counters`` of a wave (``None`` = missing), what was missing and what went wrong."""

    rounds: int | None
    accepted: int | None
    draft_tokens: int | None
    accepted_per_pos: tuple[int, ...] | None
    decode_s: float | None
    generation_tokens: int | None
    missing: tuple[str, ...]
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "accepted": self.accepted,
            "draft_tokens": self.draft_tokens,
            "accepted_per_pos": list(self.accepted_per_pos) if self.accepted_per_pos is not None else None,
            "decode_s": self.decode_s,
            "generation_tokens": self.generation_tokens,
        }

    @classmethod
    def unavailable(cls, problems: tuple[str, ...] = ()) -> CounterDeltas:
        """No scrape at all: every counter missing."""
        return cls(None, None, None, None, None, None, tuple(COUNTER_SERIES.values()), problems)


def _creation_changed(before: MetricsSnapshot, after: MetricsSnapshot, series: str) -> bool:
    """``_created`` of the series moved: the counter was created again (a restart)."""
    stamp = series
    for suffix in ("_total", "_sum"):
        if series.endswith(suffix):
            stamp = series[: -len(suffix)]
    return stamp in before.created and stamp in after.created and before.created[stamp] != after.created[stamp]


def counter_deltas(before: MetricsSnapshot, after: MetricsSnapshot) -> CounterDeltas:
    """after - before for each counter of a wave."""
    out: dict[str, Any] = {}
    missing: list[str] = []
    problems: list[str] = []
    for key, series in COUNTER_SERIES.items():
        if key == "accepted_per_pos":
            continue
        if not (before.has(series) and after.has(series)):
            out[key] = None
            missing.append(series)
            continue
        delta = after.values[series] - before.values[series]
        if delta < 0 or _creation_changed(before, after, series):
            out[key] = None
            missing.append(series)
            problems.append(f"counter reset during the wave: {series} (server restarted?)")
            continue
        out[key] = round(delta) if key in _INTEGER_KEYS else delta
    per_pos: tuple[int, ...] | None = None
    if before.has(_PER_POS) and after.has(_PER_POS):
        positions = range(max(after.per_pos) + 1)
        deltas = [after.per_pos.get(p, 0.0) - before.per_pos.get(p, 0.0) for p in positions]
        if any(d < 0 for d in deltas) or _creation_changed(before, after, _PER_POS):
            missing.append(_PER_POS)
            problems.append(f"counter reset during the wave: {_PER_POS} (server restarted?)")
        else:
            per_pos = tuple(round(d) for d in deltas)
    else:
        missing.append(_PER_POS)
    return CounterDeltas(
        rounds=out["rounds"], accepted=out["accepted"], draft_tokens=out["draft_tokens"],
        accepted_per_pos=per_pos, decode_s=out["decode_s"], generation_tokens=out["generation_tokens"],
        missing=tuple(missing), problems=tuple(problems),
    )
