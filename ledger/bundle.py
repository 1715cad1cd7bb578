"""Export bundles (SPEC 3.7): what an auditor needs, with no database.

A bundle directory holds ``manifest.json``, ``events.jsonl`` (one event per line,
JCS, in seq order), ``checkpoint.txt`` (the newest checkpoint covering every exported
event), ``blobs/<sha256>``, and for a partial (``--stream``) export ``proofs.jsonl``
(one inclusion proof per event against ``checkpoint.txt``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .errors import FormatError
from .event import format_time
from .keys import Signer
from .verify import referenced_blobs

__all__ = ["BUNDLE_FORMAT", "export_bundle"]

BUNDLE_FORMAT = "tally-bundle/v1"


def _tally_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tally")
    except PackageNotFoundError:
        return "unknown"


def _prepare_target(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FormatError(f"{out} exists and is not an empty directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))


def export_bundle(book: Any, out: Path, *, stream: str | None = None, signer: Signer | None = None) -> dict[str, Any]:
    """Write a bundle of ``book`` (a ``Ledger``) to ``out``; returns the manifest."""
    out = Path(out)
    tmp = _prepare_target(out)
    try:
        manifest = _write(book, tmp, stream, signer)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _write(book: Any, tmp: Path, stream: str | None, signer: Signer | None) -> dict[str, Any]:
    size, head = book.head()
    blobs: set[str] = set()
    count, first, last = 0, None, None
    digest = hashlib.sha256()
    with open(tmp / "events.jsonl", "w", encoding="utf-8", newline="\n") as handle:
        for event in book.events(0, until=size, stream=stream):
            line = event.line() + "\n"
            handle.write(line)
            digest.update(line.encode("utf-8"))
            blobs |= referenced_blobs(event)
            count += 1
            first = first or event.seq
            last = event.seq
    files = {"events.jsonl": digest.hexdigest()}
    if blobs:
        (tmp / "blobs").mkdir()
        for sha in sorted(blobs):
            blob = book.blob(sha)
            if blob is None:
                raise FormatError(f"blob {sha} is referenced but absent from the ledger")
            (tmp / "blobs" / sha).write_bytes(blob.data)
    checkpoint_size = None
    extra = _transparency_files(book, tmp, size, stream, signer)
    if extra:
        checkpoint_size = extra.pop("checkpoint_size")
        files.update(extra)
    manifest = {
        "format": BUNDLE_FORMAT,
        "origin": book.info.origin,
        "ledger": book.info.ledger_id,
        "tally_version": _tally_version(),
        "exported_at": format_time(),
        "ledger_size": size,
        "ledger_head": head,
        "stream": stream,
        "partial": stream is not None,
        "events": count,
        "first_seq": first,
        "last_seq": last,
        "checkpoint_size": checkpoint_size,
        "blobs": len(blobs),
        "files": files,
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def _transparency_files(
    book: Any, tmp: Path, size: int, stream: str | None, signer: Signer | None
) -> dict[str, Any]:
    """checkpoint.txt and proofs.jsonl; filled in by the transparency layer."""
    return {}
