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

from .bounds import MAX_PROBE_BYTES, ReplyRefused, fetch
from .family import MAX_FAMILY_BYTES, Family, Prompt, family_bytes, load_family, parse_family, write_family
from .metrics import COUNTER_SERIES, CounterDeltas, MetricsSnapshot, counter_deltas, parse_metrics
from .record import MAX_COUNT, SERVER_STRING_BYTES, STATUSES, RequestRecord, bounded_json, clip, summary_entry_bound
from .reply import Frame, error_of, read_frame
from .served import read_served, served_count
from .sources import counter_source, select_source
from .spool import dump_json
from .sse import SSEDecoder, SSEOverflow
from .synth import FAMILIES, synthetic_family
from .totals import WaveTotals
from .transport import StampingTransport, deadline_guard
from .urls import OriginAuth, ServerURL, has_credentials, redact, server_url
from .wave import WaveResult, list_models, measure_wave, scrape_metrics, served_models

__all__ = [
    "COUNTER_SERIES",
    "FAMILIES",
    "MAX_COUNT",
    "MAX_FAMILY_BYTES",
    "MAX_PROBE_BYTES",
    "SERVER_STRING_BYTES",
    "STATUSES",
    "CounterDeltas",
    "Family",
    "Frame",
    "MetricsSnapshot",
    "OriginAuth",
    "Prompt",
    "ReplyRefused",
    "RequestRecord",
    "SSEDecoder",
    "SSEOverflow",
    "ServerURL",
    "StampingTransport",
    "WaveResult",
    "WaveTotals",
    "bounded_json",
    "clip",
    "counter_deltas",
    "counter_source",
    "deadline_guard",
    "dump_json",
    "error_of",
    "family_bytes",
    "fetch",
    "has_credentials",
    "list_models",
    "load_family",
    "measure_wave",
    "parse_family",
    "parse_metrics",
    "read_frame",
    "read_served",
    "redact",
    "scrape_metrics",
    "select_source",
    "served_count",
    "served_models",
    "server_url",
    "summary_entry_bound",
    "synthetic_family",
    "write_family",
]
