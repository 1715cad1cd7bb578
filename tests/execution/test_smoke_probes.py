"""The smoke probes against the simulator, one session at a time: near ties followed, stops judged on the
reply itself, greedy requests that are greedy on every server kind, and a session that stops when told."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import runner.sim as sim
from runner.plan.model import Smoke
from runner.rehearsal import ProbeResult
from runner.smoke import Emitted, SmokeSession
from runner.smoke.probes import _stop_string
from tests.simhelpers import fast_config

SMOKE = Smoke(starts=("A1", "B1"), probes=("greedy_identity", "stop"), max_tokens=16, logprobs=2,
              near_tie_margin=0.05, timeout_s=10.0)
ARM = "production"


@pytest.fixture
def server() -> Iterator[sim.SimHandle]:
    with sim.start(fast_config(), seed=13) as handle:
        yield handle


def _session(server: sim.SimHandle, smoke: Smoke = SMOKE, **kw: Any) -> SmokeSession:
    return SmokeSession(server.url, server.server.config.model, smoke, **kw)


def _reference(server: sim.SimHandle, smoke: Smoke = SMOKE) -> tuple[str, Emitted]:
    with _session(server, smoke) as session:
        verdict, emitted = session.greedy("A1", None)
    assert verdict.outcome == "recorded" and emitted is not None
    return "A1", emitted


# ---------------------------------------------------------------------- near ties followed


def test_a_near_tie_then_a_real_divergence_fails_naming_the_later_position(server: sim.SimHandle) -> None:
    reference = _reference(server)
    server.set_faults(greedy_diverge={"arm": ARM, "position": 3, "near_tie": True},
                      greedy_lossy={"arm": ARM, "position": 2})
    with _session(server) as session:
        verdict, _ = session.greedy("B1", reference)
    assert verdict.outcome == "fail" and verdict.position == 6  # 3, then 4 forced + 2
    assert verdict.margin is not None and verdict.margin > 0.05
    assert "past 1 near tie (the first at position 3" in verdict.summary
    divergence = verdict.evidence["divergence"]
    assert [(d["position"], d["near_tie"]) for d in divergence["divergences"]] == [(3, True), (6, False)]
    first = divergence["divergences"][0]
    assert first["reference"] != first["candidate"] and first["candidate_margin"] <= 0.05
    ref_ids = reference[1].sequence
    forced = divergence["forced"]
    assert len(forced) == 1 and forced[0]["offset"] == 4 and forced[0]["prompt"][-4:] == list(ref_ids[:4])
    assert divergence["reference_continuation"][0] == ref_ids[6]
    assert verdict.checks["followed"] == 1 and verdict.checks["compared"] == 16


def test_divergences_that_are_all_near_ties_are_a_near_tie(server: sim.SimHandle) -> None:
    reference = _reference(server)
    server.set_faults(greedy_diverge={"arm": ARM, "position": 3, "near_tie": True, "count": 2})
    with _session(server) as session:
        verdict, _ = session.greedy("B1", reference)
    assert verdict.outcome == "near_tie" and verdict.position == 3
    divergences = verdict.evidence["divergence"]["divergences"]
    assert [(d["position"], d["near_tie"]) for d in divergences] == [(3, True), (7, True)]
    assert verdict.checks["followed"] == 2 and verdict.checks["compared"] == 16
    assert "2 near ties" in verdict.summary and "followed teacher-forced over 16 positions" in verdict.summary


def test_a_registered_follow_of_zero_judges_the_first_divergence_alone(server: sim.SimHandle) -> None:
    smoke = replace(SMOKE, near_tie_follow=0)
    reference = _reference(server, smoke)
    server.set_faults(greedy_diverge={"arm": ARM, "position": 3, "near_tie": True},
                      greedy_lossy={"arm": ARM, "position": 2})
    with _session(server, smoke) as session:
        verdict, _ = session.greedy("B1", reference)
    assert verdict.outcome == "near_tie" and verdict.evidence["divergence"]["forced"] == []
    assert verdict.checks["unfollowed"] == "the registered 0 near tie(s) followed"
    assert smoke.to_json()["near_tie_follow"] == 0 and "near_tie_follow" not in SMOKE.to_json()


def test_without_logprobs_a_divergence_is_compared_as_text_and_says_so(server: sim.SimHandle) -> None:
    reference = _reference(server)
    bare = replace(reference[1], top_logprobs=())
    server.set_faults(greedy_diverge={"arm": ARM, "position": 3, "near_tie": True})
    with _session(server, replace(SMOKE, logprobs=0)) as session:
        verdict, _ = session.greedy("B1", ("A1", bare))
    assert verdict.outcome == "fail" and verdict.position == 3 and verdict.margin is None
    assert verdict.checks["logprobs"] is False and "no logprobs here" in verdict.summary


# ---------------------------------------------------------------------- stops judged on the reply


def test_the_stop_probe_passes_a_server_that_honours_stops_after_a_near_tie_the_repeat_does_not_make(
        server: sim.SimHandle) -> None:
    reference = _reference(server)
    server.set_faults(greedy_diverge={"arm": ARM, "position": 3, "near_tie": True})  # the greedy request alone
    with _session(server) as session:
        greedy, emitted = session.greedy("B1", reference)
        stop = session.stop("B1")
    assert greedy.outcome == "near_tie" and emitted is not None
    assert stop.outcome == "pass", stop.summary
    assert stop.checks["stop_string"]["verdict"] == stop.checks["stop_token_ids"]["verdict"] == "pass"
    free = stop.evidence["exchanges"][0]["response"]["choices"][0]["text"]
    assert free != emitted.text  # the repeat did not flip: a stop placed in the greedy reply's text would miss


def test_the_stop_probe_fails_a_server_that_ignores_stops(server: sim.SimHandle) -> None:
    server.set_faults(ignore_stop={"arm": ARM})
    with _session(server) as session:
        stop = session.stop("B1")
    assert stop.outcome == "fail" and "runs on through it" in stop.summary


def _reply(text: str, finish: str, stop_reason: Any = None) -> ProbeResult:
    return ProbeResult("stop-string", "/v1/completions", {}, "", 200, True, "pass", None, "HTTP 200", None, finish,
                       stop_reason, None, None, 0.0, None, {"text": text, "finish_reason": finish})


def test_a_reply_that_never_generated_the_stop_leaves_it_not_exercised() -> None:
    free = " one two three four five"
    assert _stop_string(_reply(" one two ", "stop"), "three", free)[0] == "pass"
    assert _stop_string(_reply(" one two ", "stop", "three"), "three", " other")[0] == "pass"
    assert _stop_string(_reply(" one two three four", "length"), "three", free)[0] == "fail"
    assert _stop_string(_reply(" one two six seven", "length"), "three", free)[0] == "not_exercised"
    assert _stop_string(_reply(" one", "stop"), "three", free)[0] == "not_exercised"  # another ending (EOS)


# ---------------------------------------------------------------------- greedy is greedy


def test_the_t0_request_of_each_server_kind_carries_neutral_penalties() -> None:
    """vLLM's names, llama-cpp-python's repeat_penalty (default 1.1 there), top-k and top-p off: a server
    whose own repeat penalty is on answers the smoke stage's T=0 requests with the raw top-1."""
    with sim.start(fast_config(), seed=5) as raw, sim.start(fast_config(repetition_penalty=1.1), seed=5) as llama:
        with _session(raw) as session:
            body = session.completion()
            _, top1 = session.greedy("A1", None)
        assert {k: body[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty", "repeat_penalty",
                                     "presence_penalty", "frequency_penalty")} == {
            "temperature": 0.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0, "repeat_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0}
        with _session(llama) as session:
            verdict, _ = session.greedy("B1", ("A1", top1))  # type: ignore[arg-type]
        assert verdict.outcome == "pass", verdict.summary


# ---------------------------------------------------------------------- stop means stop


def test_a_session_told_to_stop_cuts_the_request_in_flight_and_sends_nothing_more(server: sim.SimHandle) -> None:
    cancel = threading.Event()
    server.set_faults(slow_ttft={"seconds": 8.0})
    done: dict[str, Any] = {}
    with _session(server, cancel=cancel) as session:
        def probe() -> None:
            done["verdict"] = session.greedy("A1", None)[0]
            done["at"] = time.perf_counter()
        worker = threading.Thread(target=probe)
        worker.start()
        time.sleep(0.5)
        cancel.set()
        signalled = time.perf_counter()
        worker.join(5)
        assert not worker.is_alive() and done["at"] - signalled < 1.0
        assert done["verdict"].outcome == "fail"  # no answer: the runner records it as after the signal
        began = time.perf_counter()
        later = session.stop("A1")
        assert time.perf_counter() - began < 0.1 and "not sent: the window was told to stop" in later.summary
