"""A window through the command site (examples/site-scripts/statehost.sh): restore caps and host identities.

The host actions run as commands over a state directory; the measurement goes to a simulator
(the site's serving URL), so each test is a whole window through the command-template driver.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.demo.scenarios import pass_chain_gate
from runner.drivers.base import ActionResult, HostDriver
from runner.drivers.site import load_site
from runner.execution.window import RunResult, WindowRunner
from runner.gates.admission import admit
from tests.runner.script import EXAMPLES

from .test_identities import COMMIT, MARKOV, TREE, WORKER, declare
from .worlds import STATEHOST_SIM, close, gate_all, small, state, window, world

WINDOW = "cmd"
HEAD, WORKER_HOST = "spark-head", "spark-worker"


def _world(tmp_path: Path, edit: Any = small) -> tuple[Any, HostDriver, Path]:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=edit)], sim_config=STATEHOST_SIM)
    gate_all(w)
    shutil.copytree(EXAMPLES / "site-scripts", tmp_path / "site-scripts")
    text = (EXAMPLES / "site-commands.toml").read_text().replace("http://127.0.0.1:8000", w.sim.url)
    (tmp_path / "site.toml").write_text(text)
    state_dir = tmp_path / "site-state"
    (state_dir / "inject").mkdir(parents=True)
    return w, load_site(tmp_path / "site.toml"), state_dir


def _run(w: Any, driver: Any, *, resume: bool = False, say: Any = None) -> RunResult:
    pass_chain_gate(w.book, w.root, WINDOW, lambda _t: None)
    if state(w.book).windows[WINDOW].admitted_seq is None:
        admit(w.book, w.root, WINDOW)
    return WindowRunner(w.book, w.root, WINDOW, driver, time_scale=w.time_scale, say=say).run(resume=resume)


def _events(w: Any, type_: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[type_])]


def _restores(w: Any) -> list[dict[str, Any]]:
    return [a for a in _events(w, "host.action") if a["action"] == "restore" and a["phase"] == "finished"]


class _BeforeFirstRestore:
    """The command site, with a file written into its state directory just before the first restore."""

    def __init__(self, driver: HostDriver, path: Path, text: str) -> None:
        self._driver, self._path, self._text = driver, path, text

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def run(self, action: str, host: str | None, params: Mapping[str, Any]) -> ActionResult:
        if action == "restore" and self._text:
            self._path.write_text(self._text)
            self._text = ""
        return self._driver.run(action, host, params)


# ---------------------------------------------------------------------- production's cap after restore


def test_command_site_restore_at_a_wrong_production_cap_is_not_a_clean_restore(tmp_path: Path) -> None:
    w, driver, site_state = _world(tmp_path)
    try:
        (site_state / "caps").mkdir()
        (site_state / "caps" / "production").write_text("2100\n")   # production comes back at 2100 MHz
        said: list[str] = []
        result = _run(w, driver, say=said.append)
        assert result.escalated and result.ending is None
        attempts = _restores(w)
        assert [a["ok"] for a in attempts] == [False, False, False]
        for host in (HEAD, WORKER_HOST):
            assert f"{host} restored production at 2100 MHz, expected 2300 MHz" in attempts[0]["detail"]["error"]
        assert [f["status"] for f in _events(w, "restore.finished")] == ["failed"]
        assert any(line.startswith("RESTORE ESCALATED") and "at 2100 MHz, expected 2300 MHz" in line for line in said)
        s = state(w.book)
        assert s.hold is not None and s.hold.owner == WINDOW and not _events(w, "decision.recorded")
        assert run_audit(book=w.book).ok
        (site_state / "caps" / "production").unlink()               # the site fixed: resume restores cleanly
        assert _run(w, driver, resume=True).ending == "restored"
        assert _events(w, "restore.finished")[-1]["detail"]["clock"]["clock_cap_mhz"] == 2300
        assert replay_window(w.book, WINDOW).match and run_audit(book=w.book).ok
    finally:
        driver.close()
        close(w)


def test_command_site_restore_with_hosts_disagreeing_on_the_cap_is_named(tmp_path: Path) -> None:
    w, driver, site_state = _world(tmp_path)
    try:   # the first restore: the worker's own log line says 2150 MHz (inject/host_cap.HOST)
        odd = _BeforeFirstRestore(driver, site_state / "inject" / f"host_cap.{WORKER_HOST}", "2150\n")
        assert _run(w, odd).ending == "restored"
        first, second = _restores(w)
        assert not first["ok"] and second["ok"]
        error = first["detail"]["error"]
        assert f"the hosts disagree on the clock cap: {HEAD} 2300 MHz, {WORKER_HOST} 2150 MHz" in error
        assert f"{WORKER_HOST} restored production at 2150 MHz, expected 2300 MHz" in error
        assert first["detail"]["clock"]["hosts"][WORKER_HOST]["log_line"] == "clock cap 2150 MHz"
        finished = _events(w, "restore.finished")
        assert [(f["status"], f["attempts"]) for f in finished] == [("ok", 2)]
        assert replay_window(w.book, WINDOW).match and run_audit(book=w.book).ok
    finally:
        driver.close()
        close(w)


# ---------------------------------------------------------------------- declared host identities


def _identities(site_state: Path, arms: tuple[str, ...], **members: str) -> None:
    (site_state / "identities").mkdir(exist_ok=True)
    reported = {"worker_identity": WORKER, "markov_identity": MARKOV, "experiment_commit": COMMIT,
                "worker_tree": TREE, **members}
    for arm in arms:
        (site_state / "identities" / f"{arm}.json").write_text(json.dumps(reported))


ARMS = ("fixed5-greedy", "fixed5-sampled")


def test_command_site_declared_identities_reported_equal_pass(tmp_path: Path) -> None:
    w, driver, site_state = _world(tmp_path, edit=declare)
    try:
        _identities(site_state, ARMS)
        result = _run(w, driver)
        assert result.ending == "restored", result.blocked
        gates = [g for g in _events(w, "gate.result") if g["gate"] == "start_config"]
        assert len(gates) == 3 and all(g["verdict"] == "PASS" for g in gates)
        assert gates[1]["evidence"]["identities"]["reported"] == {
            "worker_identity": WORKER, "markov_identity": MARKOV, "experiment_commit": COMMIT, "worker_tree": TREE}
        assert run_audit(book=w.book).ok
    finally:
        driver.close()
        close(w)


def test_command_site_start_reporting_another_worker_tree_fails_and_the_window_ends_safely(tmp_path: Path) -> None:
    w, driver, site_state = _world(tmp_path, edit=declare)
    try:
        _identities(site_state, ARMS[:1])
        _identities(site_state, ARMS[1:], worker_tree="/opt/other/tree")   # the candidate's starts differ
        result = _run(w, driver)
        assert result.ending == "aborted" and result.decision == "REJECT"
        gate = [g for g in _events(w, "gate.result") if g["gate"] == "start_config"][-1]
        assert gate["verdict"] == "FAIL" and "worker_tree '/opt/other/tree' is not arm" in gate["summary"]
        assert {w_["start"] for w_ in _events(w, "wave.measured")} <= {"s1"}   # nothing measured on s2
        s = state(w.book)
        assert s.production == "up" and s.hold is None
        assert (site_state / "production").read_text().strip() == "up"       # the site really serves again
        assert run_audit(book=w.book).ok
    finally:
        driver.close()
        close(w)


def test_command_site_start_without_the_identities_file_reports_none_and_fails(tmp_path: Path) -> None:
    w, driver, _site_state = _world(tmp_path, edit=declare)
    try:
        result = _run(w, driver)
        assert result.ending == "aborted"
        gate = next(g for g in _events(w, "gate.result") if g["gate"] == "start_config")
        assert gate["verdict"] == "FAIL" and "the host did not report its worker_identity" in gate["summary"]
    finally:
        driver.close()
        close(w)
