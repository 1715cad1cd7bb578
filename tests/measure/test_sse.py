"""SSE framing: events split anywhere, CRLF, comments, multi-line data."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from runner.measure.sse import SSEDecoder

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
