"""chain prev-ok asks the hosts too: a placeholder the ledger says is up but the host does not prove."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FormatError, PolicyError
from runner.audit.full import run_audit
from runner.execution.window import WindowRunner
from runner.gates.admission import admit
from runner.gates.chain import check_prev_ok, run_prev_ok

from .worlds import STATEHOST_SIM, close, gate_all, run, state, window, world


def test_prev_ok_probes_a_placeholder_that_is_down(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="chained")])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        w.sim.control("placeholder_down", host="sim-worker")   # behind the ledger's back
        assert check_prev_ok(state(w.book), "chain-b").verdict == "PASS"   # the ledger alone cannot see it
        record = run_prev_ok(w.book, w.root, "chain-b", w.driver)
        result = record.result
        assert result.verdict == "FAIL"
        assert any("placeholder on sim-worker is not up" in f for f in result.failures), result.failures
        assert not any("sim-head" in f for f in result.failures)
        probes = result.evidence["hosts"]["probes"]
        assert probes["placeholder_proof sim-head"]["ok"] and not probes["placeholder_proof sim-worker"]["ok"]
        assert record.aborted_event is not None   # the chain is aborted: the window must restore
        gate = state(w.book).windows["chain-b"].gates["chain_prev_ok"]
        assert gate.verdict == "FAIL"
    finally:
        close(w)


def test_prev_ok_with_the_hosts_as_the_ledger_says_passes(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="chained")])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        record = run_prev_ok(w.book, w.root, "chain-b", w.driver)
        assert record.result.verdict == "PASS", record.result.failures
        assert set(record.result.evidence["hosts"]["probes"]) == {
            "preflight", "placeholder_proof sim-head", "placeholder_proof sim-worker"}
        assert run(w, "chain-b").ending == "chained"
    finally:
        close(w)


def _chained_to_b(tmp_path: Path) -> tuple[Any, dict[str, Any], Path]:
    """chain-a run and chained, chain-b (the last) gated and admitted; (world, chain-a's snapshot, a wrong capture)."""
    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="last")])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        drained = next(e.payload for e in w.book.events(stream="window/chain-a", types=["production.snapshot"]))
        wrong = _write(tmp_path / "wrong.json", {"sha256": "0" * 64, "identity": drained["identity"]})
        run_prev_ok(w.book, w.root, "chain-b")
        admit(w.book, w.root, "chain-b")
    except BaseException:
        close(w)
        raise
    return w, drained, wrong


def test_chain_production_capture_is_checked_against_the_marker_and_recorded(tmp_path: Path) -> None:
    w, drained, wrong = _chained_to_b(tmp_path)
    try:
        size, actions = w.book.size(), len(w.sim.state()["actions"])
        with pytest.raises(PolicyError, match="but the chain marker of window chain-a left production at"):
            WindowRunner(w.book, w.root, "chain-b", w.driver, time_scale=w.time_scale, chain_production=wrong).run()
        assert w.book.size() == size and len(w.sim.state()["actions"]) == actions   # before any host action
        with pytest.raises(FormatError, match="sha256 must be 64 lowercase hex"):
            run(w, "chain-b", chain_production=_write(tmp_path / "bad.json", {"sha256": "x", "identity": {}}))
        capture = _write(tmp_path / "capture.json", {"sha256": drained["sha256"], "identity": drained["identity"]})
        assert run(w, "chain-b", chain_production=capture).ending == "restored"
        snap = next(e.payload for e in w.book.events(stream="window/chain-b", types=["production.snapshot"]))
        assert snap["source"] == "capture" and snap["sha256"] == drained["sha256"]
        assert snap["identity"] == drained["identity"]
        assert w.book.blob(snap["blob"]["blob"].removeprefix("sha256:")).data == capture.read_bytes()
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def _ended_safely(w: Any, window_id: str) -> None:
    """No wave measured, production up, no marker, no HOLD, and the audit holds."""
    assert not list(w.book.events(stream=f"window/{window_id}", types=["wave.measured"]))
    s = state(w.book)
    assert s.production == "up" and s.marker is None and s.hold is None   # the chain ended safely
    assert run_audit(book=w.book).ok


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_a_chained_start_on_a_host_at_another_commit_aborts_the_chain(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="chained")])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        w.sim.set_faults(host_commit={"host": "sim-worker", "commit": "f" * 40})
        result = run(w, "chain-b")
        assert result.ending == "aborted"
        proofs = [e.payload for e in w.book.events(stream="window/chain-b", types=["host.action"])
                  if e.payload["action"] == "placeholder_proof" and e.payload["phase"] == "finished"]
        failed = [p for p in proofs if not p["ok"]]
        assert failed and failed[0]["host"] == "sim-worker"
        assert f"runs commit {'f' * 40}, not the window's" in failed[0]["detail"]["error"]
        _ended_safely(w, "chain-b")
    finally:
        close(w)


