"""The rollback preflight (seed 003's "Drain/ownership, exact snapshots and rollback preflight"): a dry
restore check on production's snapshot after the snapshot and before the drain; a failing one ends the
window before anything is touched; a site without one is recorded as having none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.execution.dryrun import dry_run_report

from .worlds import close, gate_all, run, state, window, world


def _actions(w: Any, window_id: str) -> list[str]:
    return [e.payload["action"] for e in w.book.events(stream=f"window/{window_id}", types=["host.action"])
            if e.payload["phase"] == "started"]


def _types(w: Any, window_id: str) -> list[str]:
    return [e.type for e in w.book.events(stream=f"window/{window_id}")]


def test_the_restore_is_checked_after_the_snapshot_and_before_the_drain(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "w1")])
    try:
        gate_all(w)
        assert run(w, "w1").ending == "restored"
        actions = _actions(w, "w1")
        assert actions[:4] == ["preflight", "snapshot", "restore_check", "drain"], actions
        assert actions.count("restore_check") == 1
        check = next(e.payload for e in w.book.events(stream="window/w1", types=["host.action"])
                     if e.payload["action"] == "restore_check" and e.payload["phase"] == "finished")
        snapshot = next(e.payload for e in w.book.events(stream="window/w1", types=["production.snapshot"]))
        assert check["ok"] and check["detail"]["snapshot_sha256"] == snapshot["sha256"]
        opened = next(e.payload for e in w.book.events(stream="window/w1", types=["hold.opened"]))
        assert "rollback_preflight" not in opened   # the site has a check: nothing to say
    finally:
        close(w)


def test_a_failing_rollback_preflight_ends_the_window_before_the_drain(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "w1")])
    try:
        gate_all(w)
        w.sim.set_faults(action_fail={"action": "restore_check", "count": 1, "status": 500})
        result = run(w, "w1")
        assert result.ending == "aborted" and any("injected failure of restore_check" in c for c in result.causes), result
        assert _actions(w, "w1") == ["preflight", "snapshot", "restore_check"]   # nothing after it
        types = _types(w, "w1")
        assert "hold.opened" not in types and "production.state" not in types and "restore.finished" not in types
        s = state(w.book)
        assert s.production != "down" and s.hold is None and s.windows["w1"].ending is not None
        assert w.driver.run("probe", None, {"window": "w1"}).facts["serving"] == "up"   # production untouched
    finally:
        close(w)


def test_a_rollback_preflight_to_another_snapshot_is_a_failure(tmp_path: Path) -> None:
    """A check that answers for a snapshot other than production's fails (the restore would bring back
    something else): the same stop as a refused check."""
    from runner.drivers.base import settle

    ok, facts = settle("restore_check", None, {"snapshot_sha256": "a" * 64}, True, {"snapshot_sha256": "b" * 64})
    assert not ok and "not production's" in facts["error"]
    ok, facts = settle("restore_check", None, {"snapshot_sha256": "a" * 64}, True, {})
    assert not ok and "established no snapshot_sha256" in facts["error"]
    assert settle("restore_check", None, {"snapshot_sha256": "a" * 64}, True, {"snapshot_sha256": "a" * 64})[0]


class _NoCheck:
    """The site without a restore_check action (as a command site that does not declare one)."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    @property
    def actions(self) -> frozenset[str]:
        return frozenset(self._driver.actions) - {"restore_check"}


def test_a_site_without_a_check_skips_it_and_the_hold_says_so(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "w1")])
    try:
        gate_all(w)
        site = _NoCheck(w.driver)
        steps = [c["action"] for c in dry_run_report(w.book, "w1", site, w.time_scale)["host_actions"]]  # type: ignore[arg-type]
        assert "restore_check" not in steps
        assert run(w, "w1", driver=site).ending == "restored"
        assert "restore_check" not in _actions(w, "w1")
        opened = next(e.payload for e in w.book.events(stream="window/w1", types=["hold.opened"]))
        assert opened["rollback_preflight"] == "none"
    finally:
        close(w)


def test_the_dry_run_shows_the_check_before_the_drain(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "w1")])
    try:
        gate_all(w)
        steps = [c["action"] for c in dry_run_report(w.book, "w1", w.driver, w.time_scale)["host_actions"]]
        assert steps.index("snapshot") < steps.index("restore_check") < steps.index("drain"), steps
    finally:
        close(w)


def test_a_chained_start_checks_the_restore_to_the_markers_snapshot_before_its_first_start(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="last")])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        marker = state(w.book).marker
        assert marker is not None
        assert run(w, "chain-b").ending == "restored"
        actions = _actions(w, "chain-b")
        assert "drain" not in actions and actions.index("restore_check") < actions.index("start_arm"), actions
        check = next(e.payload for e in w.book.events(stream="window/chain-b", types=["host.action"])
                     if e.payload["action"] == "restore_check" and e.payload["phase"] == "finished")
        assert check["ok"] and check["detail"]["snapshot_sha256"] == marker.production_snapshot_sha256
    finally:
        close(w)
