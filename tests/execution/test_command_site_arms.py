"""Know a command site's arms before the drain: its optional ``list_arms`` action.

A command site (examples/site-commands.toml over statehost.sh, the measurement on a simulator)
that lists its arms has a plan it cannot start as declared refused before any host action: an
arm it lacks, another config digest, speculative decoding on or off against the declaration.
Nothing is appended, and the only command that ran is ``list_arms`` itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import ExternalError, FormatError
from runner.demo.scenarios import pass_chain_gate
from runner.drivers.base import ServedArm, served_from_facts, settle
from runner.drivers.site import load_site
from runner.execution.fit import arm_refusals
from runner.execution.window import WindowRunner
from runner.gates.admission import admit
from runner.plan.register import registered_plan
from tests.runner.script import EXAMPLES

from .worlds import close, gate_all, small, window, world

TALLY = str(Path(sys.executable).with_name("tally"))
WINDOW = "cmdarms"
DIGEST = "ab" * 32


def _site(tmp_path: Path, url: str, *, list_arms: bool = True) -> Path:
    shutil.copytree(EXAMPLES / "site-scripts", tmp_path / "site-scripts", dirs_exist_ok=True)
    text = (EXAMPLES / "site-commands.toml").read_text().replace("http://127.0.0.1:8000", url)
    if list_arms:
        text += '\n[actions.list_arms]\ncommand = "site-scripts/statehost.sh {state_dir} list_arms"\n'
    site = tmp_path / "site.toml"
    site.write_text(text)
    (tmp_path / "site-state").mkdir(exist_ok=True)
    return site


def _listed(w: Any, **change: dict[str, Any] | None) -> dict[str, Any]:
    """What a host serving exactly the plan's arms lists; ``change``: arm name -> its entry (None: absent)."""
    arms: dict[str, Any] = {}
    for arm in registered_plan(w.book, WINDOW).plan.arms:
        arms[arm.name] = {"config_digest": arm.config_digest, "speculative_config": arm.speculative}
    for name, entry in change.items():
        if entry is None:
            arms.pop(name)
        else:
            arms[name] = entry
    return arms


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TALLY_DB=str(tmp_path / "tally.db"), TALLY_KEY=str(tmp_path / ".tally/root.pem"))
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=300)


def _ran(tmp_path: Path) -> list[str]:
    log = tmp_path / "site-state" / "actions.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def armed(tmp_path: Path) -> Iterator[Any]:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=small)])
    gate_all(w)
    pass_chain_gate(w.book, w.root, WINDOW, lambda _t: None)
    admit(w.book, w.root, WINDOW)
    yield w
    close(w)


def _refused(tmp_path: Path, w: Any, arms: dict[str, Any]) -> str:
    """Dry run and execute with the host listing ``arms``: both refuse; the reason (one line)."""
    site = _site(tmp_path, w.sim.url)
    (tmp_path / "site-state" / "arms.json").write_text(json.dumps(arms))
    size = w.book.size()
    dry = _cli(tmp_path, "window", "run", WINDOW, "--site", str(site), "--dry-run", "--json")
    assert dry.returncode == 1, dry.stderr
    report = json.loads(dry.stdout)
    assert report["arms_checked"] is True and len(report["refusals"]) == 1, report["refusals"]
    done = _cli(tmp_path, "window", "run", WINDOW, "--site", str(site), "--execute")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "refused before any host action" in done.stderr and "Traceback" not in done.stderr
    assert w.book.size() == size                         # nothing appended: the window is not used up
    assert set(_ran(tmp_path)) == {"list_arms"}           # no other command ran on the hosts
    assert report["refusals"][0] in done.stderr
    return str(report["refusals"][0])


def test_an_arm_the_command_site_does_not_list_is_refused_before_any_host_action(tmp_path: Path, armed: Any) -> None:
    reason = _refused(tmp_path, armed, _listed(armed, **{"fixed5-sampled": None}))
    assert "serves no arm named 'fixed5-sampled'" in reason and "list_arms" in reason


def test_another_config_digest_is_refused_before_any_host_action(tmp_path: Path, armed: Any) -> None:
    plan = registered_plan(armed.book, WINDOW).plan
    greedy = plan.arms[0]
    reason = _refused(tmp_path, armed, _listed(armed, **{greedy.name: {"config_digest": DIGEST}}))
    assert f"arm {greedy.name!r} declares config_digest {greedy.config_digest[:16]}" in reason
    assert f"reports {DIGEST[:16]}" in reason and "start_config would fail after the drain" in reason


def test_speculative_decoding_off_against_the_declaration_is_refused(tmp_path: Path, armed: Any) -> None:
    plan = registered_plan(armed.book, WINDOW).plan
    spec = next(arm for arm in plan.arms if arm.speculates)
    entry = {"config_digest": spec.config_digest, "speculative_config": None}
    reason = _refused(tmp_path, armed, _listed(armed, **{spec.name: entry}))
    assert f"arm {spec.name!r} declares speculative decoding, but the site says a start of it runs none" in reason


