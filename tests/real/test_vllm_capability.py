"""The capability probe and the rehearsal's vLLM checks on the real vLLM 0.32 pair.

Recorded as each field really is on vLLM 0.32 (measured here): ``seed``, ``max_tokens``,
``ignore_eos``, ``min_tokens``, ``allowed_token_ids``, ``stop_token_ids``, ``stop``,
``return_token_ids``, ``stream_options.include_usage``, ``cache_salt`` and vLLM's
``structured_outputs`` honoured; ``guided_json`` (gone since v0.12) and llama-cpp-python's
``response_format`` form ignored. ``logit_bias``: vLLM 0.32 still refuses it under
speculative decoding (the control's 400, the R16 cause confirmed on the n-gram engine),
and the plain engine acts on it (the control's 200, learnt from ``bias-eos``): the
rehearsal passes both. ``priority``: vLLM reads it under either scheduling policy (the
object is refused, ``body.priority``) and schedules by it only under ``--scheduling-policy
priority``: read on both of the pair (its scheduling not probed without a plan that
registers a priority); for such a plan the ``priority-order`` probe (long holders fill the
2048-token prefill budget, a high- and a low-priority request sent in both orders) reads
it ignored on the plain engine (vLLM's default fcfs) and honoured on a third engine, the
same started with ``--scheduling-policy priority``.
"""

from __future__ import annotations

import json
from pathlib import Path

from runner.rehearsal.capability import Need, plan_needs
from runner.rehearsal.rehearsal import rehearse
from tests.runner.script import example_plan

from .test_llama_windows import _tally
from .vllmpair import EOS, MODEL_NAME, VllmSite

HONOURED = ("seed", "max_tokens", "ignore_eos", "min_tokens", "allowed_token_ids", "stop_token_ids", "stop",
            "return_token_ids", "stream_options.include_usage", "cache_salt", "structured_outputs")


def _rehearse(site: VllmSite, arm: str, out: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    out.mkdir(parents=True)
    done = _tally(out, "rehearse", "--url", site.url(arm), "--eos", str(EOS), "--out", str(out / "r"), "--json",
                  timeout=600)
    return done.returncode, json.loads(done.stdout)


def test_the_capability_probe_records_each_field_as_vllm_032_has_it(vllm_pair: VllmSite, tmp_path: Path) -> None:
    for arm in ("plain", "ngram"):
        code, out = _rehearse(vllm_pair, arm, tmp_path / arm)
        fields = out["fields"]
        assert all(fields[f] == "honoured" for f in HONOURED), (arm, fields)
        assert fields["guided_json"] == fields["response_format"] == "ignored", (arm, fields)
        # the engine-side sampling fields no plan registers here are not probed: a top_k request takes the
        # n-gram engine down (HTTP 500, then nothing else answers), and would have cost every probe after it
        assert {fields[f] for f in ("reasoning_effort", "top_k", "min_p")} == {"unclear"}, (arm, fields)
        # reasoning_effort, registered, is read on chat completions (the object refused there)
        registered = rehearse(vllm_pair.url(arm), EOS, needs=[Need("reasoning_effort", "honoured", "a plan registers it")],
                              vllm_checks=False)
        effort = next(f for f in registered.fields if f.field == "reasoning_effort")
        assert effort.status == "honoured" and "HTTP 400" in effort.detail, effort.detail
        priority = next(c for c in out["capabilities"] if c["field"] == "priority")
        # read (the object is refused); no plan registers a priority here, and nothing reports the policy (no
        # development mode): its scheduling is not probed (the next test probes it)
        assert (fields["priority"], priority["basis"]) == ("unclear", "type check"), priority["detail"]
        assert "HTTP 400" in priority["detail"] and "not run" in priority["detail"]
        assert code == 0 and out["verdict"] == "PASS", (arm, out["reading"], out["capability_failures"])
        control = next(p for p in out["probes"] if p["probe"] == "control")
        if arm == "ngram":   # refused under speculative decoding, with vLLM's message: the cause confirmed
            assert control["status"] == 400 and "speculative decoding" in control["error"]["message"]
            assert out["cause_confirmed"] is True and fields["logit_bias"] == "refused"
        else:                # answered and acted on: the rehearsal learnt it, and passes a healthy server
            assert control["status"] == 200 and control["ok"] and "acts on it" in control["detail"]
            assert out["cause_confirmed"] is False and fields["logit_bias"] == "honoured"


def test_priority_is_honoured_under_the_priority_policy_and_fails_a_plan_that_needs_it_under_fcfs(
        vllm_priority: VllmSite) -> None:
    plan, _, _ = example_plan("seed003-abba")   # registers priority 10
    for arm, status in (("prio", "honoured"), ("plain", "ignored")):
        result = rehearse(vllm_priority.url(arm), EOS, model=MODEL_NAME, timeout=60.0, needs=plan_needs(plan),
                          vllm_checks=False)
        priority = next(f for f in result.fields if f.field == "priority")
        probe = next(r for r in result.capability_results if r.name == "priority-order")
        assert (priority.status, priority.basis) == (status, "behaviour"), (arm, probe.parts["trials"])
        assert [t["order"] for t in probe.parts["trials"]] == [["high", "low"], ["low", "high"]]
        assert probe.parts["reported_policy"] is None   # no development mode: nothing reported
        # the plan registers priority 10: it passes where priority is honoured, fails closed where it is ignored
        assert (result.verdict == "PASS") == (status == "honoured"), (arm, result.summary)
