"""Server-sent events framing: bytes as they arrive -> the ``data`` of each complete event.

Pure and incremental (the measurement client timestamps each network read, then feeds
it here). Events end at a blank line; ``\\r\\n`` and ``\\n`` line ends are accepted;
comment lines (``:``) and fields other than ``data`` are ignored; several ``data``
lines of one event are joined with ``\\n`` (the SSE rules).

Bounded: a line still waiting for its newline, or the data of an event still waiting
for its blank line, may hold at most ``max_line`` bytes (1 MiB by default); beyond, the
decoder raises :class:`SSEOverflow` and keeps nothing more (a server sending one endless
line cannot grow the client's memory). Pending bytes are kept as a list of the reads
that carried them, so a line trickled one byte at a time costs linear, not quadratic, time.
"""

from __future__ import annotations

from .bounds import MAX_SSE_LINE_BYTES, mib

__all__ = ["SSEDecoder", "SSEOverflow"]


class SSEOverflow(ValueError):
    """A line or an event over the decoder's limit."""


class SSEDecoder:
    """Feed bytes with :meth:`feed`; each call returns the events completed by them."""

    def __init__(self, max_line: int = MAX_SSE_LINE_BYTES) -> None:
        self.max_line = max_line
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._data: list[bytes] = []
        self._data_size = 0

    def feed(self, chunk: bytes) -> list[str]:
        if b"\n" not in chunk:
            if chunk:
                self._pending.append(chunk)
                self._pending_size += len(chunk)
                self._check(self._pending_size, "line")
            return []
        if self._pending:
            self._pending.append(chunk)
            buffer = b"".join(self._pending)
        else:
            buffer = chunk
        lines = buffer.split(b"\n")
        tail = lines.pop()
        self._pending = [tail] if tail else []
        self._pending_size = len(tail)
        events: list[str] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            self._check(len(line), "line")
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data).decode("utf-8", "replace"))
                    self._data, self._data_size = [], 0
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                value = value[1:] if value.startswith(b" ") else value
                self._data.append(value)
                self._data_size += len(value) + 1
                self._check(self._data_size, "event")
        self._check(self._pending_size, "line")
        return events

    def _check(self, size: int, what: str) -> None:
        if size > self.max_line:
            self._pending, self._pending_size, self._data, self._data_size = [], 0, [], 0
            raise SSEOverflow(f"SSE {what} over the {mib(self.max_line)} limit (refused; what arrived before is kept)")

    def close(self) -> list[str]:
        """The event left unterminated when the stream ended (lenient: a server may omit the blank line)."""
        events = self.feed(b"\n\n") if (self._pending or self._data) else []
        self._pending, self._pending_size, self._data, self._data_size = [], 0, [], 0
        return events
