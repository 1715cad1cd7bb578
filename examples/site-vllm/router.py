"""The example vLLM site's serving port: a TCP relay to whichever engine the site routes to.

    python router.py --host 127.0.0.1 --port 8100 --state STATE_DIR

tally talks to one serving URL; the site's engines listen on ports of their own
(``vllmsite.toml``). This relay owns the serving port and copies bytes both ways between
each client connection and the engine named in ``STATE_DIR/route.json``
(``{"port": N}``, or ``{"port": null}``: nothing is routed). It reads the route when it
starts and on SIGHUP, and then closes every connection it relays, so no kept-alive client
connection reaches the engine it was routed to before. With nothing routed, every request
gets ``503`` and a vLLM-shaped error body. Bytes are relayed as they arrive (no buffering
of a stream), so each streamed chunk reaches the client when the engine sends it.

An example site's helper, not part of tally; stdlib only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

DOWN_BODY = json.dumps({"error": {"message": "no engine is routed to the serving port (production is down)",
                                  "type": "ServiceUnavailableError", "param": None, "code": 503}}).encode()
DOWN_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
              b"content-length: " + str(len(DOWN_BODY)).encode() + b"\r\nconnection: close\r\n\r\n" + DOWN_BODY)


class Router:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.port: int | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    def reload(self) -> None:
        try:
            route = json.loads((self.state / "route.json").read_text())
            port = route.get("port")
            self.port = int(port) if port is not None else None
        except (OSError, ValueError, TypeError, AttributeError):
            self.port = None
        for writer in list(self.writers):
            writer.close()
        self.writers.clear()
        print(f"router: routing to {self.port if self.port is not None else 'nothing'}", file=sys.stderr, flush=True)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = self.port
        if port is None:
            with contextlib.suppress(OSError):
                await reader.read(65536)
                writer.write(DOWN_REPLY)
                await writer.drain()
            writer.close()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        self.writers.update((writer, upstream_writer))
        try:
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            for w in (writer, upstream_writer):
                self.writers.discard(w)
                w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def serve(host: str, port: int, state: Path) -> None:
    router = Router(state)
    router.reload()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, router.reload)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_server(router.handle, host, port)
    print(f"router: pid {os.getpid()} on {host}:{port}", file=sys.stderr, flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="relay the serving port to the routed engine")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port, args.state))


if __name__ == "__main__":
    main()
