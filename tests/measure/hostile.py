"""Tiny misbehaving HTTP servers on 127.0.0.1, started and stopped by the tests.

:func:`serve` runs a :class:`Handler` subclass on a thread; ``Hostile.stop`` (or the
context manager's exit) sets ``stopping`` so that endless replies end, then shuts the
server down. Every request seen is kept in ``seen`` (method, path, headers).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

MODEL = "tiny"


@dataclass
class Hostile:
    url: str
    server: ThreadingHTTPServer
    stopping: threading.Event
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    """Answers /v1/models and a 404 /metrics; subclasses misbehave in ``post`` (and maybe ``get_metrics``)."""

    protocol_version = "HTTP/1.1"
    hostile: ClassVar[Hostile]

    def log_message(self, format: str, *args: object) -> None:
        return

    def _record(self) -> None:
        self.hostile.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))

    def send_body(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._record()
        if self.path == "/v1/models":
            self.send_body(200, json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode())
        elif self.path == "/metrics":
            self.get_metrics()
        else:
            self.send_body(404, b"{}")

    def get_metrics(self) -> None:
        self.send_body(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        self._record()
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        with suppress(BrokenPipeError, ConnectionResetError):
            self.post(body)

    def post(self, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def trickle(self, data: bytes, every_s: float = 0.5) -> None:
        """Send ``data`` one byte at a time, then one more byte forever, every ``every_s`` (until the test stops)."""
        for byte in data:
            if self.hostile.stopping.wait(every_s):
                return
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
        while not self.hostile.stopping.wait(every_s):
            self.wfile.write(b" ")
            self.wfile.flush()

    def sse_headers(self) -> None:
        """An event stream delimited by closing the connection (as the tests' servers do)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True


@contextmanager
def serve(handler: type[Handler]) -> Iterator[Hostile]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    hostile = Hostile(f"http://127.0.0.1:{httpd.server_address[1]}", httpd, threading.Event())
    bound = type(handler.__name__, (handler,), {"hostile": hostile})
    httpd.RequestHandlerClass = bound
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield hostile
    finally:
        hostile.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def chunk(i: int, last: bool = False) -> bytes:
    frame = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
             "choices": [{"index": 0, "text": f" w{i}", "token_ids": [i + 1], "finish_reason": "length" if last else None}]}
    return f"data: {json.dumps(frame)}\n\n".encode()


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None  # gone, or a zombie (its memory released)


def rss_kib(pid: int) -> int:
    """A process's resident set size now (KiB), from /proc."""
    value = _status_kib(pid, "VmRSS")
    assert value is not None, f"process {pid} has no VmRSS"
    return value


def hwm_kib(pid: int) -> int:
    """A running process's peak resident set size so far (KiB), 0 once it is gone."""
    return _status_kib(pid, "VmHWM") or 0


def wait_for(predicate: Any, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())
