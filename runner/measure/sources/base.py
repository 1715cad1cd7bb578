"""The one interface the measurement reads server counters through: :class:`CounterSource`.

A site endpoint names its counter source (``counter_source = "vllm" | "llamacpp" |
"sglang" | "none"``); :func:`runner.measure.sources.counter_source` gives the source of
that name. A source knows which series its server exposes and how the ``counters`` of
``wave.measured`` are derived from them (``docs/measure.md``, "Counter sources"):

- :meth:`CounterSource.deltas` turns the scrapes before and after a wave into
  :class:`~runner.measure.metrics.CounterDeltas`, for an arm the runner says is
  speculative (``True``), runs no speculative decoding (``False``: rounds are the
  generated tokens after each request's first, accepted is 0, no spec series needed),
  or was not said (``None``: what the series give);
- :meth:`CounterSource.gauges` reads the server's own gauges (running and waiting
  requests, KV-cache usage) from one scrape;
- :meth:`CounterSource.check` says what one scrape allows (the admission probe):
  which series are there, whether a speculative arm's rounds can be counted.

``counts_rounds`` says whether the source can count a speculative arm's rounds and
accepted tokens at all (win2-v1 needs them); ``chunks_are_steps`` whether one streamed
chunk is one engine step on that server (only then is a chunk interval a round time).

Pure: snapshots in, values out.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...vocabulary import CounterSourceName
from ..metrics import CounterDeltas, DeltaReader, MetricsSnapshot

__all__ = ["GAUGE_KEYS", "CounterSource", "GaugeReading", "SourceCheck"]

GAUGE_KEYS = ("running", "waiting", "kv_cache_usage")
_PEAK_GAUGES = frozenset({"kv_cache_usage"})   # a ratio per engine: the largest, not the sum


@dataclass(frozen=True)
class GaugeReading:
    """The server's gauges in one scrape (``None``: the series is not exposed) and the series read."""

    values: Mapping[str, float | None]
    series: Mapping[str, str | None]

    def to_json(self) -> dict[str, float | None]:
        return {key: self.values.get(key) for key in GAUGE_KEYS}


@dataclass(frozen=True)
class SourceCheck:
    """What one scrape of a server allows, for the source it was read with."""

    source: CounterSourceName
    present: tuple[str, ...]            # series the source reads that the scrape has
    absent: tuple[str, ...]             # series the source reads that it lacks
    speculative_rounds: bool            # a speculative arm's rounds and accepted can be counted here
    spec_off_rounds: bool               # a spec-off arm's rounds can be counted here
    reasons: tuple[str, ...]            # why not, one line each

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "present": list(self.present), "absent": list(self.absent),
                "speculative_rounds": self.speculative_rounds, "spec_off_rounds": self.spec_off_rounds,
                "reasons": list(self.reasons)}


