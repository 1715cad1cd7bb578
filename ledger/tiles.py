"""The ledger's Merkle tree as C2SP tlog-tiles: static files any web server can serve (``docs/transparency.md``).

Layout under a prefix (a directory, or a URL serving one)::

    checkpoint                       the signed checkpoint (with cosignatures when published so)
    tile/<L>/<N>[.p/<W>]             256 hashes (8,192 bytes) per full tile; W of them in a partial one
    tile/entries/<N>[.p/<W>]         entry bundles: uint16-length-prefixed entries (tally's: the raw
                                     32-byte event hash, the leaf data: each hashes to its level-0 hash)
    tile/events/<N>[.p/<W>]          the same bundles of the events' canonical lines (uint32 prefixes:
                                     an event may exceed 65,535 bytes, so it has its own URL, as the
                                     spec allows for other formats)

``N`` is written in 3-digit groups, all but the last prefixed with ``x`` (1234067 ->
``x001/x234/067``). Tile ``n`` at level ``l`` holds ``MTH(D[(256n+i)·256^l : (256n+i+1)·256^l])``;
partial tiles are never hashed into the level above.

``publish`` writes what a tree of ``size`` leaves needs, incrementally (a file already
there is kept: full tiles never change, a partial tile's name carries its width) and
atomically for a reader: every tile and bundle is written whole (temporary file, rename),
all are synced to disk at once, and only then does the checkpoint that needs them replace
the old one (temporary file, fsync, rename, fsync). Nothing is written
through a symlink. ``TileReader`` serves node hashes to the proof functions of
``ledger.merkle`` from tiles alone, each file bounded in size and checked in length.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import merkle
from . import note as notes
from .checkpoint import parse_checkpoint
from .errors import ExternalError, FormatError, VerificationError
from .strictwrite import open_dir, write_whole

__all__ = [
    "HASHES_PER_TILE",
    "MAX_CHECKPOINT_BYTES",
    "MAX_ENTRY_BUNDLE_BYTES",
    "MAX_EVENTS_BUNDLE_BYTES",
    "Published",
    "TileReader",
    "TileSource",
    "bundle",
    "encode_index",
    "entries_path",
    "events_path",
    "layout",
    "parse_bundle",
    "perfect_root",
    "publish",
    "tile_path",
    "tree_tiles",
]

HASHES_PER_TILE = 256
HASH = 32
MAX_CHECKPOINT_BYTES = 1 << 20
MAX_ENTRY_BUNDLE_BYTES = HASHES_PER_TILE * (2 + 0xFFFF)
MAX_EVENTS_BUNDLE_BYTES = 256 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def encode_index(n: int) -> str:
    """``N`` in 3-digit path elements, all but the last prefixed with ``x``."""
    if n < 0:
        raise ValueError("a tile index is not negative")
    groups = []
    while True:
        groups.append(f"{n % 1000:03d}")
        n //= 1000
        if n == 0:
            break
    groups.reverse()
    return "/".join([*("x" + g for g in groups[:-1]), groups[-1]])


def _suffix(width: int) -> str:
    return "" if width == HASHES_PER_TILE else f".p/{width}"


def tile_path(level: int, index: int, width: int = HASHES_PER_TILE) -> str:
    return f"tile/{level}/{encode_index(index)}{_suffix(width)}"


def entries_path(index: int, width: int = HASHES_PER_TILE) -> str:
    return f"tile/entries/{encode_index(index)}{_suffix(width)}"


def events_path(index: int, width: int = HASHES_PER_TILE) -> str:
    return f"tile/events/{encode_index(index)}{_suffix(width)}"


def layout(size: int) -> list[tuple[int, int, int]]:
    """Every tile ``(level, index, width)`` a tree of ``size`` leaves is served as (no empty tile)."""
    out = []
    level = 0
    while True:
        count = size // HASHES_PER_TILE ** level  # hashes at this tile level
        if count == 0:
            break
        full, partial = divmod(count, HASHES_PER_TILE)
        out += [(level, n, HASHES_PER_TILE) for n in range(full)]
        if partial:
            out.append((level, full, partial))
        if count < HASHES_PER_TILE:
            break
        level += 1
    return out


def perfect_root(hashes: Sequence[bytes]) -> bytes:
    """The root of a perfect subtree whose leaves are ``hashes`` (a power of two of them)."""
    level = list(hashes)
    while len(level) > 1:
        level = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level), 2)]
    return level[0]


def tree_tiles(leaf_hashes: Sequence[bytes]) -> list[list[bytes]]:
    """The hashes of each tile level: level 0 the leaf hashes, level L+1 the roots of level L's full tiles."""
    levels = [list(leaf_hashes)]
    while len(levels[-1]) >= HASHES_PER_TILE:
        below = levels[-1]
        levels.append([perfect_root(below[i:i + HASHES_PER_TILE])
                       for i in range(0, len(below) - HASHES_PER_TILE + 1, HASHES_PER_TILE)])
    return levels


