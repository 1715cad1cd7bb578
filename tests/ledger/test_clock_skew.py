"""Clock skew between appenders on one ledger: one ledger, one clock (docs/deploy.md, clocks).

Two machines append to one PostgreSQL ledger with clocks twenty minutes apart (each
``Ledger`` given a skewed machine clock, as ``Ledger(clock=...)`` allows). Their events'
times come from the database server's clock: close to real time, in seq order, whoever
appended; ``Ledger.now`` reads that clock on both. On SQLite (a file on one machine) the
machine's clock is the ledger's, so skewed appenders record skewed times: the verifier
neither rejects nor accepts on time order (the format defines none).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from ledger.event import member_problem
from ledger.keys import Signer, key_entry
from ledger.store import Ledger
from ledger.stored import verify_ledger
from runner.execution.clock import parse_time

SKEW = timedelta(minutes=10)


def skewed(offset: timedelta) -> Callable[[], datetime]:
    return lambda: datetime.now(UTC) + offset


def two_appenders(url: str) -> tuple[Ledger, Ledger, Signer, Signer]:
    """Machine A (clock 10 min ahead) creates the ledger; machine B (10 min behind) appends with its own key."""
    a_key, b_key = Signer.generate("a"), Signer.generate("b")
    ahead = Ledger(url, clock=skewed(SKEW))
    ahead.init("tally.test/clocks", a_key)
    ahead.append("ledger", "key.added", key_entry(b_key.public_raw, "b", ["signer"]), a_key)
    behind = Ledger.open(url, clock=skewed(-SKEW))
    return ahead, behind, a_key, b_key


def interleave(ahead: Ledger, behind: Ledger, a_key: Signer, b_key: Signer, rounds: int = 5) -> None:
    for i in range(rounds):
        ahead.append("notes", "note.added", {"by": "a", "i": i}, a_key)
        behind.append("notes", "note.added", {"by": "b", "i": i}, b_key)


def test_two_appenders_with_skewed_clocks_record_one_clock_on_postgresql(pg_url: str) -> None:
    began = datetime.now(UTC)
    ahead, behind, a_key, b_key = two_appenders(pg_url)
    interleave(ahead, behind, a_key, b_key)
    ended = datetime.now(UTC)
    events = list(ahead.events())
    times = [parse_time(e.time) for e in events]
    assert {e.actor for e in events} == {a_key.id, b_key.id}
    assert times == sorted(times)  # in seq order, whichever machine appended (the server's clock, under the lock)
    slack = timedelta(seconds=5)  # the server runs on this machine: its clock is the real one here
    assert all(began - slack <= t <= ended + slack for t in times), (began, times, ended)
    assert all(member_problem("time", e.time) is None for e in events)
    assert verify_ledger(ahead).verified.size == len(events)
    # Both machines read the ledger's clock alike, twenty minutes of skew between them notwithstanding.
    assert abs(ahead.now() - behind.now()) < timedelta(seconds=2)
    assert abs(behind.now() - datetime.now(UTC)) < slack


def test_ledger_now_follows_the_server_between_appends(pg_url: str) -> None:
    ahead, behind, a_key, _ = two_appenders(pg_url)
    first = behind.now()  # read from the server (no append by this Ledger yet)
    ahead.append("notes", "note.added", {"i": 1}, a_key)
    stored = parse_time(ahead.get(ahead.size()).time)
    second = behind.now()
    assert first <= stored + timedelta(seconds=1) and second >= stored - timedelta(seconds=1)
    assert second >= first  # monotonic between readings, whatever the machine's wall clock does


def test_skewed_appenders_on_sqlite_verify_although_times_go_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tally.db'}"
    ahead, behind, a_key, b_key = two_appenders(url)
    interleave(ahead, behind, a_key, b_key, rounds=2)
    events = list(ahead.events())
    times = [parse_time(e.time) for e in events]
    assert any(later < earlier for earlier, later in pairwise(times))  # the clock went back
    assert verify_ledger(ahead).verified.size == len(events)  # no verification rule compares times
    assert abs(behind.now() - (datetime.now(UTC) - SKEW)) < timedelta(seconds=5)  # SQLite: the machine's clock


@pytest.mark.parametrize("offset", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_skewed_machine_clock_is_not_the_postgresql_ledgers(pg_url: str, offset: timedelta) -> None:
    key = Signer.generate("root")
    book = Ledger(pg_url, clock=skewed(offset))
    event = book.init("tally.test/clock", key)
    assert abs(parse_time(event.time) - datetime.now(UTC)) < timedelta(seconds=5)
