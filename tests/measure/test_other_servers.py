"""Servers that are not vLLM: no [DONE], no streaming, authentication; the client still measures."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from cli.app import app
from runner.measure import measure_wave

from .conftest import prompts

BEHAVIOUR: dict[str, str] = {}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if BEHAVIOUR.get("mode") == "auth" and self.headers.get("authorization") != "Bearer sesame":
            self._reply(401, {"error": {"message": "bad key"}})
            return
        self._reply(200, {"object": "list", "data": [{"id": "other-model", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        mode = BEHAVIOUR.get("mode")
        if mode == "auth" and self.headers.get("authorization") != "Bearer sesame":
            self._reply(401, {"error": {"message": "bad key"}})
            return
        if mode == "no_stream":
            self._reply(200, {"id": "c", "object": "text_completion", "choices": [
                {"index": 0, "text": " a b c", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        n = int(body["max_tokens"])
        for i in range(n):
            choice = {"index": 0, "text": f" t{i}", "finish_reason": "length" if i == n - 1 else None}
            self.wfile.write(f"data: {json.dumps({'id': 'c', 'choices': [choice]})}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.001)
        if mode != "no_done":
            self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def other() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    BEHAVIOUR.clear()
    httpd.shutdown()
    httpd.server_close()


def test_stream_without_done_is_ok_when_it_finished(other: str) -> None:
    BEHAVIOUR["mode"] = "no_done"
    wave = measure_wave(other, None, prompts(2), model="other-model", max_tokens=6, seed=1)
    for record in wave.requests:
        assert record.status == "ok" and record.delivered_tokens == 6 and record.tokens_source == "chunks"
        assert record.reason is not None and "no [DONE]" in record.reason
    assert wave.complete


def test_server_that_does_not_stream(other: str) -> None:
    BEHAVIOUR["mode"] = "no_stream"
    wave = measure_wave(other, None, prompts(1), model="other-model", max_tokens=3, seed=1)
    (record,) = wave.requests
    assert record.status == "ok" and record.delivered_tokens == 3 and len(record.chunk_t) == 1
    assert record.reason == "the server answered without streaming (one chunk)"


def test_auth_header_reaches_the_server(other: str, tmp_path: object) -> None:
    from pathlib import Path

    from runner.measure import synthetic_family, write_family

    BEHAVIOUR["mode"] = "auth"
    family = Path(str(tmp_path)) / "f.jsonl"
    write_family(family, synthetic_family("filings", short=2, long=0))
    refused = CliRunner().invoke(app, ["measure", "--url", other, "--family", str(family), "--max-tokens", "4",
                                       "--json"])
    assert refused.exit_code == 2 and "lists no model" in refused.stderr  # 401 on /v1/models: no model known
    result = CliRunner().invoke(app, ["measure", "--url", other, "--family", str(family), "--max-tokens", "4",
                                      "--header", "Authorization: Bearer sesame", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["measure"]["model"] == "other-model" and report["wave"]["client"]["ok"] == 2
    bad = CliRunner().invoke(app, ["measure", "--url", other, "--family", str(family), "--header", "nocolon"])
    assert bad.exit_code == 2 and "--header must be 'Name: value'" in bad.stderr