def bundle(entries: Sequence[bytes], prefix: int = 2) -> bytes:
    """Entries with big-endian length prefixes (2 bytes: tlog-tiles entry bundles; 4: tally's event bundles)."""
    limit = (1 << (8 * prefix)) - 1
    out = bytearray()
    for entry in entries:
        if len(entry) > limit:
            raise FormatError(f"an entry of {len(entry)} bytes does not fit a {prefix}-byte length prefix")
        out += len(entry).to_bytes(prefix, "big") + entry
    return bytes(out)


def parse_bundle(data: bytes, count: int, prefix: int = 2) -> list[bytes]:
    """Exactly ``count`` length-prefixed entries filling ``data``; ``VerificationError`` otherwise."""
    out, at = [], 0
    for _ in range(count):
        if at + prefix > len(data):
            raise VerificationError("entry bundle ends before its last entry", rule="tiles")
        length = int.from_bytes(data[at:at + prefix], "big")
        at += prefix
        if at + length > len(data):
            raise VerificationError("entry bundle entry runs past the bundle", rule="tiles")
        out.append(data[at:at + length])
        at += length
    if at != len(data):
        raise VerificationError(f"entry bundle has {len(data) - at} bytes after its {count} entries", rule="tiles")
    return out


# ---------------------------------------------------------------------------
# Publishing.


@dataclass
class Published:
    """What ``publish`` did: the files written (relative paths), the files already there, bytes written."""

    size: int
    written: list[str] = field(default_factory=list)
    kept: int = 0
    bytes_written: int = 0
    checkpoint_changed: bool = False


