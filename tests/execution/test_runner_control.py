"""The runner against a command-template site, two runners on one window, and signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledger.errors import PolicyError
from runner.audit.full import run_audit
from runner.drivers.site import load_site
from runner.execution.lock import window_lock
from runner.execution.steps import next_step
from runner.execution.window import RunResult, WindowRunner
from runner.plan.register import register_plan
from tests.runner.script import EXAMPLES

from .worlds import STATEHOST_SIM, World, close, gate_all, run, state, window, world

TALLY = str(Path(sys.executable).with_name("tally"))


def _cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment a `tally` child runs in against the world's ledger and key."""
    return dict(os.environ, TALLY_DB=str(tmp_path / "tally.db"), TALLY_KEY=str(tmp_path / ".tally/root.pem"))


def _run_until_waves(w: World, env: dict[str, str], window_id: str, waves: int, *args: str,
                     stderr: int) -> subprocess.Popen[str]:
    """`tally window run WINDOW --execute ARGS` on the world's site, returned once ``waves`` waves are recorded."""
    proc = subprocess.Popen([TALLY, "window", "run", window_id, "--site", str(w.directory / "site.toml"), "--execute",
                             *args], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    deadline = time.monotonic() + 60
    while state(w.book).windows[window_id].waves < waves:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    return proc


def _command_site(tmp_path: Path, serving_url: str) -> Path:
    shutil.copytree(EXAMPLES / "site-scripts", tmp_path / "site-scripts")
    text = (EXAMPLES / "site-commands.toml").read_text().replace("http://127.0.0.1:8000", serving_url)
    path = tmp_path / "site-commands.toml"
    path.write_text(text)
    return path


def test_chained_close_order_on_a_command_site(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "cmd-chain", chain="chained")], sim_config=STATEHOST_SIM)
    try:
        gate_all(w)
        driver = load_site(_command_site(tmp_path, w.sim.url))
        result = WindowRunner(w.book, w.root, "cmd-chain", driver, time_scale=w.time_scale).run()
        driver.close()
        assert result.ending == "chained", result.blocked
        log = [line.split()[0:2] for line in (tmp_path / "site-state" / "actions.log").read_text().splitlines()]
        actions = [" ".join(parts) for parts in log]
        close_at = actions.index("placeholder_up spark-head")
        assert actions[close_at:close_at + 9] == [
            "placeholder_up spark-head", "placeholder_up spark-worker",  # every host before the first fence
            "fence spark-head", "fence spark-worker", "experiment_stop", "quiet_proof",
            "production_down_proof", "placeholder_proof spark-head", "placeholder_proof spark-worker",
        ]
        assert actions[:3] == ["preflight", "snapshot", "drain"]  # the snapshot comes while production serves
        assert actions.count("start_arm A") + actions.count("start_arm B") == 0  # arms are named, not roles
        assert sum(a.startswith("start_arm") for a in actions) == 3
        types = [e.type for e in w.book.events(stream="window/cmd-chain")]
        after = [t for t in types[types.index("measurement.ended") + 1:] if t != "host.action"]
        assert after == ["placeholder.up", "placeholder.up", "production.state", "hold.closed", "chain.marker.set",
                         "window.closed", "decision.recorded"]
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_second_runner_on_the_same_window_refuses(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "one-runner", chain="none")])
    env = _cli_env(tmp_path)
    try:
        gate_all(w)
        with window_lock(w.book, "one-runner"):  # the first runner holds the window
            second = subprocess.run([TALLY, "window", "run", "one-runner", "--site", str(tmp_path / "site.toml"),
                                     "--execute"], capture_output=True, text=True, env=env, timeout=120)
            assert second.returncode == 1 and "another runner" in second.stderr
            with pytest.raises(PolicyError, match="another runner"), window_lock(w.book, "one-runner"):
                pass
        assert state(w.book).windows["one-runner"].actions == 0  # the refusal touched nothing
    finally:
        close(w)


def test_a_window_waits_while_another_holds_the_hold(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "holder", chain="none"),
                         window("seed000-controlled.toml", "waiter", chain="none")])
    try:
        gate_all(w)
        runner = WindowRunner(w.book, w.root, "holder", w.driver, time_scale=w.time_scale)
        runner.cancel.set()
        for _ in range(8):  # open the HOLD and stop there, as a runner that crashed mid-window would leave it
            runner.refresh()
            step = next_step(runner._context(runner.ws))
            if step.kind == "start_arm":
                break
            runner.perform(step, RunResult("holder", None, None, []))
        assert state(w.book).hold.owner == "holder"  # type: ignore[union-attr]
        with pytest.raises(PolicyError, match="HOLD is owned by holder"):
            run(w, "waiter")
    finally:
        close(w)


