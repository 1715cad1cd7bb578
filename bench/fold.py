"""Fold rate and audit time on 100,000 window events.

Builds a ledger of scripted windows (chains of two windows: chained close, then the
chain's last window with restore, watch and marker clearing; ~180 events per chain, 43%
of them ``wave.measured``), then measures:

* fold of fresh in-memory events (payload JSON parsed during the fold), events/s;
* the same read back from a SQLite ledger (``Ledger.events()`` + fold), events/s;
* one incremental step: ``fold(state, [one new event])`` on the full state vs a small
  state (copy-on-write: O(new events), not O(ledger));
* the protocol audit (every invariant) over the same events.

Usage: ``python bench/fold.py [--small] [--events N] [--no-db]``. ``--small`` runs 5,000
events (seconds); it prints figures and never asserts times.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledger.canonical import blob_references, canonical  # noqa: E402
from ledger.event import Event, format_time  # noqa: E402
from runner.audit.invariants import audit_report  # noqa: E402
from runner.plan.model import plan_sha256  # noqa: E402
from runner.state.fold import fold  # noqa: E402
from tests.runner.script import BASE_TIME, Script  # noqa: E402  (the scripted windows of the tests)

TARGET_RATE = 50_000


def _template() -> tuple[list[Event], dict[str, str]]:
    script = Script()
    plans = script.chain(2)
    return script.materialize(), {p.window_id: p.sha256 for p in plans}


def _template_blobs() -> dict[str, Any]:
    """The blobs the template's events refer to (a ledger refuses a reference to a blob it lacks)."""
    script = Script()
    script.chain(2)
    return {blob.sha256: blob for item in script.items for blob in item.blobs}


def build_events(count: int) -> list[Event]:
    """``count`` (or a little more, whole chains) events: the template chain replicated under new ids."""
    template, shas = _template()
    rows: list[tuple[str, str, str]] = []  # stream, type, payload_json
    replica = 0
    while len(rows) < count:
        replica += 1
        renames = {old: f"r{replica:05d}-{old}" for old in shas}
        new_shas: dict[str, str] = {}
        for event in template:
            text = event.payload_json
            for old, new in renames.items():
                text = text.replace(f'"{old}', f'"{new}')
            stream = event.stream
            for old, new in renames.items():
                if stream == f"window/{old}":
                    stream = f"window/{new}"
            if event.type == "window.registered":
                payload = json.loads(text)
                sha = plan_sha256(payload["plan"])
                new_shas[shas[next(o for o, n in renames.items() if n == payload["window"])]] = sha
                payload["plan_sha256"] = sha
                text = canonical(payload).decode()
            for old_sha, new_sha in new_shas.items():
                text = text.replace(old_sha, new_sha)
            rows.append((stream, event.type, text))
    events = []
    prev = "0" * 64
    for seq, (stream, type_, text) in enumerate(rows, 1):
        event = Event("ab" * 16, seq, prev, stream, type_, format_time(BASE_TIME), "00" * 32, text, "", "")
        event = replace(event, hash=hashlib.sha256(event.body()).hexdigest())
        events.append(event)
        prev = event.hash
    return events


def fresh(events: list[Event]) -> list[Event]:
    """Copies whose payloads are not parsed yet (``Event.payload`` caches the parse)."""
    return [replace(e) for e in events]


def timed(fn, *args):  # type: ignore[no-untyped-def]
    gc.collect()
    began = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - began


def ledger_fold(events: list[Event]) -> tuple[float, float, float]:
    """Append the events to a SQLite ledger, then time read-only and read + fold."""
    from ledger.keys import Signer
    from ledger.store import Ledger, NewEvent

    with tempfile.TemporaryDirectory() as tmp:
        book = Ledger(f"sqlite:///{tmp}/bench.db")
        signer = Signer.generate("bench")
        book.init("tally.bench/fold", signer)
        blobs = _template_blobs()
        stored: set[str] = set()
        items = []
        for e in events:
            payload = json.loads(e.payload_json)
            wanted = [name for name in blob_references(payload) if name not in stored]
            stored.update(wanted)
            items.append(NewEvent(e.stream, e.type, payload, tuple(blobs[name] for name in wanted)))
        began = time.perf_counter()
        for i in range(0, len(items), 2000):
            book.append_many(items[i:i + 2000], signer)
        build = time.perf_counter() - began
        _, read = timed(lambda: sum(1 for _ in book.events()))
        _, both = timed(lambda: fold(None, book.events()))
        book.close()
    return build, read, both


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="5,000 events (CI smoke)")
    parser.add_argument("--events", type=int, default=None, help="number of events (default 100,000)")
    parser.add_argument("--no-db", action="store_true", help="skip the SQLite ledger part")
    args = parser.parse_args(argv)
    count = args.events or (5_000 if args.small else 100_000)

    events, build_s = timed(build_events, count)
    n = len(events)
    waves = sum(1 for e in events if e.type == "wave.measured")
    windows = sum(1 for e in events if e.type == "window.registered")

    state, fold_s = timed(fold, None, fresh(events))
    _, fold_again_s = timed(fold, None, fresh(events))

    extra = events[len(events) // 2]
    small = fold(None, events[:200])
    reps = 2000
    _, step_big = timed(lambda: [fold(state, [extra]) for _ in range(reps)])
    _, step_small = timed(lambda: [fold(small, [extra]) for _ in range(reps)])

    report, audit_s = timed(audit_report, fresh(events))

    rows = [
        ("events", f"{n:,}", f"{windows:,} windows, {waves:,} wave.measured"),
        ("build (setup, not measured)", f"{build_s:.2f} s", ""),
        ("fold, fresh events (payloads from JSON)", f"{fold_s:.3f} s", f"{n / fold_s:,.0f} events/s "
                                                               f"({n / fold_s / TARGET_RATE:.1f}x the 50,000 target)"),
        ("fold, second run", f"{fold_again_s:.3f} s", f"{n / fold_again_s:,.0f} events/s"),
        ("incremental step, full state", f"{step_big / reps * 1e6:.1f} us", f"1 new event on {len(state.windows):,} "
                                                                            f"windows"),
        ("incremental step, small state", f"{step_small / reps * 1e6:.1f} us", f"1 new event on "
                                                                               f"{len(small.windows)} windows"),
        ("audit (every invariant)", f"{audit_s:.3f} s", f"{n / audit_s:,.0f} events/s; {len(report.violations)} "
                                                        f"violations"),
    ]
    if not args.no_db:
        db_build, read_s, both_s = ledger_fold(events)
        rows += [
            ("SQLite ledger append (setup)", f"{db_build:.2f} s", f"{n / db_build:,.0f} events/s"),
            ("SQLite read only", f"{read_s:.3f} s", f"{n / read_s:,.0f} events/s"),
            ("SQLite read + fold", f"{both_s:.3f} s", f"{n / both_s:,.0f} events/s "
                                                      f"({n / both_s / TARGET_RATE:.1f}x the target)"),
        ]
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>12}  note")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>12}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