def test_a_site_listing_the_plans_arms_runs_the_window(tmp_path: Path, armed: Any) -> None:
    site = _site(tmp_path, armed.sim.url)
    (tmp_path / "site-state" / "arms.json").write_text(json.dumps(_listed(armed)))
    dry = _cli(tmp_path, "window", "run", WINDOW, "--site", str(site), "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["refusals"] == [], dry.stdout[-2000:]
    assert json.loads(dry.stdout)["arms_checked"] is True
    driver = load_site(site)
    result = WindowRunner(armed.book, armed.root, WINDOW, driver, time_scale=armed.time_scale).run()
    assert result.ending == "restored" and not result.blocked
    ran = _ran(tmp_path)
    assert ran.count("list_arms") == 2 and ran[-1] != "list_arms"    # the dry run's and the run's, then the window
    assert ran.index("list_arms", 1) < ran.index("drain")           # asked before the drain
    recorded = [e.payload["action"] for e in armed.book.events(stream=f"window/{WINDOW}", types=["host.action"])]
    assert "list_arms" not in recorded and "drain" in recorded      # read, not recorded (like the fit probes)


def test_a_failed_or_malformed_list_is_one_line_exit_3_and_nothing_appended(tmp_path: Path, armed: Any) -> None:
    site = _site(tmp_path, armed.sim.url)   # no arms.json: the host's list_arms fails
    size = armed.book.size()
    done = _cli(tmp_path, "window", "run", WINDOW, "--site", str(site), "--execute")
    assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr
    assert "list_arms action failed" in done.stderr and "no arms.json" in done.stderr
    (tmp_path / "site-state" / "arms.json").write_text(json.dumps({"fixed5-greedy": {"config_digest": "xyz"}}))
    dry = _cli(tmp_path, "window", "run", WINDOW, "--site", str(site), "--dry-run")
    assert dry.returncode == 3 and "config_digest must be 64 lowercase hex characters" in dry.stderr, dry.stderr
    assert armed.book.size() == size and set(_ran(tmp_path)) == {"list_arms"}


def test_a_site_without_list_arms_says_its_arms_are_not_checked(tmp_path: Path, armed: Any) -> None:
    site = _site(tmp_path, armed.sim.url, list_arms=False)
    dry = _cli(tmp_path, "window", "run", WINDOW, "--site", str(site), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["arms_checked"] is False and report["refusals"] == []
    assert any(line.startswith("arms: not checked before the drain") for line in report["lines"])
    assert load_site(site).served_arms() is None and _ran(tmp_path) == []   # nothing asked of the hosts


# ---------------------------------------------------------------------- the arms fact


@pytest.mark.parametrize(("value", "problem"), [
    ([], "arms must be an object"),
    ({"": {}}, "an arm name must have 1 to 200 characters"),
    ({"x" * 201: {}}, "an arm name must have 1 to 200 characters"),
    ({"a": "b"}, "arm 'a' must be an object"),
    ({"a": {"digest": DIGEST}}, "unknown members digest"),
    ({"a": {"config_digest": DIGEST.upper()}}, "config_digest must be 64 lowercase hex"),
    ({"a": {"speculative_config": "ngram"}}, "speculative_config must be an object or null"),
    ({f"a{i}": {} for i in range(1001)}, "more than 1000"),
])
def test_a_malformed_arms_fact_fails_the_action(value: Any, problem: str) -> None:
    ok, facts = settle("list_arms", None, {}, True, {"arms": value})
    assert not ok and problem in facts["error"]
    with pytest.raises(FormatError, match=problem.split(" ")[0]):
        served_from_facts(value)


def test_list_arms_must_list_something_to_succeed() -> None:
    ok, facts = settle("list_arms", None, {}, True, {})
    assert not ok and "list_arms reported success but established no arms" in facts["error"]
    served = served_from_facts({"a": {}, "b": {"config_digest": DIGEST, "speculative_config": None}})
    assert served["a"] == ServedArm("a") and served["b"] == ServedArm("b", DIGEST, None, True)


def test_the_simulator_says_what_each_start_reports(tmp_path: Path, armed: Any) -> None:
    """A sim site reads its arms and their reported digests from the config: a plan whose digest the
    simulator would not report is refused before the drain (the start_config failure it would be)."""
    from runner.drivers.sim import SimDriver

    driver = SimDriver(armed.sim.url)
    served = driver.served_arms()
    assert served is not None
    plan = registered_plan(armed.book, WINDOW).plan
    assert arm_refusals(plan, driver) == []   # the demo's simulator serves the plan's arms as declared
    for arm in plan.arms:
        assert served[arm.name].config_digest == arm.config_digest
        assert served[arm.name].reports_speculative and bool(served[arm.name].speculative_config) == arm.speculates
    other = {name: ServedArm(name, DIGEST, arm.speculative_config, True) for name, arm in served.items()}
    driver._arms = other   # what a simulator configured with other digests says
    reasons = arm_refusals(plan, driver)
    assert len(reasons) == len(plan.arms) and all("start_config would fail after the drain" in r for r in reasons)
    with pytest.raises(ExternalError):
        SimDriver("http://127.0.0.1:9").served_arms()   # nothing listens: one clear error, not a traceback
