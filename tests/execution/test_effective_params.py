"""A start's engine-side sampling fields sent identically, its effective parameters and warm-up attested, on the
simulator (what it served is read from its truth record, not from what the runner says it sent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.execution.fit import recorded_fields, unfit
from runner.measure import read_served
from runner.plan import registered_plan
from runner.sim import default_config
from runner.sim import start as start_sim
from runner.sim.host import WARMUP_REQUESTS

from .seed003 import WINDOW as FAITHFUL
from .seed003 import faithful_world
from .worlds import close, gate_all, run, small, window, world

WINDOW = "params"
FIELDS = 'reasoning_effort = "high"\ntop_k = 40'


def _sampling(text: str) -> str:
    """The fields registered; the waves over chat completions (where vLLM reads reasoning_effort)."""
    text = small(text).replace("[sampling]\n", f"[sampling]\n{FIELDS}\n", 1)
    return text.replace("[measurement]\n", '[measurement]\nendpoint = "chat"\n', 1)


def _events(w: Any, window_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{window_id}", types=[type_])]


def test_the_fields_go_identically_with_every_request_of_both_arms_and_the_start_is_attested(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=_sampling)])
    try:
        gate_all(w)
        plan = registered_plan(w.book, WINDOW).plan
        before = len(w.sim.truth()["requests"])
        result = run(w, WINDOW)
        assert result.ending == "restored"
        served = [t for t in w.sim.truth()["requests"][before:] if t["arm"] in {a.name for a in plan.arms}
                  and t["max_tokens"] in (plan.sampling.max_tokens, 1)]   # the waves' and the warm-ups'
        # (the smoke stage's probes run at the stage's own sampling, as registered: docs/smoke.md)
        waves = sum(len(wave.prompt_ids) for wave in plan.waves)
        assert len(served) == waves + WARMUP_REQUESTS * len(plan.starts)
        assert {t["arm"] for t in served} == {a.name for a in plan.arms}
        assert {t["kind"] for t in served} == {"chat"}   # the waves and warm-ups over the plan's endpoint
        assert all(t["engine_fields"] == plan.sampling.engine_fields for t in served), \
            [t["engine_fields"] for t in served]
        attested = _events(w, WINDOW, "params.attested")
        assert [a["start"] for a in attested] == [s.id for s in plan.starts]
        assert all(a["ok"] and not a["none_reported"] and a["sampling"] == plan.sampling.engine_fields
                   for a in attested)
        assert {c["param"] for a in attested for c in a["checks"]} == {"max_model_len", "speculative_config"}
        warm = _events(w, WINDOW, "warmup.done")
        assert all(x["served"]["attested"] and x["served"]["ok"] and x["requests"] == WARMUP_REQUESTS
                   and x["served"]["after"] - x["served"]["before"] >= WARMUP_REQUESTS for x in warm), warm
        # recorded before the start's first wave
        seqs = [(e.type, e.payload.get("start")) for e in w.book.events(stream=f"window/{WINDOW}")]
        for start in plan.starts:
            mine = [t for t, s in seqs if s == start.id]
            assert mine.index("params.attested") < mine.index("warmup.done") < mine.index("wave.measured")
    finally:
        close(w)


def _refused_at_fit(tmp_path: Path, **sim: Any) -> list[str]:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=_sampling)], sim_config=sim)
    try:
        gate_all(w)
        plan = registered_plan(w.book, WINDOW).plan
        rehearsal = [g for g in _events(w, WINDOW, "gate.result") if g["gate"] == "rehearsal"]
        assert rehearsal and rehearsal[-1]["verdict"] == "FAIL"
        refusals = unfit(plan, w.driver, fields=recorded_fields(w.book, WINDOW))
        assert not _events(w, WINDOW, "host.action")
        return refusals
    finally:
        close(w)


def test_a_server_that_ignores_the_field_is_refused_before_any_host_action(tmp_path: Path) -> None:
    refusals = _refused_at_fit(tmp_path, ignore_fields=["reasoning_effort"])
    assert refusals == ["the plan registers reasoning_effort = 'high', and the capability probe found it ignored "
                        "on this server: every request would measure the server's own default"]


def test_a_server_that_refuses_the_field_is_refused_before_any_host_action(tmp_path: Path) -> None:
    refusals = _refused_at_fit(tmp_path, refuse_fields=["top_k"])
    assert len(refusals) == 1 and refusals[0].startswith("the plan registers top_k = 40, and the capability probe "
                                                          "found it refused")


def test_an_engine_reporting_other_parameters_fails_its_start_before_its_first_wave(tmp_path: Path) -> None:
    """The plan primes prefixes; the engine reports prefix caching off (cache_config_info and /server_info)."""
    w = faithful_world(tmp_path, sim_config={"enable_prefix_caching": False})
    try:
        gate_all(w)
        result = run(w, FAITHFUL)
        attested = _events(w, FAITHFUL, "params.attested")
        assert len(attested) == 1 and not attested[0]["ok"]
        assert attested[0]["failures"] == ["the plan primes prefixes, and the server reports enable_prefix_caching "
                                           "False: the waves' prompts would not come from the prefix cache"]
        check = next(c for c in attested[0]["checks"] if c["param"] == "enable_prefix_caching")
        assert check["reported"] is False and check["source"] == "/metrics vllm:cache_config_info"
        assert not _events(w, FAITHFUL, "warmup.done") and not _events(w, FAITHFUL, "wave.measured")
        ended = _events(w, FAITHFUL, "start.ended")
        assert [(e["start"], e["ok"]) for e in ended] == [("A1", False)]
        assert ended[0]["reason"].startswith("effective parameters not attested: the plan primes prefixes")
        assert result.ending == "restored"
    finally:
        close(w)


def test_a_warm_up_the_engine_did_not_serve_fails_the_start(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none")])
    try:
        gate_all(w)
        w.sim.set_faults(warmup_unserved={"count": 1})
        result = run(w, WINDOW)
        warm = _events(w, WINDOW, "warmup.done")
        assert len(warm) == 1 and warm[0]["requests"] == WARMUP_REQUESTS
        served = warm[0]["served"]
        assert served["attested"] and not served["ok"] and served["after"] == served["before"]
        assert "the start's engine did not serve the warm-up" in served["detail"]
        assert not _events(w, WINDOW, "wave.measured")
        ended = _events(w, WINDOW, "start.ended")
        assert [(e["start"], e["ok"]) for e in ended] == [("s1", False)]
        assert ended[0]["reason"].startswith("warm-up not served: vllm:request_success_total rose by 0")
        assert result.ending == "restored"
    finally:
        close(w)


def test_a_server_that_reports_none_is_read_as_such() -> None:
    """llama-cpp-python's shape: /v1/models without a context length, no /metrics, no /server_info."""
    with start_sim(default_config().with_(metrics_format="none", dev_mode=False, time_scale=0.01, start_s=0.0)) as sim:
        reported = read_served(sim.url, [f"{sim.url}/metrics"], timeout_s=5.0)
    assert set(reported) == {"models", "sources"} and reported["models"]["max_model_len"] is None
    assert reported["sources"] == {"/v1/models": "read", "/metrics": "HTTP 404", "/server_info": "HTTP 404"}
