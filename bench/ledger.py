"""Ledger core benchmark: the floor, the eventsourcing anchor, and tally, in one run.

    python bench/ledger.py [--small]

Prints a table of figures and the ratios the issue targets. Never asserts times.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ledger.keys import Signer  # noqa: E402
from ledger.store import Ledger, NewEvent  # noqa: E402
from ledger.verify import check_chain, verify_events  # noqa: E402


def payload(i: int) -> dict[str, object]:
    """About 300 bytes of JCS body in total with the event's fixed members."""
    return {"i": i, "start": "s1", "cell": "short-b1", "counters": {"rounds": 1000 + i, "accepted": 2500},
            "note": "x" * 40}


def floor(n: int) -> dict[str, float]:
    signer = Signer.generate()
    public = signer.private.public_key()
    message = os.urandom(32)
    t = time.perf_counter()
    sigs = [signer.private.sign(message) for _ in range(n)]
    sign_rate = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for sig in sigs:
        public.verify(sig, message)
    verify_rate = n / (time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(os.path.join(tmp, "raw.db"))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        rows = [("x" * 300,) for _ in range(n * 4)]
        t = time.perf_counter()
        conn.executemany("INSERT INTO t (body) VALUES (?)", rows)
        conn.commit()
        insert_rate = len(rows) / (time.perf_counter() - t)
        conn.close()
    return {"sign_per_s": sign_rate, "verify_per_s": verify_rate, "sqlite_insert_per_s": insert_rate}


def anchor(n: int) -> dict[str, float] | None:
    python = REPO / ".venv-bench" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(REPO / ".venv-bench")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "eventsourcing"], check=True)
    proc = subprocess.run([str(python), str(REPO / "bench" / "es_anchor.py"), str(n)], capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(proc.stdout)
    return result


def cli_startup(runs: int) -> float:
    tally = Path(sys.executable).with_name("tally")
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([str(tally), "--version"], check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def tally_figures(n_batch: int, n_single: int, n_verify: int) -> dict[str, float]:
    out: dict[str, float] = {}
    root = Signer.generate("root")
    with tempfile.TemporaryDirectory() as tmp:
        book = Ledger(f"sqlite:///{tmp}/b.db")
        book.init("bench/ledger", root)
        batches = [[NewEvent("window/w1", "wave.measured", payload(b * 1000 + i)) for i in range(1000)]
                   for b in range(max(1, n_batch // 1000))]
        t = time.perf_counter()
        for batch in batches:
            book.append_many(batch, root)
        out["batched_append_per_s"] = sum(map(len, batches)) / (time.perf_counter() - t)
        lat = []
        for i in range(n_single):
            t = time.perf_counter()
            book.append("notes", "note.added", payload(i), root)
            lat.append(time.perf_counter() - t)
        out["single_append_per_s"] = n_single / sum(lat)
        lat.sort()
        out["single_p50_ms"] = lat[len(lat) // 2] * 1000
        out["single_p99_ms"] = lat[int(len(lat) * 0.99)] * 1000
        book.close()

        book = Ledger(f"sqlite:///{tmp}/v.db")
        book.init("bench/verify", root)
        for start in range(0, n_verify, 5000):
            book.append_many([NewEvent("s", "x.y", payload(start + i)) for i in range(5000)], root)
        size = book.size()
        t = time.perf_counter()
        check_chain(book.rows())
        out["replay_per_s"] = size / (time.perf_counter() - t)
        for jobs in (1, 2):
            t = time.perf_counter()
            verify_events(book.events(), jobs=jobs)
            out[f"verify_jobs{jobs}_per_s"] = size / (time.perf_counter() - t)
        out["verify_events"] = size
        book.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="CI smoke: small N, seconds")
    args = parser.parse_args(argv)
    small = args.small
    f = floor(2000 if small else 20000)
    a = anchor(2000 if small else 20000)
    startup = cli_startup(3 if small else 10)
    t = tally_figures(2000 if small else 20000, 100 if small else 1000, 5000 if small else 100_000)
    rows = [
        ("floor: Ed25519 sign/s (32 B)", f["sign_per_s"]),
        ("floor: Ed25519 verify/s (32 B)", f["verify_per_s"]),
        ("floor: raw sqlite3 inserts/s (300 B, 1 txn)", f["sqlite_insert_per_s"]),
        ("tally --version wall s (median)", startup),
        ("tally batched append ev/s (1,000/txn)", t["batched_append_per_s"]),
        ("tally durable single append ev/s", t["single_append_per_s"]),
        ("tally single append p50 ms", t["single_p50_ms"]),
        ("tally single append p99 ms", t["single_p99_ms"]),
        (f"tally replay ev/s ({t['verify_events']:.0f} events)", t["replay_per_s"]),
        ("tally verify ev/s, 1 job", t["verify_jobs1_per_s"]),
        ("tally verify ev/s, --jobs 2", t["verify_jobs2_per_s"]),
    ]
    if a:
        rows += [
            ("eventsourcing append ev/s, 1 per save", a["append_1_per_save_eps"]),
            ("eventsourcing append ev/s, 100 per save", a["append_100_per_save_eps"]),
            ("eventsourcing single save p50 ms", a["single_p50_ms"]),
            ("eventsourcing read-back ev/s", a["read_back_eps"]),
        ]
    print("\nLedger core benchmark" + (" (small smoke)" if small else ""))
    for name, value in rows:
        print(f"  {name:<46} {value:>12,.3f}" if value < 10 else f"  {name:<46} {value:>12,.0f}")
    ratios = [
        ("batched append / sign floor", t["batched_append_per_s"] / f["sign_per_s"], 0.7),
        ("full verify (1 job) / verify floor", t["verify_jobs1_per_s"] / f["verify_per_s"], 0.85),
        ("verify --jobs 2 / one-core verify floor", t["verify_jobs2_per_s"] / f["verify_per_s"], 1.6),
        ("tally --version <= 0.4 s (value in s)", startup, 0.4),
    ]
    if a:
        ratios += [
            ("batched append / eventsourcing 100-per-save", t["batched_append_per_s"] / a["append_100_per_save_eps"],
             0.6),
            ("single append / eventsourcing single save", t["single_append_per_s"] / a["append_1_per_save_eps"], 1.0),
            ("replay / eventsourcing read-back", t["replay_per_s"] / a["read_back_eps"], 1.0),
        ]
    print("\nRatios (target)")
    for name, value, target in ratios:
        ok = value <= target if "<=" in name else value >= target
        print(f"  {name:<46} {value:>8.2f}   target {'<=' if '<=' in name else '>='} {target}  "
              f"{'met' if ok else 'NOT met'}")
    return {**f, **t, "startup_s": startup, **({f"es_{k}": v for k, v in a.items()} if a else {})}


if __name__ == "__main__":
    main()
