"""Know the servers before the drain: a plan whose arms the site cannot start is refused before any host
action; `tally sim config --plan` writes a simulator config that serves exactly the plan's arms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from runner.sim import start

from .worlds import close, gate_all, small, window, world

TALLY = str(Path(sys.executable).with_name("tally"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TALLY_DB=str(tmp_path / "tally.db"), TALLY_KEY=str(tmp_path / ".tally/root.pem"))
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=300)


def _site_sim(tmp_path: Path, url: str) -> Path:
    """examples/site-sim.toml as its comment says to use it, pointed at ``url``."""
    text = (EXAMPLES / "site-sim.toml").read_text()
    assert 'url = "http://127.0.0.1:8000"' in text
    site = tmp_path / "site-sim.toml"
    site.write_text(text.replace('url = "http://127.0.0.1:8000"', f'url = "{url}"'))
    return site


def test_the_site_sim_example_with_a_plain_simulator_refuses_the_plan_before_any_host_action(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "arms", chain="none")])
    plain = start(seed=3, time_scale=0.01)   # `tally sim serve`: the default config's arms, not the plan's
    try:
        gate_all(w)
        site = _site_sim(tmp_path, plain.url)
        size = w.book.size()
        dry = _cli(tmp_path, "window", "run", "arms", "--site", str(site), "--dry-run", "--json")
        assert dry.returncode == 1, dry.stderr
        refusals = json.loads(dry.stdout)["refusals"]
        assert len(refusals) == 1 and "serves no arm named 'production-policy'" in refusals[0]
        assert "tally sim config --plan" in refusals[0]
        done = _cli(tmp_path, "window", "run", "arms", "--site", str(site), "--execute")
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "refused before any host action" in done.stderr and "serves no arm named" in done.stderr
        assert w.book.size() == size   # nothing appended: the window is not used up
        assert httpx.get(f"{plain.url}/_sim/state").json()["actions"] == []   # no host touched
    finally:
        plain.stop()
        close(w)


def test_sim_config_for_the_plan_serves_its_arms_and_the_window_runs(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "fits", chain="none", edit=small)])
    try:
        gate_all(w)
        plan = tmp_path / "plan.toml"
        plan.write_text(small((EXAMPLES / "seed000-controlled.toml").read_text()))
        (tmp_path / "families").mkdir(exist_ok=True)
        for name in ("opinions.jsonl", "filings.jsonl"):
            (tmp_path / "families" / name).write_bytes((EXAMPLES / "families" / name).read_bytes())
        made = _cli(tmp_path, "sim", "config", "--plan", str(plan), "--time-scale", "0.01")
        assert made.returncode == 0, made.stderr
        config = json.loads(made.stdout)
        path = tmp_path / "sim-for-plan.json"
        path.write_text(made.stdout)
        served = start(path)
        try:
            assert set(config["arms"]) == {"fixed5-greedy", "fixed5-sampled", "production"}   # the plan's, named so
            site = _site_sim(tmp_path, served.url)
            dry = _cli(tmp_path, "window", "run", "fits", "--site", str(site), "--dry-run", "--json")
            assert dry.returncode == 0 and json.loads(dry.stdout)["refusals"] == [], dry.stdout[-2000:]
            done = _cli(tmp_path, "window", "run", "fits", "--site", str(site), "--execute", "--json")
            assert done.returncode in (0, 1), done.stderr
            result = json.loads(done.stdout)
            assert result["ending"] == "restored" and not result["blocked"], result
        finally:
            served.stop()
    finally:
        close(w)


def test_sim_config_plan_refuses_a_bad_plan_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("window_id = 3\n")
    result = _cli(tmp_path, "sim", "config", "--plan", str(bad))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