class _Out:
    """A directory tree written without following symlinks: every component opened with O_NOFOLLOW."""

    def __init__(self, root: Path, *, create: bool = True) -> None:
        self.root = root
        self.create = create
        self.fds: dict[str, int] = {}
        self.fds[""] = open_dir(root, "tiles directory") if create else self._open(str(root), None)

    def _open(self, name: str, dir_fd: int | None) -> int:
        try:
            return os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise FormatError(f"tiles directory: {name} is a symbolic link or not a directory") from None
            raise FormatError(f"tiles directory: cannot open {name}: {exc.strerror}") from None

    def dir_fd(self, rel_dir: str) -> int:
        if rel_dir in self.fds:
            return self.fds[rel_dir]
        parent, _, name = rel_dir.rpartition("/")
        if self.create:
            fd = open_dir(Path(name), "tiles directory", dir_fd=self.dir_fd(parent))
        else:
            fd = self._open(name, self.dir_fd(parent))
        self.fds[rel_dir] = fd
        return fd

    def exists(self, rel: str) -> int | None:
        parent, _, name = rel.rpartition("/")
        try:
            info = os.stat(name, dir_fd=self.dir_fd(parent), follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(f"tiles directory: {self.root / rel} is not a regular file; refusing to use it")
        return info.st_size

    def read(self, rel: str, limit: int) -> bytes | None:
        parent, _, name = rel.rpartition("/")
        try:
            fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=self.dir_fd(parent))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FormatError(f"tiles directory: {self.root / rel} is a symbolic link; refusing it") from None
            raise FormatError(f"tiles directory: cannot read {self.root / rel}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise FormatError(f"tiles directory: {self.root / rel} is larger than {limit} bytes")
        return data

    def write(self, rel: str, data: bytes, *, sync: bool = True) -> None:
        parent, _, name = rel.rpartition("/")
        write_whole(name, data, "tile", mode=0o644, dir_fd=self.dir_fd(parent), shown=self.root / rel, sync=sync)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def publish(out: Path, leaf_hashes: Sequence[bytes], checkpoint_note: str,
            entries: Callable[[int, int], Sequence[bytes]],
            events: Callable[[int, int], Sequence[bytes]] | None = None) -> Published:
    """Write the tiles of the tree ``leaf_hashes`` and then ``checkpoint_note`` (its size and root must match).

    ``entries(start, end)`` gives the entries of leaves ``[start, end)`` (each must hash to
    its leaf hash); ``events(start, end)`` the event lines, when published. A checkpoint
    already in ``out`` must be of the same origin and a prefix of this tree (else
    ``FormatError``: another log's tiles are there).
    """
    checkpoint = parse_checkpoint(notes.parse_note(checkpoint_note).text)
    size = checkpoint.size
    if size > len(leaf_hashes):
        raise FormatError(f"the checkpoint is of size {size}; the tree has {len(leaf_hashes)} leaves")
    leaves = leaf_hashes[:size]
    if merkle.root_from_leaves(leaves) != checkpoint.root:
        raise VerificationError("refusing to publish: the checkpoint's root is not the root of the tree's leaves",
                                rule="tiles")
    target = _Out(out)
    result = Published(size)
    try:
        old = target.read("checkpoint", MAX_CHECKPOINT_BYTES)
        if old is not None:
            try:
                previous = parse_checkpoint(notes.parse_note(old.decode("utf-8")).text)
            except (FormatError, UnicodeDecodeError):
                raise FormatError(f"{out / 'checkpoint'} is not a checkpoint; refusing to publish over it") from None
            if previous.origin != checkpoint.origin:
                raise FormatError(f"{out} holds the tiles of {previous.origin!r}, not {checkpoint.origin!r}")
            if previous.size > size or merkle.root_from_leaves(leaves[:previous.size]) != previous.root:
                raise FormatError(f"{out} holds a tree (size {previous.size}) that is not a prefix of this one")
        levels = tree_tiles(leaves)
        for level, index, width in layout(size):
            start = index * HASHES_PER_TILE
            files = [("tile", tile_path(level, index, width))]
            if level == 0:
                files.append(("entries", entries_path(index, width)))
                if events is not None:
                    files.append(("events", events_path(index, width)))
            for kind, rel in files:
                if target.exists(rel) is not None:
                    result.kept += 1
                    continue
                if kind == "tile":
                    data = b"".join(levels[level][start:start + width])
                elif kind == "entries":
                    data = _entries(entries, leaves, start, width)
                else:
                    assert events is not None
                    data = bundle(events(start, start + width), 4)
                target.write(rel, data, sync=False)  # renamed whole; all synced at once below
                result.written.append(rel)
                result.bytes_written += len(data)
        encoded = checkpoint_note.encode("utf-8")
        if old != encoded:
            if result.written:
                os.sync()  # every tile on disk before the checkpoint that needs them (also across a crash)
            target.write("checkpoint", encoded)  # last: a reader sees it only with every tile it needs
            result.written.append("checkpoint")
            result.bytes_written += len(encoded)
            result.checkpoint_changed = True
    finally:
        target.close()
    return result


def _entries(entries: Callable[[int, int], Sequence[bytes]], leaves: Sequence[bytes], start: int, width: int) -> bytes:
    got = list(entries(start, start + width))
    if len(got) != width or any(merkle.hash_leaf(e) != leaves[start + i] for i, e in enumerate(got)):
        raise VerificationError(f"refusing to publish: the entries of tile {start // HASHES_PER_TILE} do not hash "
                                "to their leaves", rule="tiles")
    return bundle(got)


# ---------------------------------------------------------------------------
# Reading.


class TileSource:
    """Files under a prefix: an ``http(s)://`` URL (no redirects, bounded, timed) or a local directory."""

    def __init__(self, location: str, *, timeout: float = 10.0) -> None:
        self.location = location
        self.timeout = timeout
        self.fetched = 0
        self._http = location.startswith(("http://", "https://"))
        self._client: object = None
        if not self._http:
            root = Path(location)
            if not root.is_dir() or root.is_symlink():
                raise FormatError(f"--tiles {location}: not a directory or an http(s) URL")
            self._dir: _Out | None = None

    def get(self, rel: str, limit: int) -> bytes:
        self.fetched += 1
        if not self._http:
            if self._dir is None:
                self._dir = _Out(Path(self.location), create=False)
            try:
                data = self._dir.read(rel, limit)
            except FileNotFoundError:  # a directory on the way is missing
                data = None
            if data is None:
                raise VerificationError(f"tiles: {rel} is missing", rule="tiles")
            return data
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, follow_redirects=False,
                                        headers={"Accept-Encoding": "gzip, identity"})
        client = self._client
        assert isinstance(client, httpx.Client)
        url = self.location.rstrip("/") + "/" + rel
        try:
            with client.stream("GET", url) as response:
                if response.status_code == 404:
                    raise VerificationError(f"tiles: {rel} is missing (404)", rule="tiles")
                if response.status_code != 200:
                    raise ExternalError(f"tiles: GET {url}: HTTP {response.status_code}")
                chunks, total = [], 0
                for chunk in response.iter_bytes():
                    total += len(chunk)
                    if total > limit:
                        raise VerificationError(f"tiles: {rel} is larger than {limit} bytes", rule="tiles")
                    chunks.append(chunk)
        except httpx.HTTPError as exc:
            raise ExternalError(f"tiles: GET {url}: {type(exc).__name__}") from None
        return b"".join(chunks)

    def close(self) -> None:
        if self._http and self._client is not None:
            self._client.close()  # type: ignore[attr-defined]
        elif not self._http and self._dir is not None:
            self._dir.close()


