"""Server-sent events framing: bytes as they arrive -> the ``data`` of each complete event.

Pure and incremental (the measurement client timestamps each network read, then feeds
it here). Events end at a blank line; ``\\r\\n`` and ``\\n`` line ends are accepted;
comment lines (``:``) and fields other than ``data`` are ignored; several ``data``
lines of one event are joined with ``\\n`` (the SSE rules).
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Feed bytes with :meth:`feed`; each call returns the events completed by them."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[str]:
        buffer = self._pending + chunk if self._pending else chunk
        lines = buffer.split(b"\n")
        self._pending = lines.pop()
        events: list[str] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data).decode("utf-8", "replace"))
                    self._data = []
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return events

    def close(self) -> list[str]:
        """The event left unterminated when the stream ended (lenient: a server may omit the blank line)."""
        events = self.feed(b"\n\n") if (self._pending or self._data) else []
        self._pending, self._data = b"", []
        return events
