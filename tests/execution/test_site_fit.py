"""Sites without GPU clocks, and windows refused before any host action when the site cannot serve their rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.errors import PolicyError
from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.drivers.site import load_site
from runner.execution.window import WindowRunner
from runner.report.window import window_report

from ..runner.script import SIMPLE_PP3
from .worlds import close, gate_all, small, state, window, world

TALLY = str(Path(sys.executable).with_name("tally"))


def no_clocks(text: str) -> str:
    return text.replace("production_clock_cap_mhz = 2300", 'production_clock_cap_mhz = "none"')


def _site(tmp_path: Path, w: Any, extra: str) -> Path:
    site = tmp_path / "site-no-clocks.toml"
    site.write_text(f'kind = "sim"\nurl = "{w.sim.url}"\n{extra}')
    return site


def _run(w: Any, window_id: str, site: Path) -> Any:
    driver = load_site(site)
    try:
        return WindowRunner(w.book, w.root, window_id, driver, time_scale=w.time_scale).run()
    finally:
        driver.close()


@pytest.mark.parametrize(("plan_file", "edit"), [
    ("seed000-controlled.toml", lambda t: no_clocks(small(t))),
    pytest.param(str(SIMPLE_PP3), lambda t: no_clocks(t.replace("max_tokens = 1024", "max_tokens = 48")),
                 id="seed003-abba-simple"),
])
def test_a_window_on_a_site_without_gpu_clocks(tmp_path: Path, plan_file: str, edit: Any) -> None:
    w = world(tmp_path, [window(plan_file, "cpu", edit=edit, chain="none")])
    try:
        gate_all(w)
        assert state(w.book).windows["cpu"].admitted_seq is not None
        result = _run(w, "cpu", _site(tmp_path, w, "clocks = false\n"))
        assert result.ending == "restored", result.blocked
        events = list(w.book.events(stream="window/cpu"))
        began = [e.payload for e in events if e.type == "start.began"]
        assert began and all(b["clock_cap_mhz"] is None for b in began)
        actions = [e.payload["action"] for e in events if e.type == "host.action"]
        assert "read_clock_cap" not in actions
        assert not any(e.type == "thermal.event" for e in events)
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        assert decision["input"].get("production_clock_cap_mhz", "absent") in (None, "absent")
        if plan_file.startswith("seed000"):
            assert decision["result"]["clocks"].startswith("not applicable")
            assert not any("clock" in r for r in decision["result"]["reasons"])
        assert replay_window(w.book, "cpu").match
        assert run_audit(book=w.book).ok
        paths = window_report(w.book, "cpu", tmp_path / "report")
        if plan_file.startswith("seed000"):
            assert "not applicable (no GPU clocks on this site)" in Path(paths["markdown"]).read_text()
    finally:
        close(w)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TALLY_DB=str(tmp_path / "tally.db"), TALLY_KEY=str(tmp_path / ".tally/root.pem"))
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_plan_and_a_site_that_disagree_on_clocks_are_refused_before_any_host_action(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "clash", chain="none")])
    try:
        gate_all(w)
        site = _site(tmp_path, w, "clocks = false\n")
        size = w.book.size()
        host_actions = len(httpx.get(f"{w.sim.url}/_sim/state").json()["actions"])
        dry = _cli(tmp_path, "window", "run", "clash", "--site", str(site), "--dry-run", "--json")
        assert dry.returncode == 1, dry.stderr
        refusals = json.loads(dry.stdout)["refusals"]
        assert len(refusals) == 1 and "declares clocks = false" in refusals[0]
        done = _cli(tmp_path, "window", "run", "clash", "--site", str(site), "--execute")
        assert done.returncode == 1 and "ending" not in done.stdout
        assert done.stderr.count("\n") == 1 and "refused before any host action" in done.stderr
        assert w.book.size() == size  # nothing appended
        assert len(httpx.get(f"{w.sim.url}/_sim/state").json()["actions"]) == host_actions  # no host touched
    finally:
        close(w)


def test_a_clockless_plan_on_a_site_with_clocks_is_refused(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed003-abba.toml", "noclock", edit=no_clocks)])
    try:
        gate_all(w)
        size = w.book.size()
        with pytest.raises(PolicyError, match="registers no production clock cap, but the sim site has GPU clocks"):
            _run(w, "noclock", _site(tmp_path, w, ""))
        assert w.book.size() == size
    finally:
        close(w)


def test_win2_on_a_server_without_metrics_is_refused_before_any_host_action(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "nometrics", chain="none")],
              sim_config={"faults": {"metrics_down": True}})
    try:
        gate_all(w)
        size = w.book.size()
        done = _cli(tmp_path, "window", "run", "nometrics", "--site", str(tmp_path / "site.toml"), "--execute")
        assert done.returncode == 1 and "ending" not in done.stdout
        assert done.stderr.count("\n") == 1
        assert "win2-v1 decides on the server's engine round counters, and metrics at" in done.stderr
        assert "answered HTTP 503" in done.stderr
        assert w.book.size() == size
    finally:
        close(w)


@pytest.mark.parametrize(("plan_file", "source", "edit", "expected"), [
    ("seed000-controlled.toml", "none", small, "counter source 'none'"),
    ("seed000-controlled.toml", "sglang", small, "cannot count a speculative arm's rounds"),
    ("seed003-abba.toml", "llamacpp", lambda t: t, 'register the per-token figure instead (guard = "tpot_ms"'),
])
def test_a_rule_the_counter_source_cannot_feed_is_refused(tmp_path: Path, plan_file: str, source: str, edit: Any,
                                                           expected: str) -> None:
    w = world(tmp_path, [window(plan_file, "fed", edit=edit, chain="none")])
    try:
        gate_all(w)
        size = w.book.size()
        site = _site(tmp_path, w, f'[endpoints]\ncounter_source = "{source}"\n')
        dry = _cli(tmp_path, "window", "run", "fed", "--site", str(site), "--dry-run", "--json")
        assert dry.returncode == 1, dry.stderr
        refusals = json.loads(dry.stdout)["refusals"]
        assert len(refusals) == 1 and expected in refusals[0], refusals
        with pytest.raises(PolicyError, match="refused before any host action"):
            _run(w, "fed", site)
        assert w.book.size() == size
    finally:
        close(w)


def test_a_primed_cell_over_the_servers_context_is_refused_before_the_drain(tmp_path: Path) -> None:
    """context + max_tokens over vLLM's max_model_len, where priming verifies the context: every request of that
    cell would get HTTP 400 after the drain."""
    from runner.plan.parse import load_plan

    from ..runner.script import EXAMPLES

    plan = load_plan(EXAMPLES / "seed003-abba.toml")
    assert plan.priming is not None
    asked = {cell.name: cell.tokens + plan.sampling.max_tokens for cell in plan.cells}
    longest = max(asked.values())
    over = sorted(name for name, need in asked.items() if need == longest)
    w = world(tmp_path, [window("seed003-abba.toml", "long", edit=lambda t: t)], sim_config={"max_model_len": longest - 1})
    try:
        gate_all(w)
        size = w.book.size()
        site = _site(tmp_path, w, "")
        dry = _cli(tmp_path, "window", "run", "long", "--site", str(site), "--dry-run", "--json")
        assert dry.returncode == 1, dry.stderr
        refusals = json.loads(dry.stdout)["refusals"]
        assert [r.split(":")[0] for r in refusals] == [f"cell {name}" for name in over], refusals
        assert f"is {longest} tokens, over the {longest - 1} " in refusals[0] and "max_model_len" in refusals[0]
        with pytest.raises(PolicyError, match="refused before any host action"):
            _run(w, "long", site)
        assert w.book.size() == size
    finally:
        close(w)


def test_an_unprimed_context_label_is_not_held_against_the_server_but_max_tokens_is() -> None:
    """Without priming "short" names a condition, not the prompts' length; max_tokens alone is always known."""
    from ledger.stricttoml import read_toml
    from runner.execution.fit import context_refusals
    from runner.plan.parse import parse_plan

    from ..runner.script import EXAMPLES

    plan = parse_plan(read_toml(small((EXAMPLES / "seed000-controlled.toml").read_text()).encode(), "plan"))
    assert plan.priming is None and plan.sampling.max_tokens == 48
    label = min(cell.tokens for cell in plan.cells)
    assert context_refusals(plan, "m", label) == []               # a 2048-token "short" label: not the prompts
    assert context_refusals(plan, "m", None) == []                # the server does not say
    (refusal,) = context_refusals(plan, "m", 48)
    assert refusal.startswith("max_tokens 48 alone fills the 48-token context m serves")


@pytest.mark.parametrize(("value", "read"), [(4096, 4096), (True, None), (-1, None), (0, None), (1 << 40, None),
                                             ("4096", None), (4096.0, None), (None, None)])
def test_a_listed_context_length_is_read_as_hostile_input(value: Any, read: int | None) -> None:
    from runner.measure.wave import served_models
    from tests.measure.hostile import Handler, serve

    class Models(Handler):
        def do_GET(self) -> None:
            model: dict[str, Any] = {"id": "m", "object": "model"}
            if value is not None:
                model["max_model_len"] = value
            self.send_body(200, json.dumps({"object": "list", "data": [model]}).encode())

    with serve(Models) as server:
        listed = served_models(server.url, timeout_s=5.0)
    assert [(m.id, m.max_model_len) for m in listed] == [("m", read)]