@pytest.mark.parametrize(("chain", "sig", "ending"), [("none", signal.SIGTERM, "restored"),
                                                      ("chained", signal.SIGINT, "chained")])
def test_signal_records_interruption_then_ends_the_window(tmp_path: Path, chain: str, sig: int,
                                                          ending: str) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "signalled", chain=chain)])
    env = _cli_env(tmp_path)
    try:
        gate_all(w)
        proc = _run_until_waves(w, env, "signalled", 4, "--json", stderr=subprocess.PIPE)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err   # stopped by a signal, then ended safely
        printed = json.loads(out)
        assert printed["interrupted"] == signal.Signals(sig).name and printed["ending"] == ending
        assert printed["causes"][0].startswith(f"interrupted by {signal.Signals(sig).name} at ")
        assert printed["causes"][-1].startswith("measurement ended: interrupted, after ")
        events = list(w.book.events(stream="window/signalled"))
        interrupted = [e.payload for e in events if e.type == "window.interrupted"]
        assert interrupted and interrupted[0]["reason"] == "signal"
        assert interrupted[0]["signal"] == signal.Signals(sig).name
        assert next(e.payload for e in events if e.type == "measurement.ended")["reason"] == "interrupted"
        s = state(w.book)
        assert s.windows["signalled"].ending == ending and s.windows["signalled"].decision is not None
        assert s.windows["signalled"].decision.verdict == "INCONCLUSIVE"  # type: ignore[union-attr]  # waves are missing
        assert run_audit(book=w.book).ok
        # the report opens with the decision, then the ending and its cause: the signal and when
        report = subprocess.run([TALLY, "window", "report", "signalled", "--out", str(tmp_path / "report")], env=env,
                                capture_output=True, text=True, timeout=120)
        assert report.returncode == 0, report.stderr
        lines = _report_lines(tmp_path / "report" / "report.md")
        assert lines[0].startswith("# ") and lines[2] == "## Decision" and lines[3].startswith(f"Ending: {ending} ")
        assert lines[4].startswith(f"Cause: interrupted by {signal.Signals(sig).name} at "), lines[:6]
        assert not any(line.startswith("|") for line in lines[:5])   # before any table
    finally:
        close(w)


def test_start_arm_timeout_on_a_command_site(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "cmd-timeout", chain="none")])
    try:
        gate_all(w)
        site = _command_site(tmp_path, w.sim.url)
        text = site.read_text().replace('start_arm {arm} {role}"\ntimeout_s = 1800',
                                        'start_arm {arm} {role}"\ntimeout_s = 2')
        assert "timeout_s = 2" in text
        site.write_text(text)
        (tmp_path / "site-state" / "inject").mkdir(parents=True)
        (tmp_path / "site-state" / "inject" / "start_arm.hang").write_text("")
        driver = load_site(site)
        result = WindowRunner(w.book, w.root, "cmd-timeout", driver, time_scale=w.time_scale).run()
        driver.close()
        arms = [e.payload for e in w.book.events(stream="window/cmd-timeout", types=["host.action"])
                if e.payload["action"] == "start_arm" and e.payload["phase"] == "finished"]
        assert arms[0]["ok"] is False and arms[0]["detail"]["timed_out"] is True and arms[0]["exit_code"] is None
        assert result.ending == "restored" and result.decision == "INCONCLUSIVE"
        ended = next(w.book.events(stream="window/cmd-timeout", types=["measurement.ended"])).payload
        assert ended["reason"] == "failed"
        assert state(w.book).production == "up"
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def _report_lines(path: Path) -> list[str]:
    """The report's non-empty lines, its bold paragraphs as plain text."""
    return [line.strip().removeprefix("**").removesuffix("**") for line in path.read_text().splitlines()
            if line.strip()]


