"""The ``[smoke]`` plan section: what it registers, what it refuses, what greedy_check implies, and fit refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FieldError
from ledger.stricttoml import read_toml
from runner.plan import load_plan, parse_plan
from runner.rehearsal.capability import plan_needs, smoke_refusals

from .script import EXAMPLES, SIMPLE_PP3

SMOKE = (Path(__file__).resolve().parents[1] / "fixtures" / "smoke" / "seed003-smoke.toml").read_text()


def _plan(extra: str, name: str = str(SIMPLE_PP3)) -> Any:
    return parse_plan(read_toml(((EXAMPLES / name).read_text() + "\n" + extra).encode(), "plan"))


def test_the_example_plans_register_no_smoke_member_and_keep_their_digests() -> None:
    """New fields are written only when given: the plans without a smoke table keep their registered JSON (and
    digest) (the seed 000 digests are those of the plans registering their RNG test ids; seed 003's simple shape,
    the fixture, is the old seed 003 example). The seed-faithful seed 003 example registers its smoke stage."""
    digests = {"seed000-controlled.toml": "8647de9f405b1cb21eed064dcf19412602714eb64343c79b1cb6633b51ab96d8",
               "seed000-production-policy.toml": "598efa3d368274f38f3e57ef32157ca84132a30b21c2cf8cf83db0e1ea592e08",
               str(SIMPLE_PP3): "e6c3a00385d53b131a0dd8f8d2977ee4eef098cb07aecce810fcf3053d428809"}
    for name, digest in digests.items():
        plan = load_plan(EXAMPLES / name)
        assert "smoke" not in plan.to_json() and plan.sha256 == digest
    faithful = load_plan(EXAMPLES / "seed003-abba.toml")
    assert faithful.sha256 == "8649ca4b2e27bf06ce5f392dc550ccac308a0e8e4a7a5a570326e84c6916fbdf"
    assert faithful.smoke is not None and faithful.smoke.arms == ("A", "B")
    in_starts = _in_starts(EXAMPLES / "seed003-abba.toml")
    # the example as registered before the smoke stage had a stage of its own: the same digest as then
    assert in_starts.sha256 == "168b06c6c87f42b96b7bb82c56bc8c796772d7d59b5bcc07216e05f359e8e253"
    assert in_starts.to_json()["smoke"] == _plan(SMOKE).to_json()["smoke"] and in_starts.stage_starts == ()


def _in_starts(path: Path) -> Any:
    """The seed 003 example with its smoke probes at the end of each block, as it was registered before the
    smoke stage had a stage of its own (``[smoke] starts``, the stage's minutes a ``measure`` stage)."""
    text = path.read_text()
    text = text.replace('arms = ["A", "B"]', 'starts = ["A1", "B1", "B2", "A2"]', 1)
    text = text.replace('kind = "smoke"', 'kind = "measure"', 1)
    data = read_toml(text.encode(), "plan")
    return parse_plan(data)


def test_greedy_check_starts_imply_a_greedy_identity_stage_with_a_control_reference() -> None:
    controlled = load_plan(EXAMPLES / "seed000-controlled.toml")  # greedy_check on s2-B only
    assert controlled.smoke is not None and not controlled.smoke.declared
    assert controlled.smoke.starts == ("s1", "s2") and controlled.smoke.probes == ("greedy_identity",)
    policy = load_plan(EXAMPLES / "seed000-production-policy.toml")  # on s1-P and s2-B
    assert policy.smoke is not None and policy.smoke.starts == ("s1", "s2")
    assert load_plan(SIMPLE_PP3).smoke is None


def test_a_declared_stage_round_trips_through_its_registered_json() -> None:
    plan = _plan(SMOKE)
    assert plan.smoke is not None and plan.smoke.declared and plan.smoke.temperature == 0.0
    assert parse_plan(plan.to_json()) == plan
    assert plan.to_json()["smoke"]["probes"] == ["greedy_identity", "structured", "stop", "eos", "lifecycle"]
    assert plan.sampling.temperature == 1.0  # the waves keep their registered sampling


@pytest.mark.parametrize(("extra", "field", "words"), [
    ('[smoke]\nstarts = ["B1", "A2"]', "plan.smoke.starts", "must be a control (A) start"),
    ('[smoke]\nstarts = ["A1"]', "plan.smoke.starts", "at least two"),
    ('[smoke]\nstarts = ["B1", "A1"]', "plan.smoke.starts", "registered order"),
    ('[smoke]\nstarts = ["A1", "B1"]\ntemperature = 0.7', "plan.smoke.temperature", "T=0"),
    ('[smoke]\nstarts = ["A1", "B1"]\nprobes = ["eos"]', "plan.smoke.eos_token_id", "required by the eos probe"),
    ('[smoke]\nstarts = ["A1", "B1"]\nnear_tie_margin = 0.1\nlogprobs = 1', "plan.smoke.logprobs", "top-2"),
    ('[smoke]\nstarts = ["A1", "B1"]\nprobes = ["fuzz"]', "plan.smoke.probes[0]", "expected one of"),
    ('[smoke]\nstarts = ["A1", "B1"]\nwin2_effect = "inconclusive"', "plan.smoke.win2_effect", "pp3-v1 rejects"),
    ('[smoke]\nstarts = ["A1", "B1"]\nstructured_field = "grammar"', "plan.smoke.structured_field",
     "expected one of"),
    ('[smoke]\nstarts = ["A1", "B1"]\nprobe = ["stop"]', "plan.smoke", "probe"),
])
def test_a_broken_smoke_table_is_refused_naming_the_field(extra: str, field: str, words: str) -> None:
    with pytest.raises(FieldError) as caught:
        _plan(extra)
    assert caught.value.path.startswith(field) and words in str(caught.value), str(caught.value)


SMOKE_MINUTES = 'smoke within qualified test processes"\nkind = "measure"'


def _staged(extra: str, kind: str = "smoke") -> Any:
    """The simple seed 003 plan with ``extra``, its 3-minute smoke minutes a budget stage of ``kind``."""
    text = SIMPLE_PP3.read_text().replace(SMOKE_MINUTES, f'smoke within qualified test processes"\nkind = "{kind}"')
    return parse_plan(read_toml((text + "\n" + extra).encode(), "plan"))


def test_a_smoke_stage_of_its_own_registers_its_arms_and_runs_a_start_per_arm_after_the_blocks() -> None:
    plan = _staged('[smoke]\narms = ["A", "B"]\nprobes = ["greedy_identity", "structured"]')
    smoke = plan.smoke
    assert smoke is not None and smoke.own_stage and smoke.arms == ("A", "B")
    assert smoke.starts == ("A-smoke", "B-smoke") and smoke.reference == "A-smoke"
    assert [(s.id, s.role) for s in plan.stage_starts] == [("A-smoke", "A"), ("B-smoke", "B")]
    assert [s.id for s in plan.run_starts] == ["A1", "B1", "B2", "A2", "A-smoke", "B-smoke"]
    assert plan.start_ids == ("A1", "B1", "B2", "A2") and plan.start("B-smoke").role == "B"
    assert not plan.waves_of("A-smoke")   # the stage measures no wave
    registered = plan.to_json()["smoke"]
    assert registered["arms"] == ["A", "B"] and "starts" not in registered
    assert parse_plan(plan.to_json()) == plan


@pytest.mark.parametrize(("extra", "kind", "words"), [
    ('[smoke]\narms = ["B", "A"]', "smoke", "must be the control (A), got B"),
    ('[smoke]\narms = ["A"]', "smoke", "greedy identity compares arms"),
    ('[smoke]\narms = []', "smoke", "an empty list of arms"),
    ('[smoke]\narms = ["A", "A"]', "smoke", "appears twice"),
    ('[smoke]\narms = ["A", "P"]', "smoke", "expected one of"),
    ('[smoke]\narms = ["A", "B"]\nstarts = ["A1", "B1"]', "smoke", "give arms or starts, not both"),
    ('[smoke]\narms = ["A", "B"]', "measure", 'needs its minutes in the budget: a stage of kind "smoke"'),
    ('[smoke]\nstarts = ["A1", "B1"]', "smoke", "register it with [smoke] arms"),
])
def test_a_broken_smoke_stage_of_its_own_is_refused_in_one_line(extra: str, kind: str, words: str) -> None:
    with pytest.raises(FieldError) as caught:
        _staged(extra, kind)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_greedy_check_starts_and_a_stage_of_its_own_are_refused_together() -> None:
    text = SIMPLE_PP3.read_text().replace('id = "B1"\narm = "B"', 'id = "B1"\narm = "B"\ngreedy_check = true')
    text = text.replace(SMOKE_MINUTES, 'smoke within qualified test processes"\nkind = "smoke"')
    with pytest.raises(FieldError, match="greedy_check on B1 runs the probes inside those starts"):
        parse_plan(read_toml((text + '\n[smoke]\narms = ["A", "B"]').encode(), "plan"))


def test_smoke_probes_the_capability_probe_found_ignored_are_refused_before_any_host_action() -> None:
    plan = _plan(SMOKE)
    needs = {n.field: n.want for n in plan_needs(plan)}
    assert needs["return_token_ids"] == needs["stop_token_ids"] == needs["allowed_token_ids"] == "honoured"
    refusals = smoke_refusals(plan, {"return_token_ids": "ignored", "stop_token_ids": "honoured",
                                     "allowed_token_ids": "honoured"})
    assert len(refusals) == 1 and "return_token_ids" in refusals[0] and 'compare = "text"' in refusals[0]
    assert smoke_refusals(plan, {"return_token_ids": "honoured", "stop_token_ids": "honoured",
                                 "allowed_token_ids": "honoured"}) == []
    text = _plan('[smoke]\nstarts = ["A1", "B1"]\ncompare = "text"')  # a server that gives no ids
    assert smoke_refusals(text, {"return_token_ids": "ignored"}) == []


@pytest.mark.parametrize(("probes", "field"), [
    (["eos"], "min_tokens"),
    (["stop"], "stop"),
    (["structured"], "structured_outputs"),
])
def test_each_smoke_probe_needs_the_field_it_runs_on(probes: list[str], field: str) -> None:
    """A server found ignoring min_tokens, stop strings or the structured-output field cannot run that probe."""
    extra = '\neos_token_id = 2' if "eos" in probes else ""
    plan = _plan(f'[smoke]\nstarts = ["A1", "B1"]\ncompare = "text"\nprobes = {json.dumps(probes)}{extra}')
    assert {n.field: n.want for n in plan_needs(plan)}[field] == "honoured"
    refusals = smoke_refusals(plan, {field: "ignored"})
    assert len(refusals) == 1 and refusals[0].startswith(f"the smoke stage relies on {field} ("), refusals
    assert smoke_refusals(plan, {field: "honoured"}) == []


def test_the_structured_probe_needs_the_field_the_plan_declares() -> None:
    plan = _plan('[smoke]\nstarts = ["A1", "B1"]\ncompare = "text"\nprobes = ["structured"]\n'
                 'structured_field = "response_format"')
    needs = {n.field for n in plan_needs(plan)}
    assert "response_format" in needs and "structured_outputs" not in needs
    assert smoke_refusals(plan, {"structured_outputs": "ignored", "response_format": "honoured"}) == []
