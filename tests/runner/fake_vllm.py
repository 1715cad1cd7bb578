"""A small loopback HTTP server answering like vLLM's OpenAI API (for the rehearsal tests).

Modes: ``spec`` (speculative decoding on: ``logit_bias`` -> 400 with vLLM's error body),
``no-spec`` (accepts ``logit_bias``), ``error500`` (every request 500). The server
records every request body it received.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SPEC_MESSAGE = "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.seen.append((self.path, body))
        mode = self.server.mode
        if mode == "error500":
            self._send(500, {"error": {"message": "EngineCore died", "type": "InternalServerError", "param": None,
                                       "code": 500}})
            return
        if body.get("logit_bias") and mode == "spec":
            self._send(400, {"error": {"message": SPEC_MESSAGE, "type": "BadRequestError", "param": None,
                                       "code": 400}})
            return
        forced_eos = body.get("allowed_token_ids") == [self.server.eos]
        tokens = 1 if forced_eos else min(int(body.get("max_tokens", 16)), 8)
        finish = "stop" if forced_eos else "length"
        if self.path == "/v1/chat/completions":
            choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": finish,
                      "stop_reason": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": "" if forced_eos else " ok", "finish_reason": finish,
                      "stop_reason": self.server.eos if forced_eos else None}
            obj = "text_completion"
        self._send(200, {"id": "cmpl-1", "object": obj, "created": 1767225600, "model": "sim", "choices": [choice],
                         "usage": {"prompt_tokens": 5, "total_tokens": 5 + tokens, "completion_tokens": tokens}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str, eos: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.eos = eos
        self.seen: list[tuple[str, dict[str, Any]]] = []


@contextmanager
def fake_vllm(mode: str = "spec", eos: int = 1) -> Iterator[_Server]:
    server = _Server(mode, eos)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def url_of(server: _Server) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"
