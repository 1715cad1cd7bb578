"""The code that builds a rule's input from a window's events, counted against what the window measured.

Two bugs this file would have caught: win2-v1 decided with the rule's default 3 repeats
whatever the plan registered (a 2-repeat plan could never decide), and pp3-v1 kept the
last request per (block, family, context) (a wave of two prompts reached the decision as
one). Both are fixed in input builder 2; a decision recorded by builder 1 still replays
to its own recorded input.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from runner.audit.full import run_audit
from runner.decide.inputs import INPUT_BUILDER, build_input, decision_for, replay_window
from runner.events import payloads as p
from runner.execution import endings
from runner.execution import window as execution
from runner.plan.register import registered_plan
from runner.report.units import fixed
from runner.report.window import window_report

from ..runner.script import SIMPLE_PP3
from .worlds import arms, close, gate_all, run, small, window, world

BETTER = ("{ draft_depth = 5, accept_per_pos = [0.95, 0.90, 0.85, 0.80, 0.75], step_base_ms = 9.0, "
          "step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }")
BASE = ("{ draft_depth = 5, accept_per_pos = [0.80, 0.70, 0.60, 0.50, 0.40], step_base_ms = 9.0, "
        "step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }")


def _decision(w: Any, window_id: str) -> dict[str, Any]:
    return next(w.book.events(stream=f"window/{window_id}", types=["decision.recorded"])).payload


def _waves(w: Any, window_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{window_id}", types=["wave.measured"])]


@pytest.mark.parametrize("repeats", [2, 4])
def test_win2_decides_with_the_registered_repeats(tmp_path: Path, repeats: int) -> None:
    def edit(text: str) -> str:
        text = re.sub(r"repeats = 3", f"repeats = {repeats}", small(text, max_tokens=256))
        return arms(text, A=BASE, B=BETTER)

    w = world(tmp_path, [window("seed000-controlled.toml", "reps", edit=edit, chain="none")],
              sim_config={"seed": 2, "start_jitter": 0.01}, time_scale=0.05)
    try:
        gate_all(w)
        result = run(w, "reps")
        assert result.ending == "restored"
        decision = _decision(w, "reps")
        assert decision["input_builder"] == INPUT_BUILDER == 5
        assert decision["params"]["repeats"] == repeats == decision["input"]["params"]["repeats"]
        measured = _waves(w, "reps")
        # 3 starts x 1 cell x repeats x 2 families, each one wave, every one in the input
        assert len(measured) == 3 * repeats * 2
        assert len(decision["input"]["waves"]) == len(measured)
        assert {wave["repeat"] for wave in decision["input"]["waves"]} == set(range(1, repeats + 1))
        cell = decision["result"]["cells"]["short-b1"]
        # a better candidate: WIN, or NO_CHANGE when 2 repeats (df = 1) give too wide an interval
        assert decision["result"]["decision"] in ("WIN", "NO_CHANGE"), decision["result"].get("reasons")
        assert len(cell["metrics"]["pooled_rate_tps"]["d"]) == repeats
        assert not any("missing" in reason for reason in decision["result"].get("reasons", []))
        assert replay_window(w.book, "reps").match
        _accepted_is_delivered(decision, measured, w, "reps")
        if repeats == 2:  # what builder 1 made of the same events: the rule waited for a third repeat
            events = list(w.book.events(stream="window/reps"))
            _, old = decision_for(registered_plan(w.book, "reps").plan, events, builder=1)
            assert old["decision"] == "INCONCLUSIVE"
            assert any("repeat 3" in reason for reason in old["reasons"]), old["reasons"]
    finally:
        close(w)


def _accepted_is_delivered(decision: dict[str, Any], measured: list[dict[str, Any]], w: Any, window_id: str) -> None:
    """Input builder 4: a wave's accepted is the drafts its requests delivered, the server's count beside it
    (the simulator counts drafts accepted past max_tokens, as vLLM does); builder 3 rebuilds the raw count."""
    rows = decision["input"]["waves"]
    assert decision["input"]["accepted_basis"].startswith("delivered")
    cut = 0
    for row, wave in zip(rows, measured, strict=True):
        counters = wave["counters"]
        assert row["accepted"] == counters["accepted_delivered"] <= counters["accepted"] == row["accepted_counted"]
        # every decode step delivers one token plus its accepted drafts: the client's tokens agree
        assert row["rounds"] + row["accepted"] == wave["client"]["tokens_after_first"]
        cut += counters["accepted"] - counters["accepted_delivered"]
    assert cut > 0   # drafts accepted past max_tokens were counted, and left out of the rule's input
    events = list(w.book.events(stream=f"window/{window_id}"))
    old = build_input(registered_plan(w.book, window_id).plan, events, builder=3).input
    assert "accepted_basis" not in old
    assert [r["accepted"] for r in old["waves"]] == [m["counters"]["accepted"] for m in measured]


def _two_prompts(text: str) -> str:
    text = text.replace("max_tokens = 1024", "max_tokens = 48")
    text = text.replace('short = ["op-short-01"], 32k = ["op-32k-01"]',
                        'short = ["op-short-01", "op-short-02"], 32k = ["op-32k-01", "op-32k-02"]')
    return text.replace('short = ["fi-short-01"], 32k = ["fi-32k-01"]',
                        'short = ["fi-short-01", "fi-short-02"], 32k = ["fi-32k-01", "fi-32k-02"]')


def test_pp3_uses_every_request_of_every_wave(tmp_path: Path) -> None:
    w = world(tmp_path, [window(str(SIMPLE_PP3), "two", edit=_two_prompts)])
    try:
        gate_all(w)
        assert run(w, "two").ending == "restored"
        measured = [r for wave in _waves(w, "two") for r in wave["requests"]]
        # 4 blocks x 2 families x (2 short + 2 at 32k + 1 at 150k)
        assert len(measured) == 4 * 2 * 5
        requests = _decision(w, "two")["input"]["requests"]
        assert len(requests) == len(measured) == 40
        assert all(r["status"] == "ok" for r in requests)
        keys = {(r["block"], r["family"], r["context"], r["prompt_id"]) for r in requests}
        assert len(keys) == 40
        assert sorted(r["delivered_tokens"] for r in requests) == sorted(r["delivered_tokens"] for r in measured)
        assert replay_window(w.book, "two").match
        # the report's per-pair rate pools the block's two requests, as the rule does
        a1 = [r for r in requests if (r["block"], r["family"], r["context"]) == ("A1", "opinions", "short")]
        assert len(a1) == 2
        pooled = sum(r["delivered_tokens"] for r in a1) / sum(r["decode_s"] for r in a1)
        text = Path(window_report(w.book, "two", tmp_path / "report")["markdown"]).read_text()
        row = next(line for line in text.splitlines() if line.startswith("| opinions/short |"))
        assert row.split("|")[2].strip() == fixed(pooled)   # the report's fixed notation (no e-notation)
        _accepted_per_round_is_a_diagnostic(w, "two", text)
    finally:
        close(w)


def _accepted_per_round_is_a_diagnostic(w: Any, window_id: str, report: str) -> None:
    """pp3's accepted/round per arm (input builder 5): every wave's counters counted, shown, and never deciding."""
    decision = _decision(w, window_id)
    role = {"A1": "A", "A2": "A", "B1": "B", "B2": "B"}
    sums: dict[str, list[int]] = {"A": [0, 0], "B": [0, 0]}
    for wave in _waves(w, window_id):
        counters = wave["counters"]
        accepted = counters["accepted_delivered"] if counters.get("accepted_delivered") is not None \
            else counters["accepted"]
        sums[role[wave["start"]]][0] += accepted
        sums[role[wave["start"]]][1] += counters["rounds"]
    expected = {arm: round(a / r, 6) for arm, (a, r) in sums.items()}
    assert all(r > 0 for _, r in sums.values()) and expected["B"] > 0
    assert decision["input"]["diagnostics"] == {"accepted_per_round": expected}
    assert decision["result"]["diagnostics"] == {"accepted_per_round": expected}
    for arm, value in expected.items():
        assert f"| accepted/round, arm {arm} (diagnostic) | {value:.3f} |" in report
    # it cannot override: the rule decides the same without it
    from runner.decide.rules import compute

    without = {k: v for k, v in decision["input"].items() if k != "diagnostics"}
    rest = {k: v for k, v in compute(without).items() if k != "diagnostics"}
    assert rest == {k: v for k, v in decision["result"].items() if k != "diagnostics"}
    # builder 4 (decisions recorded before the diagnostic) rebuilds without it
    events = list(w.book.events(stream=f"window/{window_id}"))
    old = build_input(registered_plan(w.book, window_id).plan, events, builder=4).input
    assert "diagnostics" not in old


def _decide_as_builder_one(self: endings.EndingSteps, _s: Any, _r: Any) -> None:
    """The decision step as tally wrote it before input builder 2: no ``input_builder`` member."""
    events = list(self.ledger.events(stream=f"window/{self.window}"))
    archive = list(self.ledger.events(stream="archive", types=["archive.control_start"]))
    built, outcome = decision_for(self.plan, events, archive, builder=1)
    self.append([("decision.recorded", p.DecisionRecorded(
        rule=self.plan.protocol, params=built.input["params"], inputs_digest=built.digest, input=built.input,
        result=outcome), ())])


def test_a_decision_by_builder_one_still_replays_to_its_own_input(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(execution.STEP_HANDLERS, "decide", _decide_as_builder_one)
    w = world(tmp_path, [window(str(SIMPLE_PP3), "old", edit=_two_prompts)])
    try:
        gate_all(w)
        assert run(w, "old").ending == "restored"
        decision = _decision(w, "old")
        assert "input_builder" not in decision
        assert len(decision["input"]["requests"]) == 4 * 2 * 3  # the old bug, as recorded
        assert replay_window(w.book, "old").match
        report = run_audit(book=w.book)
        assert report.ok, report
        events = list(w.book.events(stream="window/old"))
        plan = registered_plan(w.book, "old").plan
        assert len(build_input(plan, events).input["requests"]) == 40  # today's builder on the same events
    finally:
        close(w)


def test_registered_primaries_decide_record_and_replay(tmp_path: Path) -> None:
    """A win2 plan with two primaries and Holm: the input carries them, the decision records roles, the
    correction and each primary's test, and replays as MATCH; the report says which metrics decide."""
    def edit(text: str) -> str:
        text = text.replace("guard_min_repeats = 2\n", 'guard_min_repeats = 2\nprimaries = ["pooled_rate_tps", '
                            '"decode_tps"]\ndecide = "any"\ncorrection = "holm"\n')
        return arms(small(text, max_tokens=256), A=BASE, B=BETTER)

    w = world(tmp_path, [window("seed000-controlled.toml", "holm", edit=edit, chain="none")],
              sim_config={"seed": 2, "start_jitter": 0.01}, time_scale=0.05)
    try:
        gate_all(w)
        assert run(w, "holm").ending == "restored"
        decision = _decision(w, "holm")
        params = decision["input"]["params"]
        assert (params["primaries"], params["decide"], params["correction"]) == (["pooled_rate_tps", "decode_tps"],
                                                                                  "any", "holm")
        result = decision["result"]
        assert result["roles"]["decode_tps"] == "primary" and result["roles"]["accepted_per_round"] == "guard"
        assert result["correction"]["applied"] == "holm"
        metrics = result["cells"]["short-b1"]["metrics"]
        assert {metrics[n]["test"]["rank"] for n in ("pooled_rate_tps", "decode_tps")} == {1, 2}
        assert replay_window(w.book, "holm").match
        paths = window_report(w.book, "holm", tmp_path / "report")
        text = Path(paths["markdown"]).read_text(encoding="utf-8")
        assert "decide: pooled_rate_tps, decode_tps (primary); guards accepted_per_round" in text
        assert "registered holm; applied: holm" in text
    finally:
        close(w)
