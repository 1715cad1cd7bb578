"""Static tiles benchmark: publishing a 1,000,000-event ledger as tlog-tiles, and proofs read back.

    python bench/tiles.py [--small] [--events N] [--db URL_OR_PATH --key ROOT.pem] [--samples K] [--no-event-audit]

Builds (or reuses, with ``--db`` and its root ``--key``) a ledger of 1,000,000 events
(``--small``: 20,000) and signs a checkpoint from the stored tree (signing with the full
re-verification is ``bench/tlog.py``'s figure), then measures:

- ``tally tiles publish`` (the application function): seconds, files, bytes; a second
  publish after 1% more events (incremental: only the new tiles and the checkpoint);
- inclusion and consistency proofs built from tiles alone and verified, proofs per second,
  from the directory and, when nginx is installed, over HTTP from nginx on loopback
  (a fresh reader per proof: every tile it needs is fetched);
- a full audit from the tiles (every tile, entry bundle and, unless ``--no-event-audit``,
  every event line checked), seconds.

Prints figures measured in this run; never asserts times.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ledger import merkle  # noqa: E402
from ledger import note as notes  # noqa: E402
from ledger.checkpoint import Checkpoint  # noqa: E402
from ledger.keys import Signer, load_signer  # noqa: E402
from ledger.store import Ledger, NewEvent  # noqa: E402
from ledger.tiles import TileReader, TileSource  # noqa: E402
from ledger.tiles_audit import audit_tiles, entry_at  # noqa: E402
from runner.app import Session, publish_tiles  # noqa: E402

ORIGIN = "bench.tally/tiles"
BATCH = 5000


def build(url: str, events: int, signer: Signer) -> Ledger:
    book = Ledger(url)
    try:
        if book.size() >= events:
            return book
    except Exception:  # no schema yet
        pass
    book.init(ORIGIN, signer)
    done = book.size()
    while done < events:
        step = min(BATCH, events - done)
        book.append_many([NewEvent("bench", "bench.wave", {"i": done + i, "note": "x" * 40}) for i in range(step)],
                         signer)
        done += step
        if done % 200_000 < BATCH:
            print(f"  built {done:,} events", file=sys.stderr, flush=True)
    return book


def store_checkpoint(book: Ledger, signer: Signer) -> int:
    """A checkpoint of the stored tree at the current size, signed and stored; its size."""
    size = book.size()
    if size not in {c for c in _stored_sizes(book)}:
        body = Checkpoint(book.info.origin, size, book.root(size)).text()
        book.store_checkpoint(size, notes.sign(body, book.info.origin, signer))
    return size


def _stored_sizes(book: Ledger) -> list[int]:
    from ledger.checkpoint import stored_checkpoints

    return [c.size for c in stored_checkpoints(book)]


def proofs_per_second(location: str, size: int, root: bytes, old_roots: dict[int, bytes], samples: int,
                      rng: random.Random) -> tuple[float, float]:
    def run(kind: str) -> float:
        source = TileSource(location)  # one connection (keep-alive); a fresh reader, so no tile cached
        t = time.perf_counter()
        for _ in range(samples):
            reader = TileReader(source, size)
            if kind == "inclusion":
                index = rng.randrange(size)
                leaf = merkle.hash_leaf(entry_at(source, reader, index))
                merkle.verify_inclusion(index, size, leaf, merkle.inclusion_proof(index, size, reader.fetch), root)
            else:
                old = rng.choice(list(old_roots))
                merkle.verify_consistency(old, size, old_roots[old], root,
                                          merkle.consistency_proof(old, size, reader.fetch))
        rate = samples / (time.perf_counter() - t)
        source.close()
        return rate

    return run("inclusion"), run("consistency")


def start_nginx(root: Path, work: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    user = "user root;\n" if os.geteuid() == 0 else ""
    (work / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {work}/nginx.pid;\nerror_log {work}/error.log warn;\n"
        f"events {{ worker_connections 256; }}\nhttp {{ access_log off; client_body_temp_path {work}/b; "
        f"proxy_temp_path {work}/p; fastcgi_temp_path {work}/f; uwsgi_temp_path {work}/u; scgi_temp_path {work}/s;\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root}; }} }}\n")
    proc = subprocess.Popen([nginx, "-p", str(work), "-c", str(work / "nginx.conf"), "-e", str(work / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--events", type=int)
    parser.add_argument("--db")
    parser.add_argument("--key")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--no-event-audit", action="store_true")
    args = parser.parse_args(argv)
    events = args.events or (20_000 if args.small else 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        url = args.db if args.db and "://" in args.db else f"sqlite:///{args.db or work / 'tiles.db'}"
        if args.key:
            key = Path(args.key)
            signer = load_signer(key)
        else:
            signer = Signer.generate()
            key = work / "root.pem"
            key.write_bytes(signer.private_pem())
            key.chmod(0o600)
        t = time.perf_counter()
        book = build(url, events, signer)
        built = time.perf_counter() - t
        size = store_checkpoint(book, signer)
        session = Session(db=url, key=str(key))
        site = work / "site"
        t = time.perf_counter()
        first = publish_tiles(session, site)
        publish_s = time.perf_counter() - t
        print(f"ledger: {size:,} events (built in {built:.1f} s)")
        print(f"publish: {publish_s:.2f} s, {len(first.written):,} files, {first.bytes_written / 1e6:.1f} MB "
              f"({first.bytes_written / size:.0f} bytes/event)")
        extra = max(1, size // 100)
        book.append_many([NewEvent("bench", "bench.wave", {"i": i}) for i in range(extra)], signer)
        store_checkpoint(book, signer)
        t = time.perf_counter()
        second = publish_tiles(session, site)
        print(f"publish again after {extra:,} more events: {time.perf_counter() - t:.2f} s, "
              f"{len(second.written)} files written ({second.bytes_written / 1e3:.0f} kB), {second.kept:,} kept")
        size = second.size
        root = book.root(size)
        rng = random.Random(7)
        old_roots = {old: book.root(old) for old in (rng.randint(1, size - 1) for _ in range(50))}
        vkey = notes.Verifier(ORIGIN, notes.SIG_ED25519, signer.public_raw)
        inc, con = proofs_per_second(str(site), size, root, old_roots, args.samples, rng)
        print(f"proofs from the directory (no tile cached between proofs): {inc:,.0f} inclusion/s, "
              f"{con:,.0f} consistency/s")
        started = start_nginx(site, work)
        if started is None:
            print("nginx not installed: HTTP figures skipped")
        else:
            proc, base = started
            try:
                inc, con = proofs_per_second(base, size, root, old_roots, args.samples, rng)
                print(f"proofs over HTTP from nginx: {inc:,.0f} inclusion/s, {con:,.0f} consistency/s")
                t = time.perf_counter()
                source = TileSource(base)
                audit = audit_tiles(source, [vkey], with_events=not args.no_event_audit)
                source.close()
                print(f"full audit from nginx: {time.perf_counter() - t:.1f} s ({audit.tiles:,} tiles, "
                      f"{audit.bundles:,} entry bundles, {audit.events:,} events, {audit.fetched:,} files read)")
            finally:
                os.kill(proc.pid, signal.SIGQUIT)
                proc.wait(timeout=15)
        book.close()


if __name__ == "__main__":
    main()
