"""`tally witness serve` as a real subprocess on 127.0.0.1 (stopped by its pid), and signed test checkpoints."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ledger import merkle
from ledger import note as notes
from ledger.checkpoint import Checkpoint
from ledger.keys import Signer

from .helpers import MemoryTree

LEAVES = [merkle.hash_leaf(bytes([i])) for i in range(64)]
TREE = MemoryTree(LEAVES)
OTHER_ROOT = hashlib.sha256(b"other").digest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def root_of(size: int) -> bytes:
    return merkle.EMPTY_ROOT if size == 0 else TREE.root(size)


def proof(old: int, new: int) -> list[bytes]:
    return merkle.consistency_proof(old, new, TREE.fetch) if 0 < old < new else []


def signed(origin: str, size: int, root: bytes, signer: Signer) -> str:
    return notes.sign(Checkpoint(origin, size, root).text(), origin, signer)


def body(old: int, hashes: Sequence[bytes], note: str) -> bytes:
    import base64

    return ("".join([f"old {old}\n", *(base64.b64encode(h).decode() + "\n" for h in hashes), "\n", note])).encode()


@dataclass
class Served:
    url: str
    pid: int
    db: str
    vkey: str


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"tally witness serve exited {proc.returncode}: {err}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("tally witness serve did not listen in time")


@contextmanager
def serve_witness(tmp_path: Path, witness: Signer, name: str, *, logs: str | None = None,
                  log_vkeys: Sequence[str] = (), db: str | None = None, extra: Sequence[str] = ()) -> Iterator[Served]:
    """Start ``tally witness serve`` on a free loopback port; stop it by its pid."""
    key = tmp_path / f"{name.replace('/', '_')}.pem"
    if not key.exists():
        key.write_bytes(witness.private_pem())
        key.chmod(0o600)
    port = free_port()
    database = db or f"sqlite:///{tmp_path / (name.replace('/', '_') + '.db')}"
    args = [str(Path(sys.executable).parent / "tally"), "witness", "serve", "--key", str(key), "--name", name, "--db", database,
            "--port", str(port), *extra]
    if logs is not None:
        (tmp_path / "logs.txt").write_text(logs)
        args += ["--logs", str(tmp_path / "logs.txt")]
    for v in log_vkeys:
        args += ["--log", v]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        _wait_port(port, proc)
        yield Served(f"http://127.0.0.1:{port}", proc.pid,
                     database, notes.vkey(name, witness.public_raw, notes.SIG_COSIGNATURE))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
