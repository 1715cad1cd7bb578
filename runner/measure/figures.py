"""The client figures of a wave: the ``client`` block of ``wave.measured`` (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .record import RequestRecord
from .totals import MEASURED, WaveTotals

__all__ = ["MEASURED", "client_figures"]


def client_figures(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The ``client`` block of ``wave.measured`` (``docs/events.md``).

    ``delivered_tokens`` counts every request (partials included); decode figures,
    chunk intervals and tokens per chunk pool the ``ok`` and ``censored`` requests
    (a censored request's chunks were measured like any other); ``ttft_s`` lists the
    ``ok`` requests in request order.
    """
    return WaveTotals.of(records).client()
