"""No server counters: the site declares that its server exposes none (``counter_source = "none"``).

Nothing is scraped. A wave is complete on its client figures: its counters are absent
by declaration (``counter_source.absent`` says so), not missing, and do not make it
incomplete. A rule that needs rounds (win2-v1) cannot decide on such a site
(``counts_rounds`` false); a chunk is not claimed to be an engine step.
"""

from __future__ import annotations

from ..metrics import CounterDeltas, DeltaReader, MetricsSnapshot
from .base import CounterSource, GaugeReading, SourceCheck

__all__ = ["ABSENT", "NoSource"]

ABSENT = "counter source none: the site declares no server counters (client figures only)"


class NoSource(CounterSource):
    name = "none"
    label = "no counter source"
    scrapes = False
    counts_rounds = False
    chunks_are_steps = False
    generation_series = ""
    decode_series = ""

    def _spec_series(self) -> tuple[str, ...]:
        return ()

    def series(self) -> tuple[str, ...]:
        return ()

    def deltas(self, before: MetricsSnapshot, after: MetricsSnapshot, *, speculative: bool | None = None,
               first_tokens: int = 0) -> CounterDeltas:
        return CounterDeltas.not_read(ABSENT)

    def _speculative(self, reader: DeltaReader, first_tokens: int) -> CounterDeltas:
        return CounterDeltas.not_read(ABSENT)

    def gauges(self, snapshot: MetricsSnapshot) -> GaugeReading:
        return GaugeReading(dict.fromkeys(("running", "waiting", "kv_cache_usage")),
                            dict.fromkeys(("running", "waiting", "kv_cache_usage")))

    def check(self, snapshot: MetricsSnapshot) -> SourceCheck:
        return SourceCheck("none", (), (), False, False, (ABSENT,))

    def unavailable(self, problems: tuple[str, ...] = ()) -> CounterDeltas:
        return CounterDeltas.not_read(ABSENT)
