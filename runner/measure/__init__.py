"""The measurement client: one wave of streaming requests and the server's counters around it.

::

    from runner.measure import load_family, measure_wave

    family = load_family("opinions.jsonl")
    wave = measure_wave("http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics", family.prompts,
                        model="m", max_tokens=512, seed=43, family=family.name)
    wave.summary()        # the wave.measured payload (docs/events.md) without window keys
    wave.records_jsonl()  # every request's record, the event's blob

See ``docs/measure.md`` for the definitions of every figure.
"""

from __future__ import annotations

from .family import Family, Prompt, family_bytes, load_family, parse_family, write_family
from .metrics import COUNTER_SERIES, CounterDeltas, MetricsSnapshot, counter_deltas, parse_metrics
from .record import STATUSES, RequestRecord
from .reply import Frame, read_frame
from .synth import FAMILIES, synthetic_family
from .wave import WaveResult, list_models, measure_wave, scrape_metrics

__all__ = [
    "COUNTER_SERIES",
    "FAMILIES",
    "STATUSES",
    "CounterDeltas",
    "Family",
    "Frame",
    "MetricsSnapshot",
    "Prompt",
    "RequestRecord",
    "WaveResult",
    "counter_deltas",
    "family_bytes",
    "list_models",
    "load_family",
    "measure_wave",
    "parse_family",
    "parse_metrics",
    "read_frame",
    "scrape_metrics",
    "synthetic_family",
    "write_family",
]