def test_chained_close_runs_the_optional_pair_close_stash_and_commit_close_in_order(tmp_path: Path) -> None:
    import shutil

    from runner.drivers.site import load_site
    from tests.runner.script import EXAMPLES

    w = world(tmp_path, [window("seed000-controlled.toml", "cmd-chain", chain="chained")],
              sim_config=STATEHOST_SIM)
    try:
        gate_all(w)
        shutil.copytree(EXAMPLES / "site-scripts", tmp_path / "site-scripts")
        text = (EXAMPLES / "site-commands.toml").read_text().replace("http://127.0.0.1:8000", w.sim.url)
        for action in ("pair_close", "hold_stash", "commit_close"):
            text += f'\n[actions.{action}]\ncommand = "site-scripts/statehost.sh {{state_dir}} {action}"\n'
        (tmp_path / "site.toml").write_text(text)
        driver = load_site(tmp_path / "site.toml")
        result = WindowRunner(w.book, w.root, "cmd-chain", driver, time_scale=w.time_scale).run()
        driver.close()
        assert result.ending == "chained", result.blocked
        log = [" ".join(line.split()[0:2]) for line in (tmp_path / "site-state" / "actions.log").read_text().splitlines()]
        close_at = log.index("placeholder_up spark-head")
        assert log[close_at:close_at + 12] == [
            "placeholder_up spark-head", "placeholder_up spark-worker", "fence spark-head", "fence spark-worker",
            "pair_close", "experiment_stop", "quiet_proof", "production_down_proof",
            "placeholder_proof spark-head", "placeholder_proof spark-worker", "hold_stash", "commit_close"]
        types = [e.type for e in w.book.events(stream="window/cmd-chain")]
        assert types[-4:-1] == ["hold.closed", "chain.marker.set", "window.closed"]
        assert run_audit(book=w.book).ok
    finally:
        close(w)


class _WorkerUnreachable:
    """The site, but the worker does not answer (the ssh to it hangs up)."""

    def __init__(self, driver: object, allowed: dict[str, tuple[str, ...]]) -> None:
        self._driver = driver
        self.allow_unreachable = allowed

    def __getattr__(self, name: str) -> object:
        return getattr(self._driver, name)

    def run(self, action: str, host: str | None, params: dict[str, object]) -> object:
        from ledger.errors import ExternalError

        if host == "sim-worker":
            raise ExternalError("ssh: connect to host sim-worker port 22: No route to host")
        return self._driver.run(action, host, params)  # type: ignore[attr-defined]


