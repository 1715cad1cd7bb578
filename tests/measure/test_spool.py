"""A wave's figures without its requests: spilled samples give numpy's exact percentiles, entries keep request order."""

from __future__ import annotations

import io
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.measure import measure_wave
from runner.measure.spool import Entries, Samples, Spooled, dump_json
from runner.measure.stats import order_statistics, percentiles
from runner.measure.totals import WaveTotals
from runner.sim import SimHandle

from .conftest import MODEL, prompts

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


@given(st.lists(finite | st.sampled_from([0.0, 1.0, 1.5]), min_size=1, max_size=400), st.integers(1, 50))
def test_spilled_samples_give_numpys_percentiles_exactly(values: list[float], keep: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        samples = Samples(Path(tmp), "x", keep=keep)
        samples.extend(values)
        assert samples.spilled == (len(values) >= keep)
        assert samples.percentiles() == percentiles(values)  # equal, not approximately
        samples.close()


def test_order_statistics_with_tiny_bins_and_many_ties() -> None:
    rng = numpy.random.default_rng(3)
    values = numpy.concatenate([numpy.full(500, 2.0), rng.exponential(1.0, 700), numpy.full(300, 1e-300)])
    ordered = numpy.sort(values)

    def chunks() -> Iterator[numpy.ndarray]:
        return (values[i:i + 97] for i in range(0, len(values), 97))

    ranks = [0, 1, 299, 300, 777, 1000, 1499]
    got = order_statistics(chunks, len(values), ranks, bins=2, gather=5)
    assert got == {k: float(ordered[k]) for k in ranks}


def test_non_finite_samples_are_not_counted(tmp_path: Path) -> None:
    samples = Samples(tmp_path)
    samples.extend([1.0, float("nan"), float("inf"), 3.0])
    assert samples.count == 2 and samples.percentiles() == percentiles([1.0, 3.0])


def test_entries_come_back_in_request_order(tmp_path: Path) -> None:
    order = list(range(50))
    random.Random(4).shuffle(order)
    spooled, listed = Entries(tmp_path), Entries()
    for index in order:
        for entries in (spooled, listed):
            entries.add(index, {"index": index, "reason": f"r{index}"}, index / 100 if index % 3 else None)
    for entries in (spooled, listed):
        assert [e["index"] for e in entries.entries()] == list(range(50))
        assert list(entries.ttft()) == [i / 100 for i in range(50) if i % 3]
    assert isinstance(spooled.entries(), Spooled) and len(spooled.entries()) == 50
    assert isinstance(listed.entries(), list)
    spooled.close()


def test_dump_json_streams_spooled_lists() -> None:
    items = [{"a": i, "s": "\u0000spooled-0\u0000"} for i in range(3)]  # a server's string posing as a marker
    value = {"x": 1, "deep": {"list": Spooled(lambda: iter(items), 3), "empty": Spooled(lambda: iter(()), 0)},
             "tail": "\u0000spooled-1\u0000"}
    for indent in (2, None):
        out = io.StringIO()
        dump_json(value, out, indent=indent)
        assert json.loads(out.getvalue()) == {"x": 1, "deep": {"list": items, "empty": []},
                                              "tail": "\u0000spooled-1\u0000"}


def test_streamed_totals_equal_the_in_memory_ones(server: SimHandle, tmp_path: Path) -> None:
    wave = measure_wave(server.url, server.metrics_url, prompts(6), model=MODEL, max_tokens=40, seed=3,
                        concurrency=2)
    shuffled = list(wave.requests)
    random.Random(5).shuffle(shuffled)
    streamed = WaveTotals(tmp_path, keep=3)  # every sample store spills
    for record in shuffled:
        streamed.add(record)
    memory = WaveTotals.of(wave.requests)
    a, b = streamed.client(), memory.client()
    assert list(a.pop("ttft_s")) == b.pop("ttft_s")  # request order, whatever the finishing order
    assert a.pop("decode_s") == pytest.approx(b.pop("decode_s"))
    assert a.pop("decode_tps") == pytest.approx(b.pop("decode_tps"))
    assert a == b  # counts exact, chunk-interval percentiles exactly numpy's
    assert list(streamed.summary_entries()) == memory.summary_entries() == [r.summary_entry() for r in wave.requests]
    for name in ("ttft_ok", "decode_tps", "tpot_ms", "e2e_s"):
        assert getattr(streamed, name).percentiles() == getattr(memory, name).percentiles()
    streamed.close()


def test_a_streamed_wave_keeps_no_records(server: SimHandle) -> None:
    seen = []
    totals = WaveTotals.spooled(keep=4)
    wave = measure_wave(server.url, server.metrics_url, prompts(5), model=MODEL, max_tokens=16, seed=3,
                        totals=totals, on_request=seen.append)
    assert wave.streamed and wave.requests == () and len(seen) == 5
    with pytest.raises(ValueError, match="not kept"):
        wave.records_jsonl()
    summary = wave.summary()
    assert summary["client"]["ok"] == 5 and [e["index"] for e in summary["requests"]] == list(range(5))
    assert wave.figures()["ttft_ms"] == {k: v * 1000 for k, v in percentiles([r.ttft_s for r in seen]).items()}
    spool = totals.spool
    assert spool is not None and spool.exists()
    wave.close()
    assert not spool.exists()


def test_unsent_requests_past_the_cap_are_counted_not_listed(server: SimHandle) -> None:
    cancel = threading.Event()
    cancel.set()
    totals = WaveTotals.spooled()
    wave = measure_wave(server.url, server.metrics_url, prompts(4) * 5, model=MODEL, max_tokens=8, seed=3,
                        totals=totals, cancel=cancel, unsent_records=3)
    assert wave.summary()["client"]["requests"] == 3 and wave.unlisted == 17
    assert "17 requests not sent" in wave.incomplete_reasons and "wave cancelled" in wave.incomplete_reasons
    assert server.truth()["requests"] == []
    wave.close()