class TileReader:
    """Node hashes of a tree of ``size`` leaves, read from its tiles (each tile fetched once, length-checked)."""

    def __init__(self, source: TileSource, size: int) -> None:
        self.source = source
        self.size = size
        self.tiles: dict[tuple[int, int], list[bytes]] = {}

    def width(self, level: int, index: int) -> int:
        count = self.size // HASHES_PER_TILE ** level
        if (index + 1) * HASHES_PER_TILE <= count:
            return HASHES_PER_TILE
        width = count - index * HASHES_PER_TILE
        if width <= 0:
            raise VerificationError(f"tile {level}/{index} is not part of a tree of size {self.size}", rule="tiles")
        return width

    def tile(self, level: int, index: int) -> list[bytes]:
        key = (level, index)
        if key not in self.tiles:
            width = self.width(level, index)
            data = self.source.get(tile_path(level, index, width), width * HASH)
            if len(data) != width * HASH:
                raise VerificationError(f"tile {tile_path(level, index, width)} is {len(data)} bytes, not "
                                        f"{width * HASH}", rule="tiles")
            self.tiles[key] = [data[i:i + HASH] for i in range(0, len(data), HASH)]
        return self.tiles[key]

    def node(self, height: int, index: int) -> bytes:
        """The hash of the perfect subtree of ``2**height`` leaves at ``index``."""
        level, rest = divmod(height, 8)
        first = index << rest
        tile = self.tile(level, first // HASHES_PER_TILE)
        at = first % HASHES_PER_TILE
        hashes = tile[at:at + (1 << rest)]
        if len(hashes) != 1 << rest:
            raise VerificationError(f"tile {level}/{first // HASHES_PER_TILE} is too narrow for node "
                                    f"({height}, {index})", rule="tiles")
        return perfect_root(hashes)

    def fetch(self, nodes: Sequence[merkle.Node]) -> Mapping[merkle.Node, bytes]:
        return {(h, i): self.node(h, i) for h, i in nodes}
