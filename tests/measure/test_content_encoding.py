"""A server that compresses its reply although ``accept-encoding: identity`` was asked.

A compressed event stream is refused, never decoded as SSE: the request is a recorded
failure naming the encoding. An error body is read with the one capped reader
(``bounds.read_capped``): bounded, and decompressed within that bound when gzip.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from runner.measure import measure_wave, synthetic_family

from .hostile import MODEL, Handler, chunk, serve


class CompressedStream(Handler):
    """Completions: a valid event stream, sent with the body's ``mode`` as its content-encoding."""

    def post(self, body: dict[str, Any]) -> None:
        encoding = body.get("mode", "gzip")
        data = chunk(0) + chunk(1, last=True) + b"data: [DONE]\n\n"
        payload = gzip.compress(data) if encoding == "gzip" else data
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-encoding", encoding)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class ErrorBodies(Handler):
    """Completions: HTTP 500 with vLLM's error body, gzip-compressed (``gzip``) or 100 KiB long (``huge``)."""

    def post(self, body: dict[str, Any]) -> None:
        error = json.dumps({"object": "error", "message": "engine died", "type": "InternalServerError",
                            "code": 500}).encode()
        if body.get("mode") == "gzip":
            payload = gzip.compress(error)
            self.send_response(500)
            self.send_header("content-type", "application/json")
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        else:
            self.send_body(500, b'{"message": "' + b"x" * (100 << 10) + b'"}')


def _one(handler: type[Handler], mode: str) -> Any:
    with serve(handler) as server:
        wave = measure_wave(server.url, None, synthetic_family("opinions", short=1, long=0), model=MODEL,
                            max_tokens=8, seed=1, extra_body={"mode": mode})
        sent = [headers for method, path, headers in server.seen if method == "POST"]
    assert sent and all(h.get("accept-encoding") == "identity" for h in sent)
    (record,) = wave.requests
    return record


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_a_compressed_event_stream_is_a_recorded_failure_never_decoded_as_sse(encoding: str) -> None:
    record = _one(CompressedStream, encoding)
    assert record.status == "failed"
    assert record.reason == f"content-encoding {encoding} refused (identity was asked)"
    assert record.chunk_t == () or list(record.chunk_t) == []
    assert record.delivered_tokens == 0


def test_a_gzip_error_body_is_decoded_within_its_bound() -> None:
    record = _one(ErrorBodies, "gzip")
    assert record.status == "failed" and record.reason == "HTTP 500: engine died"


def test_an_error_body_over_its_bound_is_refused_by_the_capped_reader() -> None:
    record = _one(ErrorBodies, "huge")
    assert record.status == "failed" and record.reason == "HTTP 500: the error body is over the 64 KiB limit"
