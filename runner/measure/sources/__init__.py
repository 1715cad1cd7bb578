"""Counter sources: where a wave's server counters come from, one implementation per kind of server.

::

    from runner.measure.sources import counter_source

    source = counter_source("llamacpp")          # "vllm" (default) | "llamacpp" | "sglang" | "none"
    deltas = source.deltas(before, after, speculative=True, first_tokens=4)
    source.gauges(snapshot), source.check(snapshot), source.counts_rounds, source.chunks_are_steps

The exact series each reads and how rounds, accepted and decode seconds are derived:
``docs/measure.md``, "Counter sources".
"""

from __future__ import annotations

from ...vocabulary import COUNTER_SOURCES, CounterSourceName
from .base import GAUGE_KEYS, CounterSource, GaugeReading, SourceCheck
from .llamacpp import LlamaCppSource
from .none import NoSource
from .sglang import SglangSource
from .vllm import VllmSource

__all__ = [
    "COUNTER_SOURCES",
    "GAUGE_KEYS",
    "CounterSource",
    "CounterSourceName",
    "GaugeReading",
    "LlamaCppSource",
    "NoSource",
    "SglangSource",
    "SourceCheck",
    "VllmSource",
    "counter_source",
    "select_source",
]

_SOURCES: dict[str, type[CounterSource]] = {
    "vllm": VllmSource, "llamacpp": LlamaCppSource, "sglang": SglangSource, "none": NoSource,
}


def counter_source(name: str | CounterSource = "vllm") -> CounterSource:
    """The counter source of that name (a source is returned as is); ``FormatError`` for another name."""
    from ledger.errors import FormatError

    if isinstance(name, CounterSource):
        return name
    try:
        return _SOURCES[name]()
    except KeyError:
        raise FormatError(f"unknown counter source {name!r}; counter sources: {', '.join(COUNTER_SOURCES)}") from None


select_source = counter_source   # the same, for modules where ``counter_source`` names a parameter
