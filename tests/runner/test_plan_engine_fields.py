"""Engine-side sampling fields as plan fields (``[sampling]`` reasoning_effort, top_k, min_p, repetition_penalty),
what a window then needs of the server, and the pure rules of effective-parameter and warm-up attestation."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from ledger.errors import FieldError
from runner.gates import check_effective, check_warmup_served
from runner.plan import load_plan, parse_plan
from runner.plan.model import ENGINE_SAMPLING_FIELDS, Priming
from runner.rehearsal import engine_refusals, plan_needs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAN = EXAMPLES / "seed000-controlled.toml"


@pytest.fixture
def plan_with(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The example plan with lines added under [sampling], read from a copy beside its families."""
    shutil.copytree(EXAMPLES / "families", tmp_path / "families")

    def make(lines: str, endpoint: str | None = None):  # type: ignore[no-untyped-def]
        """``endpoint``: the waves' API (default: chat where reasoning_effort is registered, vLLM reads it there)."""
        path = tmp_path / "plan.toml"
        text = PLAN.read_text().replace("[sampling]\n", f"[sampling]\n{lines}\n", 1)
        endpoint = endpoint or ("chat" if "reasoning_effort" in lines else None)
        if endpoint is not None:
            text = text.replace("[measurement]\n", f'[measurement]\nendpoint = "{endpoint}"\n', 1)
        path.write_text(text)
        return load_plan(path)

    return make


def test_without_the_fields_the_registered_json_and_digest_are_unchanged(plan_with) -> None:  # type: ignore[no-untyped-def]
    plain = load_plan(PLAN)
    assert not set(ENGINE_SAMPLING_FIELDS) & set(plain.to_json()["sampling"])
    assert plain.sampling.engine_fields == {}
    same = plan_with("")   # the same text through the same path: the same digest
    assert same.sha256 == plain.sha256


def test_the_fields_are_registered_and_read_back(plan_with) -> None:  # type: ignore[no-untyped-def]
    plan = plan_with('reasoning_effort = "high"\ntop_k = 40\nmin_p = 0.05\nrepetition_penalty = 1.1')
    assert plan.sampling.engine_fields == {"reasoning_effort": "high", "top_k": 40, "min_p": 0.05,
                                           "repetition_penalty": 1.1}
    assert plan.to_json()["sampling"]["reasoning_effort"] == "high"
    assert plan.sha256 != load_plan(PLAN).sha256
    again = parse_plan(plan.to_json())
    assert again == plan and again.sha256 == plan.sha256


@pytest.mark.parametrize(("line", "message"), [
    ('reasoning_effort = "extreme"', "plan.sampling.reasoning_effort: expected one of low, medium, high"),
    ("reasoning_effort = 3", "plan.sampling.reasoning_effort: expected a string"),
    ("top_k = 0", "plan.sampling.top_k: register -1 for no cut"),
    ("top_k = -2", "plan.sampling.top_k: must be >= -1"),
    ("min_p = 1.5", "plan.sampling.min_p: must be <= 1"),
    ("repetition_penalty = 0", "plan.sampling.repetition_penalty: must be > 0"),
    ("top_q = 1", "plan.sampling.top_q"),
])
def test_bad_values_are_refused_naming_the_field(plan_with, line: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FieldError, match=message.replace("(", r"\(")):
        plan_with(line)


def test_a_registered_field_is_needed_honoured_and_refused_where_the_probe_did_not_find_it_so(plan_with) -> None:  # type: ignore[no-untyped-def]
    plan = plan_with('reasoning_effort = "high"\ntop_k = 40')
    needs = {n.field: n for n in plan_needs(plan)}
    assert needs["reasoning_effort"].want == needs["top_k"].want == "honoured"
    assert "reasoning_effort" not in {n.field for n in plan_needs(load_plan(PLAN))}
    assert engine_refusals(plan, {"reasoning_effort": "honoured", "top_k": "honoured"}) == []
    refused = engine_refusals(plan, {"reasoning_effort": "ignored", "top_k": "refused"})
    assert len(refused) == 2 and "reasoning_effort = 'high'" in refused[0] and "found it ignored" in refused[0]
    assert "found it refused" in refused[1]
    # no capability probe recorded: nothing is known, so the window is refused (find out first)
    assert "no capability probe is recorded" in engine_refusals(plan, None)[0]
    assert engine_refusals(load_plan(PLAN), None) == []


