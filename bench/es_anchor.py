"""The eventsourcing anchor, run in the benchmark's own virtualenv (.venv-bench).

Appends N events of about 300 bytes to SQLite through an eventsourcing Application,
one event per save and 100 per save, then reads them back; prints JSON figures.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Ledgerish(Aggregate):
        @event("Noted")
        def note(self, i: int, text: str) -> None:
            self.last = i

    results = {}
    for per_save in (1, 100):
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["PERSISTENCE_MODULE"] = "eventsourcing.sqlite"
            os.environ["SQLITE_DBNAME"] = os.path.join(tmp, "es.db")
            app = Application()
            agg = Ledgerish()
            app.save(agg)
            text = "x" * 240  # ~300 bytes per stored event with topic, ids and JSON
            latencies = []
            start = time.perf_counter()
            done = 0
            while done < count:
                for _ in range(per_save):
                    agg.note(done, text)
                    done += 1
                t0 = time.perf_counter()
                app.save(agg)
                latencies.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - start
            results[f"append_{per_save}_per_save_eps"] = count / elapsed
            if per_save == 1:
                latencies.sort()
                results["single_p50_ms"] = latencies[len(latencies) // 2] * 1000
                results["single_p99_ms"] = latencies[int(len(latencies) * 0.99)] * 1000
            else:
                start = time.perf_counter()
                stored = list(app.recorder.select_events(agg.id, limit=count + 10))
                elapsed = time.perf_counter() - start
                assert len(stored) == count + 1
                results["read_back_eps"] = len(stored) / elapsed
                start = time.perf_counter()
                rebuilt = app.repository.get(agg.id)
                results["rebuild_aggregate_eps"] = (count + 1) / (time.perf_counter() - start)
                assert rebuilt.last == count - 1
            app.close()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