def test_a_failed_start_exits_1_and_the_output_and_report_name_the_failed_step(tmp_path: Path) -> None:
    """A start whose start_arm times out twice: the window ends restored but INCONCLUSIVE (it did not decide, exit
    1); the run's causes and the report's first lines name the failed step and its error, before any table."""
    w = world(tmp_path, [window("seed000-controlled.toml", "cmd-failed", chain="none")])
    env = _cli_env(tmp_path)
    try:
        gate_all(w)
        site = _command_site(tmp_path, w.sim.url)
        site.write_text(site.read_text().replace('start_arm {arm} {role}"\ntimeout_s = 1800',
                                                 'start_arm {arm} {role}"\ntimeout_s = 2'))
        (tmp_path / "site-state" / "inject").mkdir(parents=True)
        (tmp_path / "site-state" / "inject" / "start_arm.hang").write_text("")
        proc = subprocess.run([TALLY, "window", "run", "cmd-failed", "--site", str(site), "--execute"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "ending restored, decision INCONCLUSIVE" in proc.stdout
        causes = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("cause: ")]
        assert causes[0].startswith("cause: start_arm on site failed at ") and "timed out after 2 s" in causes[0]
        assert causes[-1] == "cause: measurement ended: a step failed, after 0 wave(s)"
        assert state(w.book).production == "up"
        report = subprocess.run([TALLY, "window", "report", "cmd-failed", "--out", str(tmp_path / "report")],
                                env=env, capture_output=True, text=True, timeout=120)
        assert report.returncode == 0, report.stderr
        lines = _report_lines(tmp_path / "report" / "report.md")
        first_table = next(i for i, line in enumerate(lines) if line.startswith("|"))
        head = lines[:first_table]
        assert any(line.startswith("Ending: restored") for line in head), head
        assert any(line.startswith("Cause: start_arm on site failed at ") and "timed out after 2 s" in line
                   for line in head), head
    finally:
        close(w)


def test_a_second_ctrl_c_still_ends_the_window_safely_and_says_how_to_resume(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "twice", chain="none")])
    env = _cli_env(tmp_path)
    try:
        gate_all(w)
        proc = _run_until_waves(w, env, "twice", 3, stderr=subprocess.STDOUT)
        proc.send_signal(signal.SIGINT)
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:   # the second Ctrl-C once the first one was taken: the window is being ended
            lines.append(line)
            if line.startswith("SIGINT: stopping measurement"):
                proc.send_signal(signal.SIGINT)
                break
        rest, _ = proc.communicate(timeout=120)
        out = "".join(lines) + rest
        assert proc.returncode == 130, out[-2000:]
        assert "SIGINT again: the window is being ended safely" in out
        assert "`tally window resume twice` finds where it stopped and restores production" in out
        s = state(w.book)
        assert s.windows["twice"].ending == "restored" and s.production == "up"
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_not_admitted_is_said_before_the_site_is_read_even_with_no_server_up(tmp_path: Path) -> None:
    """With no server at the site's address, `--execute` before the gates says "not admitted" (exit 1), not that the
    simulator did not give its config (exit 3): what is known from the ledger is said before the site is asked."""
    import socket

    w = world(tmp_path, [window("seed000-controlled.toml", "early", chain="none")])
    env = _cli_env(tmp_path)
    try:
        with socket.socket() as probe:   # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        site = tmp_path / "site-down.toml"
        site.write_text(f'kind = "sim"\nurl = "http://127.0.0.1:{port}"\n')
        for item in w.plans:   # registered, no gate run
            register_plan(w.book, w.root, item)
        before = len(list(w.book.events()))
        for verb in (["run", "early", "--execute"], ["resume", "early"]):
            proc = subprocess.run([TALLY, "window", *verb, "--site", str(site)], env=env, capture_output=True,
                                  text=True, timeout=60)
            assert proc.returncode == 1, (verb, proc.stderr)
            assert proc.stderr.startswith("tally: window early is not admitted: ") and "did not give" not in proc.stderr
        assert len(list(w.book.events())) == before   # nothing appended
    finally:
        close(w)


@pytest.mark.parametrize(("fields", "abort", "code"), [
    ({"ending": "restored", "decision": "WIN", "measurement": "complete"}, False, 0),
    ({"ending": "restored", "decision": "INCONCLUSIVE", "measurement": "complete"}, False, 0),  # decided: can't tell
    ({"ending": "restored", "decision": "INCONCLUSIVE", "measurement": "failed"}, False, 1),    # did not decide
    ({"ending": "restored", "decision": "INCONCLUSIVE", "measurement": "interrupted", "interrupted": "SIGINT"},
     False, 130),
    ({"ending": "chained", "decision": "INCONCLUSIVE", "measurement": "interrupted", "interrupted": "SIGTERM"},
     False, 130),
    ({"ending": None, "decision": None, "blocked": "restore failed", "interrupted": "SIGINT"}, False, 1),  # not safe
    ({"ending": "aborted", "decision": "REJECT"}, False, 1),
    ({"ending": "aborted", "decision": "REJECT"}, True, 0),
    ({"ending": "restored", "decision": "WIN", "escalated": True}, False, 1),
])
def test_exit_code_of_a_run(fields: dict[str, object], abort: bool, code: int) -> None:
    result = RunResult("w", None, None, [])
    for name, value in fields.items():
        setattr(result, name, value)
    assert result.exit_code(abort=abort) == code
