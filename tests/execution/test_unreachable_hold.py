"""``allow_unreachable`` in the HOLD: a per-host step that cannot reach a host the site lets the
window's mode lose is recorded and passed; any other host's failure fails as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.errors import ExternalError
from runner.audit.full import run_audit
from runner.drivers.base import PER_HOST_ACTIONS, ActionResult
from runner.execution.window import WindowRunner
from runner.gates.admission import admit
from runner.gates.chain import run_prev_ok

from .worlds import close, gate_all, state, window, world

BOTH_MODES = {"production-policy": ("sim-worker",), "controlled": ("sim-worker",)}


class _Lost:
    """The site, but per-host actions on ``host`` get no answer: the site cannot reach it
    (``ExternalError``, an ssh that hangs up) or the action times out."""

    def __init__(self, driver: Any, allowed: dict[str, tuple[str, ...]], host: str = "sim-worker",
                 how: str = "unreachable") -> None:
        self._driver = driver
        self.allow_unreachable = allowed
        self.lost = {host} if how != "both" else {"sim-head", "sim-worker"}
        self.how = how
        self.calls: list[tuple[str, str | None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def run(self, action: str, host: str | None, params: Any) -> ActionResult:
        self.calls.append((action, host))
        if host in self.lost and action in PER_HOST_ACTIONS:
            if self.how == "timeout":
                return ActionResult(action, host, False, None, 30.0, True, b"", b"timed out", {"error": "timed out"})
            if self.how == "refuses":   # it answers: a failure, which claims (as a hostile site might) to be passable
                return ActionResult(action, host, False, 1, 0.1, False, b"", b"refused",
                                    {"error": "refused", "unreachable": True, "unreachable_allowed": True})
            raise ExternalError(f"ssh: connect to host {host} port 22: No route to host")
        return self._driver.run(action, host, params)


def _worlds(tmp_path: Path, last: bool = False) -> Any:
    return world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                            window("seed000-controlled.toml", "chain-b", chain="last" if last else "chained")])


def _finished(w: Any, window_id: str, host: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{window_id}", types=["host.action"])
            if e.payload["phase"] == "finished" and e.payload["host"] == host]


def test_a_lost_worker_the_mode_allows_is_recorded_and_the_chained_close_goes_on(tmp_path: Path) -> None:
    for how in ("unreachable", "timeout"):
        w = _worlds(tmp_path / how)
        try:
            gate_all(w)
            admit(w.book, w.root, "chain-a")
            lost = _Lost(w.driver, BOTH_MODES, how=how)
            result = WindowRunner(w.book, w.root, "chain-a", lost, time_scale=w.time_scale).run()   # type: ignore[arg-type]
            assert result.ending == "chained", result
            tried = sorted({a for a, h in lost.calls if h == "sim-worker"})
            assert tried == ["fence", "placeholder_proof", "placeholder_up"]   # each per-host step of the close, once
            records = _finished(w, "chain-a", "sim-worker")
            assert len(records) == 3 and all(r["ok"] is False and r["detail"]["unreachable_allowed"] is True
                                             for r in records)
            assert all(r["ok"] for r in _finished(w, "chain-a", "sim-head"))
            s = state(w.book)
            assert set(s.placeholders) == {"sim-head"} and s.production == "down" and s.hold is None
            assert s.windows["chain-a"].unreachable_allowed == ("sim-worker",)
            assert run_audit(book=w.book).ok
        finally:
            close(w)


def test_without_the_allowance_a_lost_worker_blocks_the_close_as_before(tmp_path: Path) -> None:
    """Blocked after 3 attempts (placeholder_up once retried without end, appending 60,000 events)."""
    w = _worlds(tmp_path)
    try:
        gate_all(w)
        admit(w.book, w.root, "chain-a")
        lost = _Lost(w.driver, {"controlled": ("sim-worker",)})   # another mode's allowance does not count
        result = WindowRunner(w.book, w.root, "chain-a", lost, time_scale=w.time_scale).run()   # type: ignore[arg-type]
        assert result.ending is None and "placeholder_up failed 3 times" in (result.blocked or ""), result
        records = _finished(w, "chain-a", "sim-worker")
        assert len(records) == 3 and not any("unreachable_allowed" in r["detail"] for r in records)
        assert records[0]["detail"]["unreachable"] is True
        s = state(w.book)
        assert s.hold is not None and s.hold.owner == "chain-a"   # the HOLD stays ours: escalate
    finally:
        close(w)


def test_only_no_answer_from_an_allowed_host_is_passed(tmp_path: Path) -> None:
    """The head (not allowed) lost; the allowed worker answering with a failure, its facts claiming to be
    unreachable (a site cannot pass its own failed step); every host lost (a chain cannot leave production
    down holding nothing): each blocks the close, the HOLD ours."""
    for name, host, how, blocked in (("head", "sim-head", "unreachable", "placeholder_up failed 3 times"),
                                     ("refuses", "sim-worker", "refuses", "placeholder_up failed 3 times"),
                                     ("both", "sim-worker", "both", "no placeholder could be raised on any host")):
        w = _worlds(tmp_path / name)
        try:
            gate_all(w)
            admit(w.book, w.root, "chain-a")
            allowed = {"production-policy": ("sim-head", "sim-worker")} if how == "both" else BOTH_MODES
            lost = _Lost(w.driver, allowed, host=host, how=how)
            result = WindowRunner(w.book, w.root, "chain-a", lost, time_scale=w.time_scale).run()  # type: ignore[arg-type]
            assert result.ending is None and blocked in (result.blocked or ""), (name, result)
            records = _finished(w, "chain-a", host)
            if how != "both":
                assert len(records) == 3 and not any("unreachable_allowed" in r["detail"] for r in records), name
            if how == "refuses":
                assert not any("unreachable" in r["detail"] for r in records)   # the site's claim is not kept
            s = state(w.book)
            assert s.hold is not None and s.hold.owner == "chain-a" and s.production == "down", name
        finally:
            close(w)


def test_a_site_that_lets_a_mode_lose_every_host_is_refused(tmp_path: Path) -> None:
    import pytest

    from ledger.errors import FormatError
    from runner.drivers.site import load_site

    site = tmp_path / "site.toml"
    site.write_text('kind = "sim"\nurl = "http://127.0.0.1:9"\nhosts = ["h1", "h2"]\n\n[allow_unreachable]\n'
                    'controlled = ["h2", "h1"]\n')
    with pytest.raises(FormatError, match="lists every host of the site"):
        load_site(site)


def test_the_chain_end_passes_a_lost_worker_and_its_placeholder_stays_on_record(tmp_path: Path) -> None:
    """chain-a raises both placeholders; the worker is lost during chain-b (the last): its proof before
    the HOLD and its placeholder_down after the watch are passed, the window ends restored, and the
    ledger keeps the worker's placeholder as up (no proof it came down)."""
    w = _worlds(tmp_path, last=True)
    try:
        gate_all(w)
        admit(w.book, w.root, "chain-a")
        assert WindowRunner(w.book, w.root, "chain-a", w.driver, time_scale=w.time_scale).run().ending == "chained"
        lost = _Lost(w.driver, BOTH_MODES)
        assert run_prev_ok(w.book, w.root, "chain-b", lost).result.verdict == "PASS"   # type: ignore[arg-type]
        admit(w.book, w.root, "chain-b")
        result = WindowRunner(w.book, w.root, "chain-b", lost, time_scale=w.time_scale).run()   # type: ignore[arg-type]
        assert result.ending == "restored", result
        actions = [r["action"] for r in _finished(w, "chain-b", "sim-worker")]
        assert actions == ["placeholder_proof", "placeholder_down"]
        s = state(w.book)
        assert s.production == "up" and s.marker is None and s.hold is None
        assert set(s.placeholders) == {"sim-worker"} and s.placeholders["sim-worker"].window == "chain-a"
        assert run_audit(book=w.book).ok
    finally:
        close(w)