def test_allow_unreachable_per_mode_in_the_hold_and_the_probes(tmp_path: Path) -> None:
    from runner.drivers.site import load_site
    from runner.gates.chain import probe_hosts

    w = world(tmp_path, [window("seed000-production-policy.toml", "chain-a", chain="chained"),
                         window("seed000-controlled.toml", "chain-b", chain="chained")])
    try:
        gate_all(w)
        site = tmp_path / "site.toml"
        site.write_text(f'kind = "sim"\nurl = "{w.sim.url}"\n\n[allow_unreachable]\n'
                        '"production-policy" = ["sim-worker"]\n')
        driver = load_site(site)
        assert driver.allow_unreachable == {"production-policy": ("sim-worker",)}
        admit(w.book, w.root, "chain-a")
        assert WindowRunner(w.book, w.root, "chain-a", driver, time_scale=w.time_scale).run().ending == "chained"
        opened = next(e.payload for e in w.book.events(stream="window/chain-a", types=["hold.opened"]))
        assert opened["allow_unreachable"] == ["sim-worker"]
        _, refused = probe_hosts(_WorkerUnreachable(w.driver, {}), "chain-b", True)          # type: ignore[arg-type]
        assert any("placeholder_proof sim-worker: no answer" in f for f in refused)
        evidence, tolerated = probe_hosts(_WorkerUnreachable(w.driver, {}), "chain-b", True,  # type: ignore[arg-type]
                                          ("sim-worker",))
        assert tolerated == [] and evidence["probes"]["placeholder_proof sim-worker"]["unreachable_allowed"]
        bad = tmp_path / "bad.toml"
        bad.write_text(f'kind = "sim"\nurl = "{w.sim.url}"\n[allow_unreachable]\ncontrolled = ["nobody"]\n')
        with pytest.raises(FormatError, match="'nobody' is not a host of this site"):
            load_site(bad)
        driver.close()
    finally:
        close(w)


