"""Transparency benchmark: proofs, checkpoints and the cost of keeping the Merkle tree.

    python bench/tlog.py [--small] [--events N] [--db URL_OR_PATH] [--samples K]

Builds a ledger of 1,000,000 events (``--small``: 20,000) in batches, then measures on it:

- inclusion proof generation (from stored subtree hashes) + verification, ms p50/p99
  (target: p50 <= 5 ms on SQLite);
- consistency proof generation + verification, ms p50/p99;
- checkpoint signing (root from stored nodes, consistency with every stored checkpoint,
  Ed25519, insert), ms;
- the append-rate cost of maintaining the tree: batched appends to a ledger with the
  tree against ``Ledger(url, tree=False)``, interleaved rounds (target >= 0.9x).

Prints one table of figures and ratios measured in this run; never asserts times.
``--db`` reuses (or keeps) the big ledger between runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ledger import merkle  # noqa: E402
from ledger.keys import Signer  # noqa: E402
from ledger.signing import sign_checkpoint  # noqa: E402
from ledger.store import Ledger, NewEvent  # noqa: E402

ORIGIN = "bench.tally/tlog"
BATCH = 2000


def payload(i: int) -> dict[str, object]:
    """A wave-sized payload (about 300 bytes of body with the fixed members)."""
    return {"i": i, "start": "s1", "cell": "short-b1", "counters": {"rounds": 1000 + i, "accepted": 2500},
            "note": "x" * 40}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def url_for(target: str) -> str:
    return target if "://" in target else f"sqlite:///{target}"


def build(url: str, events: int, signer: Signer) -> tuple[Ledger, float]:
    """The big ledger (reused when it already has ``events`` events); returns it and the build rate."""
    book = Ledger(url)
    try:
        if book.size() >= events:
            return book, 0.0
    except Exception:  # no schema yet
        pass
    book.init(ORIGIN, signer)
    t = time.perf_counter()
    done = book.size()
    while done < events:
        step = min(BATCH, events - done)
        book.append_many([NewEvent("bench", "bench.wave", payload(done + i)) for i in range(step)], signer)
        done += step
        if done % 100_000 < BATCH:
            print(f"  built {done:,} events", file=sys.stderr, flush=True)
    return book, (events - 1) / (time.perf_counter() - t)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def inclusion(book: Ledger, size: int, root: bytes, samples: int, rng: random.Random) -> dict[str, list[float]]:
    seqs = [rng.randint(1, size) for _ in range(samples)]
    leaves = {seq: merkle.hash_leaf(book.get(seq).raw_hash) for seq in seqs}  # the verifier holds the event
    gen, ver = [], []
    for seq in seqs:
        t = time.perf_counter()
        proof = book.inclusion_proof(seq - 1, size)
        t1 = time.perf_counter()
        merkle.verify_inclusion(seq - 1, size, leaves[seq], proof, root)
        t2 = time.perf_counter()
        gen.append((t1 - t) * 1000)
        ver.append((t2 - t1) * 1000)
    return {"gen": gen, "verify": ver, "total": [a + b for a, b in zip(gen, ver, strict=True)]}


def consistency(book: Ledger, size: int, root: bytes, samples: int, rng: random.Random) -> dict[str, list[float]]:
    olds = [rng.randint(1, size - 1) for _ in range(samples)]
    roots = {old: book.root(old) for old in olds}  # the verifier holds the old checkpoint
    gen, ver = [], []
    for old in olds:
        t = time.perf_counter()
        proof = book.consistency_proof(old, size)
        t1 = time.perf_counter()
        merkle.verify_consistency(old, size, roots[old], root, proof)
        t2 = time.perf_counter()
        gen.append((t1 - t) * 1000)
        ver.append((t2 - t1) * 1000)
    return {"gen": gen, "verify": ver, "total": [a + b for a, b in zip(gen, ver, strict=True)]}


def checkpoints(book: Ledger, signer: Signer, rounds: int) -> dict[str, float]:
    """Sign ``rounds`` checkpoints, appending a batch before each; ms for the first and the last."""
    times = []
    for i in range(rounds):
        book.append_many([NewEvent("bench", "bench.wave", payload(i)) for _ in range(10)], signer)
        times.append(timed(lambda: sign_checkpoint(book, signer)))
    stored = len(book.checkpoint_notes())
    root_ms = statistics.median(timed(lambda: book.root(book.size())) for _ in range(20))
    return {"first_ms": times[0], "last_ms": times[-1], "median_ms": statistics.median(times),
            "stored": stored, "root_ms": root_ms}


def append_cost(events: int, rounds: int, signer: Signer, tmp: Path) -> dict[str, float]:
    """Batched append rate with and without the tree, interleaved rounds on fresh SQLite files."""
    rates: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for tree in (True, False) if r % 2 == 0 else (False, True):
            book = Ledger(f"sqlite:///{tmp / f'append-{r}-{tree}.db'}", tree=tree)
            book.init(ORIGIN, signer)
            batches = [[NewEvent("bench", "bench.wave", payload(b * BATCH + i)) for i in range(BATCH)]
                       for b in range(events // BATCH)]
            t = time.perf_counter()
            for batch in batches:
                book.append_many(batch, signer)
            rates[tree].append(events / (time.perf_counter() - t))
            book.close()
    return {"with_tree": statistics.median(rates[True]), "without_tree": statistics.median(rates[False])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI smoke: 20,000 events, fewer samples")
    parser.add_argument("--events", type=int, help="ledger size (default 1,000,000; 20,000 with --small)")
    parser.add_argument("--db", help="URL or SQLite path for the big ledger (reused if it is big enough)")
    parser.add_argument("--samples", type=int, help="proofs per kind (default 2,000; 300 with --small)")
    args = parser.parse_args(argv)
    events = args.events or (20_000 if args.small else 1_000_000)
    samples = args.samples or (300 if args.small else 2_000)
    rng = random.Random(4103)
    signer = Signer.generate("root")
    with tempfile.TemporaryDirectory(prefix="tally-bench-tlog-") as tmp_name:
        tmp = Path(tmp_name)
        url = url_for(args.db) if args.db else f"sqlite:///{tmp / 'big.db'}"
        if args.db:  # a kept ledger has its own root key; use a fresh one only for a new ledger
            key_path = Path(args.db + ".key.pem") if "://" not in args.db else None
            if key_path is not None and key_path.exists():
                from ledger.keys import load_signer

                signer = load_signer(key_path)
            elif key_path is not None:
                key_path.write_bytes(signer.private_pem())
                key_path.chmod(0o600)  # tally refuses a private key open to group or others
        t = time.perf_counter()
        book, build_rate = build(url, events, signer)
        build_s = time.perf_counter() - t
        size = book.size()
        signed = sign_checkpoint(book, signer)
        root = signed.checkpoint.root
        inc = inclusion(book, size, root, samples, rng)
        con = consistency(book, size, root, samples, rng)
        cps = checkpoints(book, signer, 5 if args.small else 20)
        cost = append_cost(10_000 if args.small else 100_000, 2 if args.small else 4, signer, tmp)
        book.close()

    backend = url.split(":", 1)[0]
    print(f"tlog benchmark: {size:,} events ({backend}); built in {build_s:.1f} s"
          + (f" ({build_rate:,.0f} events/s)" if build_rate else " (reused)"))
    print(f"{'figure':<48}{'p50':>10}{'p99':>10}")
    for label, data in (("inclusion proof", inc), ("consistency proof", con)):
        for part in ("gen", "verify", "total"):
            name = {"gen": "generate (stored nodes)", "verify": "verify", "total": "generate + verify"}[part]
            print(f"  {label + ' ' + name + ', ms':<46}{pct(data[part], 0.5):>10.3f}{pct(data[part], 0.99):>10.3f}")
    print(f"  {'checkpoint sign (first / last), ms':<46}{cps['first_ms']:>10.2f}{cps['last_ms']:>10.2f}")
    print(f"  {'  of which root at current size, ms':<46}{cps['root_ms']:>10.3f}")
    print(f"  {'  stored checkpoints checked at the last one':<46}{cps['stored']:>10}")
    print(f"  {'append with tree / without, events/s':<46}{cost['with_tree']:>10,.0f}{cost['without_tree']:>10,.0f}")
    ratio = cost["with_tree"] / cost["without_tree"]
    p50 = pct(inc["total"], 0.5)
    print(f"ratios: inclusion p50 {p50:.3f} ms vs target 5 ms ({'met' if p50 <= 5 else 'MISSED'}); "
          f"append with tree / without {ratio:.3f}x vs target 0.9x ({'met' if ratio >= 0.9 else 'MISSED'})")


if __name__ == "__main__":
    main(sys.argv[1:])
