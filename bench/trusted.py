"""What signing only what was verified costs: checkpoints and receipts over re-checked events.

    python bench/trusted.py [--small] [--events N]

Builds a ledger of 100,000 events (``--small``: 10,000) and measures, in one run:

- ``tally verify``'s floor: ``verify_events`` over every event (the full check);
- a checkpoint signed with no stored checkpoint (the tree established from the genesis:
  a full verification, then the signature);
- a checkpoint signed 1,000 events after the last stored one (anchored on it: its key
  events proven, then only the new events verified);
- a receipt for an event under the newest checkpoint (the event re-checked and proven).

Prints the figures and their ratio to the floor; never asserts times.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ledger.keys import Signer  # noqa: E402
from ledger.receipt import build_receipt  # noqa: E402
from ledger.signing import sign_checkpoint  # noqa: E402
from ledger.store import Ledger, NewEvent  # noqa: E402
from ledger.verify import verify_events  # noqa: E402
from runner.events.receipts import WINDOW_RECEIPTS  # noqa: E402

ORIGIN = "bench.tally/trusted"
BATCH = 2000
PLAN = "ab" * 32


def _fill(book: Ledger, signer: Signer, count: int) -> None:
    done = 0
    while done < count:
        step = min(BATCH, count - done)
        book.append_many([NewEvent("window/w", "gate.result", {"gate": "budget", "verdict": "PASS", "evidence": {},
                                                               "plan_sha256": PLAN, "i": done + i})
                          for i in range(step)], signer)
        done += step


def timed(fn: object) -> float:
    began = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--events", type=int, default=None)
    args = parser.parse_args(argv)
    events = args.events or (10_000 if args.small else 100_000)
    signer = Signer.generate("root")
    with tempfile.TemporaryDirectory() as tmp:
        book = Ledger(f"sqlite:///{Path(tmp) / 'bench.db'}")
        book.init(ORIGIN, signer)
        _fill(book, signer, events - 1)
        floor = timed(lambda: verify_events(book.events()))
        first = timed(lambda: sign_checkpoint(book, signer))
        _fill(book, signer, 1000)
        anchored = timed(lambda: sign_checkpoint(book, signer))
        seq = book.size() - 500
        receipt = timed(lambda: build_receipt(book, seq, signer, WINDOW_RECEIPTS))
        size = book.size()
        book.close()
    rows = [
        ("events", f"{size:,}", ""),
        ("verify_events, every event (the floor)", f"{floor:.2f} s", f"{size / floor:,.0f} events/s"),
        ("checkpoint, no stored checkpoint", f"{first:.2f} s", f"{first / floor:.2f} x the floor"),
        ("checkpoint, 1,000 events after a stored one", f"{anchored * 1000:.1f} ms",
         f"{anchored / floor:.3f} x the floor"),
        ("receipt, event under the newest checkpoint", f"{receipt * 1000:.1f} ms",
         f"{receipt / floor:.3f} x the floor"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>12}  note")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>12}  {note}")


if __name__ == "__main__":
    main()