def test_a_wrong_capture_is_refused_on_the_resume_too(tmp_path: Path) -> None:
    """Killed after the HOLD opened and before the snapshot: the resume checks its capture where it records it."""
    import os
    import signal
    import subprocess
    import sys

    w, drained, wrong = _chained_to_b(tmp_path)
    try:
        capture = _write(tmp_path / "capture.json", {"sha256": drained["sha256"], "identity": drained["identity"]})
        tally = str(Path(sys.executable).with_name("tally"))
        env = dict(os.environ, TALLY_DB=str(w.directory / "tally.db"), TALLY_KEY=str(w.directory / ".tally/root.pem"))

        def cli(*args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
            extra = {"TALLY_TEST_CRASH_AFTER": crash} if crash else {}
            return subprocess.run([tally, "window", *args, "--site", str(w.directory / "site.toml"), "--json"],
                                  env={**env, **extra}, capture_output=True, text=True, timeout=300)

        killed = cli("run", "chain-b", "--execute", "--chain-production", str(capture), crash="hold.opened")
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        assert not list(w.book.events(stream="window/chain-b", types=["production.snapshot"]))
        size = w.book.size()
        refused = cli("resume", "chain-b", "--chain-production", str(wrong))
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr[-2000:]
        assert "but the chain marker of window chain-a left production at" in refused.stderr
        assert not list(w.book.events(stream="window/chain-b", types=["production.snapshot"]))
        assert w.book.size() == size  # refused before the resume appends or touches anything
        resumed = cli("resume", "chain-b", "--chain-production", str(capture))
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        snaps = [e.payload for e in w.book.events(stream="window/chain-b", types=["production.snapshot"])]
        assert [(s["source"], s["sha256"]) for s in snaps] == [("capture", drained["sha256"])]
        assert run_audit(book=w.book).ok
    finally:
        close(w)


TAG = "pp4-v2-stage"


def _proofs(w: object, window_id: str) -> list[dict[str, object]]:
    book = w.book  # type: ignore[attr-defined]
    return [e.payload for e in book.events(stream=f"window/{window_id}", types=["host.action"])
            if e.payload["action"] == "placeholder_proof" and e.payload["phase"] == "finished"]


def _tagged_chain(tmp_path: Path, first: str = "seed000-production-policy.toml") -> object:
    return world(tmp_path, [window(first, "chain-a", chain="chained"),
                            window("seed000-controlled.toml", "chain-b", chain="chained", tag=TAG)],
                 sim_config=STATEHOST_SIM)


def test_a_chained_start_checks_the_registered_tag_on_every_host(tmp_path: Path) -> None:
    w = _tagged_chain(tmp_path)
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        assert run(w, "chain-b").ending == "chained"
        commit = state(w.book).windows["chain-b"].commit
        opening = [p for p in _proofs(w, "chain-b")][:2]   # the chained start's proofs (the close has its own)
        assert [(p["host"], p["ok"], p["detail"]["tag"], p["detail"]["tag_commit"]) for p in opening] == [
            ("sim-head", True, TAG, commit), ("sim-worker", True, TAG, commit)]
        started = [e.payload for e in w.book.events(stream="window/chain-b", types=["host.action"])
                   if e.payload["action"] == "placeholder_proof" and e.payload["phase"] == "started"]
        assert started[0]["detail"]["params"] == {"expected_commit": commit, "expected_tag": TAG}
        untagged = [e.payload for e in w.book.events(stream="window/chain-a", types=["host.action"])
                    if e.payload["action"] == "placeholder_proof" and e.payload["phase"] == "started"]
        assert all("expected_tag" not in p["detail"]["params"] for p in untagged)   # no tag registered: no check
        assert run_audit(book=w.book).ok
    finally:
        close(w)


@pytest.mark.parametrize(("fault", "named"), [
    pytest.param({"tag": ""}, f"sim-worker reports no tag checked out, not the window's tag {TAG}", id="tag-missing"),
    pytest.param({"tag": TAG, "commit": "e" * 40}, f"tag {TAG} on sim-worker points at commit {'e' * 40}, not the "
                 "window's", id="tag-at-another-commit"),
    pytest.param({"tag": "pp4-v1"}, f"sim-worker has tag pp4-v1 checked out, not the window's tag {TAG}",
                 id="another-tag"),
])
def test_a_chained_start_on_a_host_without_the_windows_tag_aborts_the_chain(
        tmp_path: Path, fault: dict[str, str], named: str) -> None:
    w = _tagged_chain(tmp_path)
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        w.sim.set_faults(host_tag={"host": "sim-worker", **fault})
        result = run(w, "chain-b")
        assert result.ending == "aborted" and result.decision == "REJECT"
        failed = [p for p in _proofs(w, "chain-b") if not p["ok"]]
        assert [p["host"] for p in failed] == ["sim-worker"]
        assert named in str(failed[0]["detail"]["error"])   # type: ignore[index]
        aborted = next(e.payload for e in w.book.events(stream="window/chain-b", types=["chain.aborted"]))
        assert aborted["reason"] == "placeholder proof failed on sim-worker before the HOLD"
        _ended_safely(w, "chain-b")
    finally:
        close(w)


def test_command_site_chained_start_reads_each_hosts_tag_file(tmp_path: Path) -> None:
    import shutil

    from runner.drivers.site import load_site
    from tests.runner.script import EXAMPLES

    w = _tagged_chain(tmp_path, "seed000-controlled.toml")   # the command site's P identity is not production's
    try:
        gate_all(w)
        shutil.copytree(EXAMPLES / "site-scripts", tmp_path / "site-scripts")
        text = (EXAMPLES / "site-commands.toml").read_text().replace("http://127.0.0.1:8000", w.sim.url)
        (tmp_path / "site.toml").write_text(text)
        driver = load_site(tmp_path / "site.toml")
        try:
            assert run(w, "chain-a", driver=driver).ending == "chained"
            commit = state(w.book).windows["chain-b"].commit
            site = tmp_path / "site-state"
            (site / "tag.spark-head").write_text(f"{TAG} {commit}\n")
            (site / "tag.spark-worker").write_text(f"{TAG} {'d' * 40}\n")   # the tag moved on the worker
            result = run(w, "chain-b", driver=driver)
            assert result.ending == "aborted"
            proofs = _proofs(w, "chain-b")
            assert proofs[0]["host"] == "spark-head" and proofs[0]["ok"]
            assert proofs[1]["host"] == "spark-worker" and not proofs[1]["ok"]
            assert f"tag {TAG} on spark-worker points at commit {'d' * 40}" in str(proofs[1]["detail"]["error"])  # type: ignore[index]
            s = state(w.book)
            assert s.production == "up" and s.marker is None and s.hold is None
            assert (site / "production").read_text().strip() == "up"
        finally:
            driver.close()
    finally:
        close(w)