def quantum(value: float, digits: int) -> float:
    """The step of ``value`` printed with ``digits`` significant digits (C's ``%g``)."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    return float(10.0 ** (math.floor(math.log10(abs(value))) - (digits - 1)))


class CounterSource(ABC):
    """How one kind of server's ``/metrics`` becomes a wave's counters and gauges."""

    name: ClassVar[CounterSourceName]
    label: ClassVar[str]                              # the server's name for people
    scrapes: ClassVar[bool] = True                    # reads /metrics at all
    counts_rounds: ClassVar[bool]                     # can count a speculative arm's rounds and accepted
    chunks_are_steps: ClassVar[bool]                  # one streamed chunk is one engine step
    generation_series: ClassVar[str]                  # generated tokens, the first of each request included
    decode_series: ClassVar[str]                      # seconds of decoding after each request's first token
    draft_tokens_series: ClassVar[str | None] = None  # a spec-off arm must not move it
    gauge_series: ClassVar[Mapping[str, tuple[str, ...]]] = {}   # gauge -> candidate series, first present wins
    print_digits: ClassVar[int | None] = None         # significant digits the server prints (None: exact)
    served_series: ClassVar[str | None] = None        # a counter the requests it served move (the warm-up's
    served_counts: ClassVar[str] = "requests"         # attestation): "requests", or "tokens" (one a request at least)
    settle_series: ClassVar[str | None] = None        # a gauge of requests not yet counted: read after a wave
                                                      # until 0 (``measure_wave``, settle_s)

    # ------------------------------------------------------------------ the interface

    def deltas(self, before: MetricsSnapshot, after: MetricsSnapshot, *, speculative: bool | None = None,
               first_tokens: int = 0) -> CounterDeltas:
        """The wave's counters from the scrapes around it.

        ``first_tokens`` is the number of the wave's requests whose first token arrived:
        that token comes from the prompt's forward pass, not from a decode step, so it is
        subtracted where rounds are derived from generated tokens.
        """
        reader = DeltaReader(before, after)
        if speculative is False:
            deltas = self._spec_off(reader, first_tokens)
        else:
            deltas = self._speculative(reader, first_tokens)
            spec = self._spec_series()
            if spec and not any(before.has(n) or after.has(n) for n in spec):
                deltas = replace(deltas, notes=(*deltas.notes, "the server's /metrics has no speculative-decoding "
                                                f"series ({spec[0]}, ...): client-side figures only"))
        return self._with_resolution(_delivered(deltas, first_tokens), before, after)

    def gauges(self, snapshot: MetricsSnapshot) -> GaugeReading:
        values: dict[str, float | None] = {}
        series: dict[str, str | None] = {}
        for key in GAUGE_KEYS:
            name = next((s for s in self.gauge_series.get(key, ()) if s in snapshot.values), None)
            series[key] = name
            if name is None:
                values[key] = None
            else:
                values[key] = (snapshot.peaks.get(name, snapshot.values[name]) if key in _PEAK_GAUGES
                               else snapshot.values[name])
        return GaugeReading(values, series)

    def series(self) -> tuple[str, ...]:
        """Every counter series this source reads (what an unreadable scrape leaves missing)."""
        names = [self.generation_series, self.decode_series, *self._spec_series()]
        return tuple(dict.fromkeys(names))

    def check(self, snapshot: MetricsSnapshot) -> SourceCheck:
        """Which of the source's series one scrape has, and what a wave could count with them."""
        names = self.series()
        present = tuple(n for n in names if snapshot.has(n))
        absent = tuple(n for n in names if not snapshot.has(n))
        spec = self.deltas(snapshot, snapshot, speculative=True)
        off = self.deltas(snapshot, snapshot, speculative=False)
        reasons: list[str] = []
        speculative_rounds = self.counts_rounds and spec.rounds is not None and spec.accepted is not None
        if not speculative_rounds:
            why = (f"{', '.join(spec.missing) or 'series'} missing" if spec.rounds is not None or not
                   spec.derived.get("rounds") else spec.derived["rounds"])
            reasons.append(f"{self.label} at this endpoint cannot count a speculative arm's rounds: {why}")
        if off.rounds is None:
            reasons.append(f"{self.label} at this endpoint cannot count a spec-off arm's rounds: "
                           f"{', '.join(off.missing) or 'series'} missing")
        return SourceCheck(self.name, present, absent, speculative_rounds, off.rounds is not None, tuple(reasons))

    def unavailable(self, problems: tuple[str, ...] = ()) -> CounterDeltas:
        """No usable scrape: every counter missing."""
        return CounterDeltas.unavailable(problems, self.series())

    # ------------------------------------------------------------------ per source

    @abstractmethod
    def _spec_series(self) -> tuple[str, ...]:
        """The speculative-decoding series read."""

    @abstractmethod
    def _speculative(self, reader: DeltaReader, first_tokens: int) -> CounterDeltas:
        """Counters of a speculative arm (or one the runner said nothing about)."""

    def _decode_s(self, reader: DeltaReader) -> float | None:
        return reader.delta(self.decode_series)

    def _spec_off(self, reader: DeltaReader, first_tokens: int) -> CounterDeltas:
        """A spec-off arm: each decode step emits one token, so rounds = generated tokens - first tokens."""
        generated = reader.count(self.generation_series)
        decode = self._decode_s(reader)
        derived = {"accepted": "0: the arm runs no speculative decoding",
                   "decode_s": f"Δ{self.decode_series}", "generation_tokens": f"Δ{self.generation_series}"}
        rounds = None
        if generated is not None:
            if generated < first_tokens:
                reader.problems.append(f"{self.generation_series} moved by {generated}, fewer than the "
                                       f"{first_tokens} requests that delivered a first token")
            else:
                rounds = generated - first_tokens
                derived["rounds"] = (f"Δ{self.generation_series} - {first_tokens} first tokens "
                                     "(one token per decode step: the arm runs no speculative decoding)")
        dt = self.draft_tokens_series
        if dt is not None and reader.present(dt):
            drafted = reader.count(dt)
            if drafted:
                reader.problems.append(f"the arm runs no speculative decoding, yet {dt} counted {drafted} draft "
                                       "tokens during the wave")
        return CounterDeltas(
            rounds=rounds, accepted=0, draft_tokens=0, accepted_per_pos=(), decode_s=decode,
            generation_tokens=generated, missing=tuple(reader.missing), problems=tuple(reader.problems), drafts=0,
            derived=derived)

    def _with_resolution(self, deltas: CounterDeltas, before: MetricsSnapshot,
                         after: MetricsSnapshot) -> CounterDeltas:
        """Add how coarse each delta may be when the server prints few significant digits."""
        if self.print_digits is None:
            return deltas
        digits = self.print_digits
        resolution: dict[str, float] = {}
        notes = list(deltas.notes)
        values = deltas.to_json()
        for key, series in (("generation_tokens", self.generation_series), ("decode_s", self.decode_series)):
            if values.get(key) is None or series not in before.values or series not in after.values:
                continue
            step = (quantum(before.values[series], digits) + quantum(after.values[series], digits)) / 2
            if key != "decode_s" and step < 0.5:
                continue   # an integer count printed exactly
            resolution[key] = step
            delta = values[key]
            if delta and step / abs(delta) > 0.001:
                notes.append(f"{self.label} prints its counters with {digits} significant digits: {key} "
                             f"{delta:g} is known to ±{step:g} ({100 * step / abs(delta):.2g} %)")
        if not resolution:
            return deltas
        return replace(deltas, resolution=resolution, notes=tuple(notes))


def _delivered(deltas: CounterDeltas, first_tokens: int) -> CounterDeltas:
    """``accepted_delivered``: the accepted drafts the wave's requests delivered.

    vLLM counts every draft token a step accepted, also those past ``max_tokens`` (or an
    EOS or stop token) that the request then discards: 17 accepted against 13 delivered
    on a real pair. Every decode step delivers one token plus its accepted drafts, so the
    delivered drafts are generation tokens - first tokens - rounds; ``accepted`` is
    capped there (never raised: the raw counter stays beside it). ``None`` when a term is
    missing.
    """
    generated, rounds, accepted = deltas.generation_tokens, deltas.rounds, deltas.accepted
    if generated is None or rounds is None or accepted is None:
        return deltas
    capped = max(0, min(accepted, generated - first_tokens - rounds))
    derived = {**deltas.derived, "accepted_delivered": (
        f"min(accepted, generation_tokens - {first_tokens} first tokens - rounds): the accepted drafts delivered "
        "(drafts accepted past max_tokens, EOS or a stop token are counted by the server and discarded)")}
    return replace(deltas, accepted_delivered=capped, derived=derived)