def test_effective_parameters_compared_where_reported() -> None:
    plan = load_plan(PLAN)
    arm = plan.arm("B")
    asked = plan.sampling.max_tokens
    fits = {"models": {"id": "m", "max_model_len": asked + 1},
            "server_info": {"speculative_config": dict(arm.speculative or {})}}
    checked = check_effective(plan, arm, fits)
    assert checked.ok and not checked.none_reported
    assert [c["param"] for c in checked.checks] == ["max_model_len", "speculative_config"]
    short = check_effective(plan, arm, {"models": {"id": "m", "max_model_len": asked}})
    assert not short.ok and "max_model_len" in short.failures[0]
    depth = next(k for k, v in (arm.speculative or {}).items() if isinstance(v, int) and not isinstance(v, bool))
    other = {**(arm.speculative or {}), depth: (arm.speculative or {})[depth] + 1}
    wrong = check_effective(plan, arm, {"server_info": {"speculative_config": other}})
    assert not wrong.ok and wrong.failures[0].startswith(f"speculative_config.{depth}: the server reports")
    off = check_effective(plan, arm, {"server_info": {"speculative_config": None}})
    assert not off.ok and "the server reports none" in off.failures[0]
    primed = dataclasses.replace(plan, priming=Priming())
    caching = check_effective(primed, arm, {"cache_config": {"enable_prefix_caching": "False"}})
    assert not caching.ok and "enable_prefix_caching False" in caching.failures[0]
    assert check_effective(plan, arm, {"cache_config": {"enable_prefix_caching": "False"}}).none_reported


def test_a_server_reporting_none_is_recorded_so_and_fails_only_where_required() -> None:
    plan = load_plan(PLAN)
    arm = plan.arm("A")
    nothing = check_effective(plan, arm, {"sources": {"/v1/models": "HTTP 404"}})
    assert nothing.ok and nothing.none_reported and nothing.checks == ()
    required = check_effective(dataclasses.replace(plan, attest="required"), arm, {})
    assert not required.ok and required.none_reported and 'attest = "required"' in required.failures[0]


def test_warm_up_served_by_the_counter() -> None:
    served = check_warmup_served(2, 10.0, 12.0, "requests", "vllm:request_success_total", "", required=False)
    assert served.attested and served.ok
    short = check_warmup_served(2, 10.0, 11.0, "requests", "vllm:request_success_total", "", required=False)
    assert short.attested and not short.ok and "fewer than its 2 requests" in short.detail
    unread = check_warmup_served(2, None, None, "requests", None, "no metrics URL", required=False)
    assert not unread.attested and unread.ok and "not attested: no metrics URL" in unread.detail
    assert not check_warmup_served(2, None, None, "requests", None, "x", required=True).ok
    untold = check_warmup_served(0, 1.0, 3.0, "requests", "s", "", required=False)
    assert not untold.attested and untold.ok and "no request count" in untold.detail


def test_reasoning_effort_needs_the_waves_over_chat_completions(plan_with) -> None:  # type: ignore[no-untyped-def]
    """vLLM reads reasoning_effort on chat completions only: over /v1/completions it would be dropped unseen."""
    with pytest.raises(FieldError, match=r'reads reasoning_effort on chat completions only.*endpoint = "chat"'):
        plan_with('reasoning_effort = "low"', endpoint="completions")
    chat = plan_with('reasoning_effort = "low"')
    assert chat.measurement.chat and chat.to_json()["measurement"]["endpoint"] == "chat"
    assert "endpoint" not in load_plan(PLAN).to_json()["measurement"]   # written only when given
    assert not plan_with("top_k = 5", endpoint="completions").measurement.chat
