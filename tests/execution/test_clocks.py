"""GPU clocks: every host's cap from its own log line, hosts that must agree, the THERMAL-WATCH between waves."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FormatError, PolicyError
from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.demo.pair import HOSTS
from runner.drivers.site import REQUIRED_COMMAND_ACTIONS, load_site, site_from_dict
from runner.execution.window import WindowRunner

from .worlds import close, gate_all, run, small, state, window, world

WINDOW = "clocks"


def _world(tmp_path: Path, edit: Any = small) -> Any:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=edit)])
    gate_all(w)
    return w


def _events(w: Any, type_: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[type_])]


def _blip_during(w: Any, start: str, cap_mhz: int) -> Any:
    """An on_wave hook: at the start's first wave, the next request dials the clock back to ``cap_mhz`` and it
    recovers (a THERMAL-WATCH pair)."""
    injected: list[bool] = []

    def on_wave(_n: int, _total: int, label: str) -> None:
        if label.startswith(f"{start} ") and not injected:
            injected.append(True)
            w.sim.set_faults(thermal_blip={"cap_mhz": cap_mhz})

    return on_wave


def test_dial_back_that_recovers_before_the_start_ends_is_caught(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:
        result = run(w, WINDOW, on_wave=_blip_during(w, "s2", 1700))
        assert result.ending == "restored"
        thermal = _events(w, "thermal.event")
        assert [(t["kind"], t["clock_cap_mhz"], t["detail"]["source"]) for t in thermal] == [
            ("dial_back", 1700, "read_thermal")]
        assert thermal[0]["detail"]["start"] == "s2"
        # the clock had recovered by the start's end: the reading there saw nothing wrong
        end_reads = [a["detail"] for a in _events(w, "host.action")
                     if a["action"] == "read_clock_cap" and a["phase"] == "finished" and a["detail"]["start"] == "s2"]
        assert end_reads[-1]["current_clock_mhz"] == end_reads[-1]["clock_cap_mhz"]
        decision = _events(w, "decision.recorded")[0]["result"]
        assert decision["decision"] == "INCONCLUSIVE"
        assert any("thermal dial-back inside the HOLD (1 event(s))" in r for r in decision["reasons"])
        assert replay_window(w.book, WINDOW).match
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_a_thermal_watch_line_naming_an_unknown_host_is_a_malformed_reading_not_a_dial_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = _world(tmp_path)
    try:
        real = w.driver.run
        ghost = {"host": "ghost-gpu", "seq": 7, "from_mhz": 2300, "to_mhz": 1500, "at": None}

        def run_action(action: str, host: str | None, params: Any) -> Any:
            result = real(action, host, params)
            if action == "read_thermal" and result.ok:  # every THERMAL-WATCH answer carries the foreign line
                return dataclasses.replace(result, facts={**result.facts,
                                                          "dial_backs": [*result.facts["dial_backs"], ghost]})
            return result

        monkeypatch.setattr(w.driver, "run", run_action)
        run(w, WINDOW)
        thermal = _events(w, "thermal.event")
        assert "ghost-gpu" not in {t["host"] for t in thermal}           # no event for a host that does not exist
        (malformed,) = [t for t in thermal if t["kind"] == "malformed"]  # recorded once, however often it is read
        assert malformed["host"] == "site" and malformed["clock_cap_mhz"] == 1500
        assert malformed["detail"]["watch_host"] == "ghost-gpu" and malformed["detail"]["watch_seq"] == 7
        assert malformed["detail"]["reason"] == ("THERMAL-WATCH line 7 names host 'ghost-gpu', "
                                                 "which the site does not have")
        assert not [t for t in thermal if t["kind"] == "dial_back"]
        # the start is flagged in the control archive (kept out of other windows' spread), at its own cap
        rows = [e.payload for e in w.book.events(stream="archive", types=["archive.control_start"])
                if e.payload["start"] == malformed["detail"]["start"]]
        assert rows and all(r["dial_back"] is True and r["clock_cap_mhz"] == 2300 for r in rows), rows
        decision = _events(w, "decision.recorded")[0]["result"]        # fail closed: the clocks are not shown held
        assert decision["decision"] == "INCONCLUSIVE"
        assert any("thermal dial-back inside the HOLD (1 event(s))" in r for r in decision["reasons"])
        assert replay_window(w.book, WINDOW).match
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_new_dial_backs_keeps_a_known_hosts_line_and_refuses_an_unknown_one() -> None:
    from runner.gates.clocks import new_dial_backs

    facts = {"dial_backs": [{"host": "a", "seq": 1, "to_mhz": 1800, "from_mhz": 2300},
                            {"host": "zz", "seq": 1, "to_mhz": 1700, "from_mhz": 2300},
                            {"seq": 2, "to_mhz": 1600}]}
    found = new_dial_backs(facts, 2300, set(), hosts=("a", "b"))
    assert [(d["host"], d["seq"], d.get("watch_host"), "malformed" in d) for d in found] == [
        ("a", 1, None, False), ("site", 1, "zz", True), ("site", 2, None, False)]
    # keyed by the name the line gave: recording the malformed one does not hide the site's own seq 1
    assert new_dial_backs(facts, 2300, {("a", 1), ("zz", 1)}, hosts=("a", "b")) == [found[2]]
    assert [d["host"] for d in new_dial_backs(facts, 2300, set())] == ["a", "zz", "site"]  # no hosts given: unchecked


def test_hosts_disagreeing_on_the_clock_cap_fail_the_start(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:
        w.sim.set_faults(host_clock_cap={"host": HOSTS[1], "cap_mhz": 2100})
        result = run(w, WINDOW)
        assert result.ending == "aborted"   # a start_config FAIL aborts the window; production is still restored
        began = _events(w, "start.began")[0]
        assert began["clock"]["hosts"][HOSTS[1]]["clock_cap_mhz"] == 2100
        assert any("the hosts disagree on the clock cap" in p for p in began["clock"]["problems"])
        gate = next(g for g in _events(w, "gate.result") if g["gate"] == "start_config")
        assert gate["verdict"] == "FAIL" and "hosts disagree" in gate["summary"]
        assert not _events(w, "wave.measured")          # nothing measured on disagreeing hosts
        s = state(w.book)
        assert s.production == "up" and s.hold is None  # the window ended safely
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_plan_cap_that_is_not_the_sites_is_refused_before_any_host_action(tmp_path: Path) -> None:
    w = _world(tmp_path)
    site = tmp_path / "site.toml"   # the site configures production at 2200 MHz; the plan registered 2300
    site.write_text(f'kind = "sim"\nurl = "{w.sim.url}"\nproduction_clock_cap_mhz = 2200\n')
    driver = load_site(site)
    try:
        size, actions = w.book.size(), len(w.sim.state()["actions"])
        with pytest.raises(PolicyError, match=r"registers production_clock_cap_mhz 2300 .* configures production at "
                                              r"2200 MHz"):
            WindowRunner(w.book, w.root, WINDOW, driver, time_scale=w.time_scale).run()
        assert w.book.size() == size and len(w.sim.state()["actions"]) == actions   # no host touched
    finally:
        driver.close()
        close(w)


def test_per_host_production_caps_in_a_commands_site(tmp_path: Path) -> None:
    def site(caps: tuple[int, int], top: str = "") -> dict[str, Any]:
        return {"kind": "commands", "endpoints": {"serving_url": "http://h:8000"}, **({"production_clock_cap_mhz":
                int(top)} if top else {}),
                "hosts": [{"name": "a", "role": "head", "production_clock_cap_mhz": caps[0]},
                          {"name": "b", "role": "worker", "production_clock_cap_mhz": caps[1]}],
                "actions": {a: {"command": "true"} for a in REQUIRED_COMMAND_ACTIONS}}

    assert site_from_dict(site((2300, 2300)), base_dir=tmp_path).production_clock_cap_mhz == 2300
    with pytest.raises(FormatError, match="the hosts' production clock caps differ"):
        site_from_dict(site((2300, 2100)), base_dir=tmp_path)
    with pytest.raises(FormatError, match="2400, but the hosts are configured at 2300 MHz"):
        site_from_dict(site((2300, 2300), top="2400"), base_dir=tmp_path)


def test_each_hosts_cap_comes_from_its_own_log_line() -> None:
    from runner.gates.clocks import read_caps

    agreed = read_caps({"clock_cap_mhz": 2300, "log_line": "clock cap 2300 MHz",
                        "hosts": {"a": {"log_line": "a: clock cap 2300 MHz"},
                                  "b": {"clock_cap_mhz": 2300, "log_line": "b: clock cap 2300 MHz"}}}, ("a", "b"))
    assert agreed.cap == 2300 and not agreed.problems
    lying = read_caps({"clock_cap_mhz": 2300, "hosts": {"a": {"clock_cap_mhz": 2300, "log_line": "clock cap 1900 MHz"},
                                                        "b": {"clock_cap_mhz": 2300}}}, ("a", "b"))
    assert "a reports clock cap 2300 MHz, but its own log line says 1900 MHz" in lying.problems
    assert any("disagree" in p for p in lying.problems)
    missing = read_caps({"clock_cap_mhz": 2300, "hosts": {"a": {"log_line": "clock cap 2300 MHz"}}}, ("a", "b"))
    assert missing.problems == ("no clock cap read on b",)
    number_only = read_caps({"hosts": {"a": {"log_line": "clock cap 2300 MHz"}, "b": {"clock_cap_mhz": 2300}}},
                            ("a", "b"))
    assert number_only.problems == ("no clock cap line from b (a number alone is not the host's log)",)


def test_every_node_reports_its_own_cap_line_a_site_wide_one_is_not_every_nodes() -> None:
    from runner.gates.clocks import read_caps

    site_wide = read_caps({"clock_cap_mhz": 2300, "log_line": "clock cap 2300 MHz"}, ("a", "b"))
    assert site_wide.problems == ("read_clock_cap gave one site-wide reading and no host's own: every host (a, b) "
                                  "must report its clock cap line",)
    nothing = read_caps({}, ("a", "b"), "restore")
    assert nothing.cap is None and nothing.problems == (
        "restore reported no clock cap: every host (a, b) must report its clock cap line",)
    # one host: the site-wide line is that host's own; a bare number is not a line
    assert read_caps({"clock_cap_mhz": 2300, "log_line": "clock cap 2300 MHz"}, ("a",)).problems == ()
    assert read_caps({"clock_cap_mhz": 2300}, ("a",)).problems == (
        "read_clock_cap gave a clock cap number but no clock cap line: every host (a) must report its clock cap line",)


@pytest.mark.parametrize("missing", [HOSTS[1], ""])
def test_a_host_with_no_clock_line_at_a_start_fails_the_start(tmp_path: Path, missing: str) -> None:
    w = _world(tmp_path)
    try:   # the first start's read_clock_cap leaves out the worker's own line (or every host's: "")
        w.sim.set_faults(clock_line_missing={"action": "read_clock_cap", "host": missing})
        result = run(w, WINDOW)
        assert result.ending == "aborted"
        began = _events(w, "start.began")[0]
        problem = (f"no clock cap read on {HOSTS[1]}" if missing else
                   "read_clock_cap gave one site-wide reading and no host's own: every host "
                   f"({', '.join(HOSTS)}) must report its clock cap line")
        assert began["clock"]["problems"] == [problem]
        gate = next(g for g in _events(w, "gate.result") if g["gate"] == "start_config")
        assert gate["verdict"] == "FAIL" and f"clock: {problem}" in gate["summary"]
        assert not _events(w, "wave.measured")          # nothing measured without every node's cap
        s = state(w.book)
        assert s.production == "up" and s.hold is None
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_a_restore_that_reports_no_hosts_cap_line_is_not_verified_and_escalates(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:   # every restore attempt leaves out the worker's reading: production's cap there is not known
        w.sim.set_faults(clock_line_missing={"action": "restore", "host": HOSTS[1], "count": 3})
        result = run(w, WINDOW)
        assert result.escalated and result.ending is None
        attempts = _restore_actions(w)
        assert [a["ok"] for a in attempts] == [False, False, False]
        assert f"no clock cap read on {HOSTS[1]}" in attempts[0]["detail"]["error"]
        assert attempts[0]["detail"]["restore_verified"] is False
        assert [f["status"] for f in _events(w, "restore.finished")] == ["failed"]
        s = state(w.book)
        assert s.hold is not None and s.hold.owner == WINDOW     # the HOLD stays ours until a verified restore
        second = WindowRunner(w.book, w.root, WINDOW, w.driver, time_scale=w.time_scale).run(resume=True)
        assert second.ending == "restored"
        assert _events(w, "restore.finished")[-1]["detail"]["clock"]["problems"] == []
        assert replay_window(w.book, WINDOW).match and run_audit(book=w.book).ok
    finally:
        close(w)


def test_a_dialled_back_control_start_is_archived_at_its_real_cap_and_flagged(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:
        assert run(w, WINDOW, on_wave=_blip_during(w, "s3", 1800)).ending == "restored"
        archived = {e.payload["start"]: e.payload for e in w.book.events(stream="archive",
                                                                          types=["archive.control_start"])}
        assert archived["s3"]["clock_cap_mhz"] == 1800 and archived["s3"]["dial_back"] is True
        assert archived["s3"]["nominal_clock_cap_mhz"] == 2300
        assert archived["s1"]["clock_cap_mhz"] == 2300 and "dial_back" not in archived["s1"]
        assert archived["s1"]["control_config_digest"] == archived["s3"]["control_config_digest"]
        assert replay_window(w.book, WINDOW).match and run_audit(book=w.book).ok
    finally:
        close(w)


def test_the_restore_reads_production_cap_from_every_hosts_own_line(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:
        assert run(w, WINDOW).ending == "restored"
        restored = _events(w, "restore.finished")[-1]["detail"]["clock"]
        assert restored["clock_cap_mhz"] == 2300 and restored["problems"] == []
        assert {h: v["clock_cap_mhz"] for h, v in restored["hosts"].items()} == {h: 2300 for h in HOSTS}
    finally:
        close(w)


def _restore_actions(w: Any) -> list[dict[str, Any]]:
    return [a for a in _events(w, "host.action") if a["action"] == "restore" and a["phase"] == "finished"]


def test_restore_at_a_wrong_production_cap_is_not_a_clean_restore(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:   # every restore brings production back at 2100 MHz on every host; production's cap is 2300
        w.sim.set_faults(restore_clock_cap={"cap_mhz": 2100, "count": 3})
        said: list[str] = []
        result = run(w, WINDOW, say=said.append)
        assert result.escalated and result.ending is None          # not a clean restore: no ending at all
        attempts = _restore_actions(w)
        assert [a["ok"] for a in attempts] == [False, False, False]
        for host in HOSTS:
            assert f"{host} restored production at 2100 MHz, expected 2300 MHz" in attempts[0]["detail"]["error"]
        assert attempts[0]["detail"]["restore_verified"] is False
        assert attempts[0]["detail"]["clock"]["expected_clock_cap_mhz"] == 2300
        finished = _events(w, "restore.finished")
        assert [f["status"] for f in finished] == ["failed"]       # no restore.finished ok was ever recorded
        assert "restored production at 2100 MHz, expected 2300 MHz" in finished[0]["detail"]["last_error"]
        escalated = next(line for line in said if line.startswith("RESTORE ESCALATED"))
        assert f"{HOSTS[0]} restored production at 2100 MHz, expected 2300 MHz" in escalated
        assert not _events(w, "window.closed") and not _events(w, "decision.recorded")
        s = state(w.book)
        assert s.hold is not None and s.hold.owner == WINDOW and s.production == "down"   # the HOLD stays ours
        assert run_audit(book=w.book).ok
        # the site fixed: the resumed window restores at production's cap and closes cleanly
        second = WindowRunner(w.book, w.root, WINDOW, w.driver, time_scale=w.time_scale).run(resume=True)
        assert second.ending == "restored" and second.decision is not None
        assert _events(w, "restore.finished")[-1]["detail"]["clock"]["problems"] == []
        assert replay_window(w.book, WINDOW).match and run_audit(book=w.book).ok
    finally:
        close(w)


def test_restore_with_hosts_disagreeing_on_the_cap_is_named(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:   # the first restore brings production back at 2100 MHz on the worker alone
        w.sim.set_faults(restore_clock_cap={"cap_mhz": 2100, "host": HOSTS[1]})
        assert run(w, WINDOW).ending == "restored"
        first, second = _restore_actions(w)
        assert not first["ok"] and second["ok"]                     # the wrong restore counted as a failed attempt
        error = first["detail"]["error"]
        assert error.startswith("restore not verified: ")
        assert f"the hosts disagree on the clock cap: {HOSTS[0]} 2300 MHz, {HOSTS[1]} 2100 MHz" in error
        assert f"{HOSTS[1]} restored production at 2100 MHz, expected 2300 MHz" in error
        assert HOSTS[0] + " restored" not in error
        finished = _events(w, "restore.finished")
        assert [(f["status"], f["attempts"]) for f in finished] == [("ok", 2)]
        assert finished[0]["detail"]["clock"]["problems"] == []
        assert replay_window(w.book, WINDOW).match and run_audit(book=w.book).ok
    finally:
        close(w)
