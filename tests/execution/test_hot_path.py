"""The runner's hot path reads what it needs from the fold, not by rescanning the window's events."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.execution.clock import parse_time
from runner.execution.starts import block_began
from runner.state.fold import WindowState

from .worlds import close, gate_all, run, small, state, window, world

WINDOW = "hot"


def _scan_dial_backs(book: Any, ws: WindowState) -> tuple[set[tuple[str, int]], dict[str, list[Any]]]:
    """What the runner used to compute by scanning the window's thermal.event rows."""
    recorded: set[tuple[str, int]] = set()
    caps: dict[str, list[Any]] = {}
    for event in book.events(ws.registered_seq or 0, stream=f"window/{WINDOW}", types=["thermal.event"]):
        detail = event.payload.get("detail") or {}
        if isinstance(detail.get("watch_seq"), int):
            recorded.add((event.payload["host"], detail["watch_seq"]))
        if event.payload.get("kind") == "dial_back" and isinstance(detail.get("start"), str):
            caps.setdefault(detail["start"], []).append(event.payload.get("clock_cap_mhz"))
    return recorded, caps


def _scan_block_began(ws: WindowState, start: str) -> Any:
    """What the runner used to compute by a linear scan of the finished host actions."""
    for item in ws.finished:
        if item.action == "start_arm" and item.start == start and item.ok and item.time:
            return parse_time(item.started_time or item.time)
    info = ws.starts.get(start)
    began = info.began_time if info else None
    return parse_time(began) if began else None


def test_thermal_rows_are_not_rescanned_per_wave_and_the_fold_equals_the_old_scan(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=small)])
    gate_all(w)
    try:
        book = w.book
        reads: list[dict[str, int]] = [{"thermal": 0, "calls": 0}]
        original = book.events

        def spy(*args: Any, **kwargs: Any) -> Iterator[Any]:
            reads[-1]["calls"] += 1
            if "thermal.event" in (kwargs.get("types") or ()):
                reads[-1]["thermal"] += 1
            return original(*args, **kwargs)

        injected: list[bool] = []

        def on_wave(_n: int, _total: int, label: str) -> None:
            reads.append({"thermal": 0, "calls": 0})  # what the next wave (and the steps before it) reads
            if label.startswith("s3 ") and not injected:
                injected.append(True)
                w.sim.set_faults(thermal_blip={"cap_mhz": 1800})

        book.events = spy  # type: ignore[method-assign]
        try:
            assert run(w, WINDOW, on_wave=on_wave).ending == "restored"
        finally:
            book.events = original  # type: ignore[method-assign]
        waves = len(reads) - 1
        assert waves >= 4
        assert [r["thermal"] for r in reads] == [0] * len(reads), "a wave rescanned the thermal.event rows"

        ws = state(book).windows[WINDOW]
        recorded, caps = _scan_dial_backs(book, ws)
        assert recorded and caps == {"s3": [1800]}  # the injected dial-back was recorded
        assert ws.dial_backs_recorded == frozenset(recorded)
        assert {sid: list(c) for sid, c in ws.dial_back_caps.items()} == caps
        for sid, _arm in ws.plan_starts:
            assert block_began(ws, sid) is not None
            assert block_began(ws, sid) == _scan_block_began(ws, sid)
        as_json = state(book).to_json(WINDOW)["windows"][WINDOW]
        assert as_json["dial_back_caps"] == caps and sorted(map(tuple, as_json["dial_backs_recorded"])) == sorted(
            recorded)
    finally:
        close(w)


def test_a_thermal_read_is_recorded_before_it_runs_and_finished_with_the_wave_in_one_commit(tmp_path: Path) -> None:
    from runner.audit.full import run_audit
    from runner.decide.inputs import replay_window

    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=small)])
    gate_all(w)
    try:
        book, driver = w.book, w.driver
        commits: list[list[str]] = []
        append_many, run_action = book.append_many, driver.run
        checked: list[str] = []

        def counted(events: Any, signer: Any) -> Any:
            stored = append_many(events, signer)
            commits.append([e.type for e in stored])
            return stored

        def acting(action: str, host: Any, params: Any) -> Any:
            if action == "read_thermal":  # record-before-act: its started record is committed already
                last = list(book.events(book.size() - 1))[-1]
                assert last.type == "host.action" and last.payload["phase"] == "started"
                assert last.payload["action"] == "read_thermal"
                checked.append(last.payload["action_id"])
            return run_action(action, host, params)

        labels: list[tuple[str, int]] = []

        def on_wave(_n: int, _total: int, label: str) -> None:
            labels.append((label.split()[0], len(commits)))

        book.append_many = counted  # type: ignore[method-assign]
        driver.run = acting  # type: ignore[method-assign]
        try:
            assert run(w, WINDOW, on_wave=on_wave).ending == "restored"
        finally:
            book.append_many = append_many  # type: ignore[method-assign]
            driver.run = run_action  # type: ignore[method-assign]
        between = [b[1] - a[1] for a, b in itertools.pairwise(labels) if a[0] == b[0]]
        assert between and set(between) == {2}  # the read's start; its end with the wave
        wave_commits = [c for c in commits if "wave.measured" in c]
        assert all(c[0] == "host.action" for c in wave_commits)
        finished = {e.payload["action_id"] for e in book.events(types=["host.action"])
                    if e.payload["phase"] == "finished" and e.payload["action"] == "read_thermal"}
        assert checked and set(checked) == finished  # every read was finished, none left open
        assert replay_window(book, WINDOW).match and run_audit(book=book).ok
    finally:
        close(w)


def test_a_thermal_read_that_found_a_dial_back_is_committed_at_once(tmp_path: Path) -> None:
    """A crash during the next wave must not lose a dial-back: only an empty read waits for the wave's commit."""
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=small)])
    gate_all(w)
    try:
        book = w.book
        commits: list[list[str]] = []
        append_many = book.append_many

        def counted(events: Any, signer: Any) -> Any:
            stored = append_many(events, signer)
            commits.append([e.type for e in stored])
            return stored

        w.sim.set_faults(thermal_blip={"cap_mhz": 1800})  # the first completion dials back and recovers
        book.append_many = counted  # type: ignore[method-assign]
        try:
            run(w, WINDOW)
        finally:
            book.append_many = append_many  # type: ignore[method-assign]
        found = [c for c in commits if "thermal.event" in c]
        assert found, commits
        assert all(c[0] == "host.action" and "wave.measured" not in c for c in found), found
    finally:
        close(w)
