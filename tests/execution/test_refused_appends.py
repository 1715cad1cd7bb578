"""When the ledger refuses appends: retried within bounds, production restored first, nothing lost or doubled.

The window is seed 000's controlled window cut down (tests/execution/faults.py, ``tiny_win2``)
on the simulator, whose host is the ground truth for "production serves". The ledger is the
harness's ``FaultyLedger``: it refuses appends as SQLite does under a lock held past the busy
timeout or on a full disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import ExternalError
from ledger.keys import generate_key_file
from ledger.store import Ledger, NewEvent
from ledger.stored import verify_ledger
from runner.audit.full import run_audit
from runner.execution.appends import Appender
from runner.gates.admission import admit
from runner.state.replay import replay

from .faults import Append, FaultyLedger, runner_for, tiny_win2
from .worlds import close, gate_all, window, world

WINDOW = "refused"
RESTORE_RECORD = Append("restore", ("host.action:restore:finished", "restore.finished"))


@pytest.fixture
def w(tmp_path: Path) -> Iterator[Any]:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=tiny_win2)])
    try:
        gate_all(w)
        admit(w.book, w.root, WINDOW)
        yield w
    finally:
        close(w)


def _events(w: Any, type_: str | None = None) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[type_] if type_ else None)]


def _serves(w: Any) -> bool:
    host = w.sim.state()
    return host["production"] == "up" and bool((host["engine"] or {}).get("production"))


def _audited(w: Any) -> None:
    assert verify_ledger(w.book).verified.size == w.book.size()
    audit = run_audit(book=w.book)
    assert audit.ok, audit.lines()


def test_a_restore_whose_record_the_ledger_refuses_is_reprobed_and_redone_on_resume(w: Any) -> None:
    book = FaultyLedger(w.book, RESTORE_RECORD, "refuse_forever")
    with pytest.raises(ExternalError, match=r"the ledger refused \d+ event\(s\) \(host.action, restore.finished"):
        runner_for(book, w.root, WINDOW, w.driver, w.time_scale).run()
    assert _serves(w)                       # the restore ran: production serves, though the ledger cannot say so
    ws = replay(w.book).windows[WINDOW]
    (open_restore,) = [aid for aid, info in ws.open_actions.items() if info.action == "restore"]
    assert ws.ending is None and ws.restore is None
    result = runner_for(w.book, w.root, WINDOW, w.driver, w.time_scale).run(resume=True)
    assert result.ending == "restored" and result.decision is not None
    probes = [a for a in _events(w, "host.action") if a["action"] == "probe" and a["phase"] == "finished"]
    started = [a for a in _events(w, "host.action") if a["action"] == "restore" and a["phase"] == "started"]
    (probe,) = [a for a in probes if a.get("probe_of") == open_restore]    # the open restore re-probed,
    assert probe["detail"]["serving"] == "up" and len(started) == 2          # then redone
    assert [r["status"] for r in _events(w, "restore.finished")] == ["ok"]
    assert _serves(w)
    _audited(w)


def test_the_ledger_refusing_for_a_while_ends_the_window_by_restoring_and_records_it_all(w: Any) -> None:
    """The in-process path: the hold.opened append is refused past the retries; the runner ends the window
    from memory (restore first) and records everything, in order, once the ledger takes appends again."""
    book = FaultyLedger(w.book, Append("hold_open", ("hold.opened",)), "refuse", failures=6)
    result = runner_for(book, w.root, WINDOW, w.driver, w.time_scale).run()
    assert _serves(w) and result.ending == "restored" and result.decision is not None
    types = [e.type for e in w.book.events(stream=f"window/{WINDOW}")]
    at = types.index("hold.opened")
    assert types[at + 1] == "window.interrupted"     # recorded late, in the order it happened
    (refused,) = [e for e in _events(w, "window.interrupted") if e["detail"].get("append_failed")]
    assert refused["detail"]["step"] == "hold_open" and "database is locked" in refused["detail"]["error"]
    assert [e["reason"] for e in _events(w, "measurement.ended")] == ["failed"]
    assert "restore.finished" in types[at:] and types.count("hold.opened") == 1
    _audited(w)


def test_a_drain_whose_start_the_ledger_refuses_does_not_run(w: Any) -> None:
    book = FaultyLedger(w.book, Append("drain", ("host.action:drain:started",)), "refuse", failures=6)
    result = runner_for(book, w.root, WINDOW, w.driver, w.time_scale).run()
    assert "drain" not in [a["action"] for a in w.sim.state()["actions"]] and _serves(w)
    (drain,) = [a for a in _events(w, "host.action") if a["action"] == "drain" and a["phase"] == "finished"]
    assert drain["ok"] is False and drain["detail"]["not_run"] is True
    assert result.ending == "aborted"          # and nothing to restore: the ledger proves the drain never ran
    assert _events(w, "window.closed")[0]["summary"] == "ABORTED before touching production: nothing to restore"
    _audited(w)


class _CommitsThenFails:
    """A ledger whose first append commits, then reports a failure (a commit whose answer was lost)."""

    def __init__(self, book: Ledger) -> None:
        self.book, self.calls = book, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.book, name)

    def append_many(self, items: Any, signer: Any) -> Any:
        self.calls += 1
        stored = self.book.append_many(items, signer)
        if self.calls == 1:
            raise ExternalError("database did not answer: connection lost at commit")
        return stored


def test_an_append_that_committed_although_the_database_said_it_failed_is_not_appended_twice(tmp_path: Path) -> None:
    signer = generate_key_file(tmp_path / "root.pem", "root")
    book = Ledger(f"sqlite:///{tmp_path / 'tally.db'}")
    try:
        book.init("tally.test/appends", signer)
        flaky = _CommitsThenFails(book)
        appender = Appender(flaky, signer, floor=book.size(), backoff_s=(0.0,))   # type: ignore[arg-type]
        events = [NewEvent("test", "test.event", {"n": n}, ()) for n in range(3)]
        landing = appender.append(events)
        assert not landing.deferred and [e.payload["n"] for e in landing.stored] == [0, 1, 2]
        assert [e.payload.get("n") for e in book.events(types=["test.event"])] == [0, 1, 2]   # once, not twice
        assert flaky.calls == 1 and appender.refusals == 1
    finally:
        book.close()


def test_inside_the_hold_an_action_whose_start_is_refused_still_runs_before_the_restore(w: Any) -> None:
    """The ledger shows the HOLD: the window has touched the hosts, so the experiment's engine is stopped
    (its record held) before production is restored, as in any ending."""
    book = FaultyLedger(w.book, Append("end_start", ("host.action:stop_arm:started",)), "refuse", failures=6)
    result = runner_for(book, w.root, WINDOW, w.driver, w.time_scale).run()
    assert _serves(w) and result.ending == "restored" and result.decision is not None
    ran = [a["action"] for a in w.sim.state()["actions"]]
    assert ran.index("stop_arm") < ran.index("restore")
    (stopped,) = [a for a in _events(w, "host.action") if a["action"] == "stop_arm" and a["phase"] == "finished"]
    assert stopped["ok"] is True and "not_run" not in stopped["detail"]
    _audited(w)
