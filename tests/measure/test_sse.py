"""SSE framing: events split anywhere, CRLF, comments, multi-line data; lines and events bounded."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.measure.sse import SSEDecoder, SSEOverflow

STREAM = (b'data: {"a":1}\n\n: keep-alive comment\n\ndata: {"b":2}\r\n\r\n'
          b"event: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n")
EVENTS = ['{"a":1}', '{"b":2}', "line1\nline2", "[DONE]"]


def test_whole_stream() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(STREAM) + decoder.close() == EVENTS


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_split(cuts: list[int]) -> None:
    decoder = SSEDecoder()
    events: list[str] = []
    bounds = [0, *sorted(cuts), len(STREAM)]
    for a, b in itertools.pairwise(bounds):
        events += decoder.feed(STREAM[a:b])
    assert events + decoder.close() == EVENTS


def test_unterminated_last_event_on_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: tail") == []
    assert decoder.close() == ["tail"]


def test_a_line_at_the_limit_passes_one_over_is_refused() -> None:
    decoder = SSEDecoder(max_line=1024)
    line = b"data: " + b"x" * (1024 - 6)
    assert decoder.feed(line + b"\n\n") == ["x" * 1018]
    decoder.feed(line)
    with pytest.raises(SSEOverflow, match=r"^SSE line over the 1 KiB limit"):
        decoder.feed(b"x")
    assert decoder.feed(b"\ndata: next\n\n") == ["next"]  # what was refused is gone, not kept in memory


def test_an_event_of_many_short_lines_over_the_limit_is_refused() -> None:
    decoder = SSEDecoder(max_line=1024)
    with pytest.raises(SSEOverflow, match=r"^SSE event over the 1 KiB limit"):
        for _ in range(200):
            decoder.feed(b"data: 0123456789\n")  # never a blank line: the event never ends


def test_a_trickled_line_is_kept_in_pieces() -> None:
    decoder = SSEDecoder()
    for byte in b'data: {"a":1}':
        assert decoder.feed(bytes([byte])) == []
    assert len(decoder._pending) == 13  # the reads, not a buffer copied at every byte
    assert decoder.feed(b"\n\n") == ['{"a":1}']


def test_the_default_limit_is_one_mib() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"x" * (1 << 20))
    with pytest.raises(SSEOverflow):
        decoder.feed(b"x")
