"""Holding a wave's figures without holding its requests: samples and summary entries, in memory or on disk.

A wave of a few hundred requests keeps everything in memory. ``tally measure`` with a
huge ``--requests`` must not: :class:`Samples` keeps up to ``keep`` values in memory
and spills the rest to a float64 file in a spool directory (percentiles stay exact:
:func:`.stats.streamed_percentiles`); :class:`Entries` keeps each request's summary
entry (its line of ``wave.measured`` ``requests``) and its TTFT either in a list or in
two files (the entries as JSON lines, and a fixed-width index by request number), so
that both can be written out later in request order. A list too long to hold is a
:class:`Spooled` value; :func:`dump_json` writes a document containing such values,
streaming their items.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy

from .stats import percentiles, streamed_percentiles

__all__ = ["Entries", "Samples", "Spooled", "dump_json"]

_CHUNK = 1 << 20                      # samples per read when the spool is read back
_INDEX = numpy.dtype([("offset", "<i8"), ("length", "<i8"), ("ttft", "<f8")])
_INDEX_CHUNK = 1 << 16


class Samples:
    """Finite float samples for percentiles; beyond ``keep`` in memory they go to ``directory/name.f64``."""

    def __init__(self, directory: Path | None = None, name: str = "samples", keep: int = 1 << 18) -> None:
        self._directory, self._name, self._keep = directory, name, keep
        self._memory = array("d")
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self.count = 0

    def add(self, value: float) -> None:
        if math.isfinite(value):
            self._memory.append(value)
            self.count += 1
            if len(self._memory) >= self._keep and self._directory is not None:
                self._spill()

    def extend(self, values: Iterable[float]) -> None:
        for value in values:
            self.add(value)

    @property
    def spilled(self) -> bool:
        return self._path is not None

    def _spill(self) -> None:
        if self._file is None:
            assert self._directory is not None
            self._path = self._directory / f"{self._name}.f64"
            self._file = self._path.open("wb")
        self._memory.tofile(self._file)
        self._memory = array("d")

    def _chunks(self) -> Iterator[numpy.ndarray]:
        assert self._path is not None
        with self._path.open("rb") as f:
            while True:
                chunk = numpy.fromfile(f, dtype="<f8", count=_CHUNK)
                if not len(chunk):
                    return
                yield chunk

    def percentiles(self, qs: tuple[int, ...] = (50, 95, 99)) -> dict[str, float] | None:
        if self._file is None:
            return percentiles(numpy.frombuffer(self._memory, dtype=float), qs) if self.count else None
        self._spill()
        self._file.flush()
        return streamed_percentiles(self._chunks, self.count, qs)

    def percentile(self, q: int) -> float | None:
        points = self.percentiles((q,))
        return points[f"p{q}"] if points is not None else None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Spooled:
    """A list read back from disk when it is written out (see :func:`dump_json`)."""

    def __init__(self, items: Callable[[], Iterator[Any]], length: int) -> None:
        self._items, self._length = items, length

    def __iter__(self) -> Iterator[Any]:
        return self._items()

    def __len__(self) -> int:
        return self._length


class Entries:
    """Each request's summary entry and TTFT (``None`` unless ok), by request index.

    Without ``directory`` a list; with it, ``entries.jsonl`` (appended as requests
    finish) and ``entries.idx`` (24 bytes per request index: offset, length, TTFT), read
    back in request order.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self._rows: list[tuple[int, dict[str, Any], float | None]] | None = [] if directory is None else None
        self._data: IO[bytes] | None = None
        self._index_fd: int | None = None
        self._offset = 0
        self._top = -1
        self.count = 0
        self.ttft_count = 0
        if directory is not None:
            self._data_path = directory / "entries.jsonl"
            self._data = self._data_path.open("w+b")
            self._index_path = directory / "entries.idx"
            self._index_fd = os.open(self._index_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)

    def add(self, index: int, entry: dict[str, Any], ttft: float | None) -> None:
        self.count += 1
        if ttft is not None:
            self.ttft_count += 1
        if self._rows is not None:
            self._rows.append((index, entry, ttft))
            return
        assert self._data is not None and self._index_fd is not None
        line = json.dumps(entry, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self._data.write(line)
        row = numpy.array([(self._offset, len(line), math.nan if ttft is None else ttft)], dtype=_INDEX)
        os.pwrite(self._index_fd, row.tobytes(), index * _INDEX.itemsize)
        self._offset += len(line)
        self._top = max(self._top, index)

    def _in_order(self) -> Iterator[tuple[int, int, float]]:
        assert self._index_fd is not None
        for first in range(0, self._top + 1, _INDEX_CHUNK):
            count = min(_INDEX_CHUNK, self._top + 1 - first)
            raw = os.pread(self._index_fd, count * _INDEX.itemsize, first * _INDEX.itemsize)
            rows = numpy.frombuffer(raw.ljust(count * _INDEX.itemsize, b"\0"), dtype=_INDEX)
            yield from rows[rows["length"] > 0].tolist()

    def _entries(self) -> Iterator[dict[str, Any]]:
        if self._rows is not None:
            yield from (entry for _, entry, _ in sorted(self._rows, key=lambda row: row[0]))
            return
        assert self._data is not None
        self._data.flush()
        fd = self._data.fileno()
        for offset, length, _ttft in self._in_order():
            yield json.loads(os.pread(fd, length, offset))

    def _ttft(self) -> Iterator[float]:
        if self._rows is not None:
            yield from (ttft for _, _, ttft in sorted(self._rows, key=lambda row: row[0]) if ttft is not None)
            return
        for _offset, _length, ttft in self._in_order():
            if not math.isnan(ttft):
                yield ttft

    def entries(self) -> list[dict[str, Any]] | Spooled:
        """The summary entries in request order: a list in memory, else :class:`Spooled`."""
        return list(self._entries()) if self._rows is not None else Spooled(self._entries, self.count)

    def ttft(self) -> list[float] | Spooled:
        """The TTFTs of the ok requests, in request order."""
        return list(self._ttft()) if self._rows is not None else Spooled(self._ttft, self.ttft_count)

    def close(self) -> None:
        if self._data is not None:
            self._data.close()
            self._data = None
        if self._index_fd is not None:
            os.close(self._index_fd)
            self._index_fd = None


def dump_json(value: Any, out: IO[str], *, indent: int | None = 2) -> None:
    """Write ``value`` as JSON to ``out``, the items of its :class:`Spooled` lists streamed, one per line."""
    spooled: list[Spooled] = []
    nonce = secrets.token_hex(8)   # a server's string cannot pose as a marker
    marks = re.compile(r'"\\u0000spooled-' + nonce + r'-(\d+)\\u0000"')

    def mark(v: Any) -> Any:
        if isinstance(v, Spooled):
            spooled.append(v)
            return f"\0spooled-{nonce}-{len(spooled) - 1}\0"
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [mark(x) for x in v]
        return v

    text = json.dumps(mark(value), indent=indent, ensure_ascii=False, allow_nan=False)
    position = 0
    for match in marks.finditer(text):
        out.write(text[position:match.start()])
        line_start = text.rfind("\n", 0, match.start()) + 1
        pad = " " * (len(text[line_start:match.start()]) - len(text[line_start:match.start()].lstrip(" ")))
        inner = "\n" + pad + " " * (indent or 0) if indent is not None else ""
        out.write("[")
        first = True
        for item in spooled[int(match.group(1))]:
            out.write(("" if first else ",") + inner + json.dumps(item, ensure_ascii=False, allow_nan=False))
            first = False
        out.write("]" if first else ("\n" + pad if indent is not None else "") + "]")
        position = match.end()
    out.write(text[position:])
