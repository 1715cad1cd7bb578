"""Concurrent appenders (processes and threads, SQLite and PostgreSQL) never fork, gap or lose."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from ledger.keys import Signer, generate_key_file, key_entry, load_signer
from ledger.store import Ledger, NewEvent
from ledger.stored import verify_ledger

PROCESSES = 4
APPENDS = 250


def _appender(url: str, key_path: str, worker: int, count: int) -> None:
    book = Ledger.open(url)
    signer = load_signer(key_path)
    for i in range(count):
        book.append(f"worker/{worker}", "load.appended", {"worker": worker, "i": i}, signer)
    book.close()


def _run_processes(url: str, tmp_path: Path) -> Ledger:
    root = generate_key_file(tmp_path / "root.pem", "root")
    book = Ledger(url)
    book.init("tally.test/concurrency", root)
    # Each "host" signs with its own key, added by the root key (docs/deploy.md).
    paths = []
    for worker in range(PROCESSES):
        signer = generate_key_file(tmp_path / f"host{worker}.pem", f"host{worker}")
        book.append("ledger", "key.added", key_entry(signer.public_raw, f"host{worker}", ["signer"]), root)
        paths.append(str(tmp_path / f"host{worker}.pem"))
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_appender, args=(url, paths[w], w, APPENDS)) for w in range(PROCESSES)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0
    return book


def _assert_complete(book: Ledger, first: int) -> None:
    events = list(book.events(first - 1))
    appended = [e for e in events if e.type == "load.appended"]
    assert [e.seq for e in events] == list(range(first, first + len(events)))
    assert len(appended) == PROCESSES * APPENDS
    seen = {(e.payload["worker"], e.payload["i"]) for e in appended}
    assert seen == {(w, i) for w in range(PROCESSES) for i in range(APPENDS)}
    for worker in range(PROCESSES):  # each appender's own events keep their order
        mine = [e.payload["i"] for e in appended if e.payload["worker"] == worker]
        assert mine == list(range(APPENDS))
    report = verify_ledger(book, jobs=2)
    assert report.verified.size == first - 1 + PROCESSES * APPENDS


def test_processes_on_sqlite_file(tmp_path: Path) -> None:
    book = _run_processes(f"sqlite:///{tmp_path / 'tally.db'}", tmp_path)
    _assert_complete(book, first=2 + PROCESSES)


@pytest.mark.postgres
def test_processes_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    book = _run_processes(pg_url, tmp_path)
    _assert_complete(book, first=2 + PROCESSES)


@pytest.mark.parametrize("backend", ["sqlite-file", "postgres"])
def test_threads_sharing_and_not_sharing_a_handle(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}" if backend == "sqlite-file" else request.getfixturevalue("pg_url")
    root = Signer.generate("root")
    shared = Ledger(url)
    shared.init("tally.test/threads", root)
    errors: list[BaseException] = []

    def work(book: Ledger, tag: int) -> None:
        try:
            for i in range(40):
                if i % 4 == 0:
                    book.append_many([NewEvent("t", "load.batch", {"t": tag, "i": i, "j": j}) for j in range(3)], root)
                else:
                    book.append("t", "load.single", {"t": tag, "i": i}, root)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    handles = [shared, shared, Ledger.open(url), Ledger.open(url)]
    threads = [threading.Thread(target=work, args=(h, n)) for n, h in enumerate(handles)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert shared.size() == 1 + 4 * (30 + 10 * 3)
    assert verify_ledger(shared).verified.size == shared.size()
