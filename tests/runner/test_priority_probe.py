"""The capability probe's ``priority``: read by the server, and scheduled by it or not (runner/rehearsal/priority.py).

Against the simulator serving both of vLLM's scheduling policies: the policy it reports
(``/server_info``, vLLM's development mode), and, with nothing reported, the behaviour
probe (long holders fill the prefill budget; a high- and a low-priority request are sent
in either order). A plan that registers a priority fails the probe on a first-come
first-served server, and when the probe cannot tell (fail closed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import runner.sim as sim
from runner.rehearsal.capability import plan_needs
from runner.rehearsal.priority import HOLDERS, PROBE_NAME, Trial, read_trial, reading
from runner.rehearsal.rehearsal import Rehearsal, rehearse
from runner.sim.scheduler import PrefillQueue

from .script import example_plan


@contextmanager
def served(policy: str, *, dev_mode: bool) -> Iterator[sim.SimHandle]:
    """A simulated vLLM as the real CPU pair is: 2048-token context and prefill budget; real time."""
    config = sim.default_config().with_(scheduling_policy=policy, dev_mode=dev_mode, max_model_len=2048,
                                        max_num_batched_tokens=2048, step_jitter=0.0, start_s=0.0)
    config = config.with_arm(config.production_arm, ttft_per_1k_tokens_ms=200.0)
    with sim.start(config, seed=5, time_scale=1.0) as handle:
        yield handle


def _priority(result: Rehearsal) -> Any:
    return next(f for f in result.fields if f.field == "priority")


def _abba_needs() -> Any:
    plan, _, _ = example_plan("seed003-abba")   # registers priority 10
    return plan_needs(plan)


@pytest.mark.parametrize(("policy", "status"), [("priority", "honoured"), ("fcfs", "ignored")])
def test_priority_scheduling_is_read_from_behaviour_under_both_policies(policy: str, status: str) -> None:
    with served(policy, dev_mode=False) as handle:
        result = rehearse(handle.url, 1, timeout=30.0, needs=_abba_needs(), vllm_checks=False)
        truth = handle.truth()["requests"]
    field = _priority(result)
    assert (field.status, field.basis) == (status, "behaviour"), field.detail
    probe = next(r for r in result.capability_results if r.name == PROBE_NAME)
    trials = probe.parts["trials"]
    assert [t["order"] for t in trials] == [["high", "low"], ["low", "high"]]   # both send orders, one reading
    assert {t["reading"] for t in trials} == {"priority" if policy == "priority" else "fcfs"}
    # tiny in output: every probe request generated one token, none outranks the rehearsal's priority 10
    ran = [r for r in truth if r["priority"] in (10, 20, 30) and r["max_tokens"] == 1]
    assert len(ran) == 2 * (HOLDERS + 2) and all(r["completion_tokens"] == 1 for r in ran)
    # a plan registering a priority passes where it is honoured, and fails closed where it is not
    assert (result.verdict == "PASS") == (status == "honoured"), result.summary
    if status == "ignored":
        assert "priority ignored" in str(field.failure)


@pytest.mark.parametrize(("policy", "status"), [("priority", "honoured"), ("fcfs", "ignored")])
def test_priority_scheduling_is_read_from_what_the_server_reports(policy: str, status: str) -> None:
    config = sim.default_config().with_(scheduling_policy=policy)
    with sim.start(config, seed=5, time_scale=0.01) as handle:
        result = rehearse(handle.url, 1, timeout=10.0, vllm_checks=False)
        truth = handle.truth()["requests"]
    field = _priority(result)
    assert (field.status, field.basis) == (status, "server report")
    assert f"scheduler_config.policy {policy!r}" in field.detail
    assert not any(r["max_tokens"] == 1 and r["priority"] == 20 for r in truth)   # no holders were needed


def test_without_a_plan_that_registers_priority_the_queue_is_not_filled() -> None:
    with served("priority", dev_mode=False) as handle:
        result = rehearse(handle.url, 1, timeout=30.0, vllm_checks=False)
        truth = handle.truth()["requests"]
    field = _priority(result)
    assert (field.status, field.basis) == ("unclear", "type check") and "not run" in field.detail
    assert not any(r["priority"] == 20 for r in truth)   # no holder was sent to production


def test_a_server_that_does_not_read_priority_is_not_probed_further() -> None:
    config = sim.default_config().with_(ignore_fields=["priority"])
    with sim.start(config, seed=5, time_scale=0.01) as handle:
        result = rehearse(handle.url, 1, timeout=10.0, vllm_checks=False)
    assert (_priority(result).status, _priority(result).basis) == ("ignored", "type check")
    assert PROBE_NAME not in {r.name for r in result.capability_results}


def _trial(holders: list[float], high: float, low: float, sent: float = 0.25,
           order: tuple[str, str] = ("high", "low")) -> Trial:
    return Trial(order, tuple(holders), sent, high, low)


STEPS = [0.25, 0.25, 0.5, 0.5, 0.75, 0.75]     # two holders a step


def test_a_trial_reads_the_queue_not_the_arrival_order() -> None:
    # priority: high taken before the holders still waiting, low after all of them (either send order)
    assert read_trial(_trial([0.25, 0.25, 0.5, 0.5, 0.75, 1.0], 0.5, 1.0))[0] == "priority"
    assert read_trial(_trial([0.25, 0.25, 0.5, 0.5, 0.75, 1.0], 0.5, 1.0, order=("low", "high")))[0] == "priority"
    # fcfs: both behind every holder, whichever arrived first
    assert read_trial(_trial(STEPS, 1.0, 1.0))[0] == "fcfs"
    assert read_trial(_trial(STEPS, 1.001, 0.999, order=("low", "high")))[0] == "fcfs"
    # nothing waited (the pair came after every holder was served): no reading
    assert read_trial(_trial(STEPS, 1.0, 1.0, sent=0.8))[0] == "unclear"
    # the low one overtook holders too: neither policy explains it
    assert read_trial(_trial(STEPS, 0.5, 0.5))[0] == "unclear"
    # a request that gave no first token
    assert read_trial(Trial(("high", "low"), tuple(STEPS), 0.25, None, 1.0))[0] == "unclear"


def test_the_trials_must_agree() -> None:
    honoured = _trial([0.25, 0.25, 0.5, 0.5, 0.75, 1.0], 0.5, 1.0)
    fcfs = _trial(STEPS, 1.0, 1.0)
    assert reading([honoured, honoured])[0] == "honoured"
    assert reading([fcfs, fcfs])[0] == "ignored"
    assert reading([honoured, fcfs])[0] == "unclear"


def test_the_simulators_queue_serves_by_policy() -> None:
    for policy, order in (("fcfs", ["a", "b", "c"]), ("priority", ["c", "a", "b"])):
        queue = PrefillQueue(policy, budget=10)
        first = queue.admit(10, 20, lambda: False)   # fills the budget: the rest wait
        served: list[str] = []

        def wait(name: str, priority: int, q: PrefillQueue = queue, out: list[str] = served) -> None:
            ticket = q.admit(10, priority, lambda: False)
            out.append(name)
            q.release(ticket)

        threads = []
        for name, priority in (("a", 20), ("b", 30), ("c", 10)):
            threads.append(threading.Thread(target=wait, args=(name, priority)))
            threads[-1].start()
            while queue.waiting() < len(threads):   # each in the queue before the next arrives
                time.sleep(0.001)
        queue.release(first)
        for thread in threads:
            thread.join(5)
        assert served == order, (policy, served)


def test_a_prefill_admitted_later_never_ends_before_one_whose_end_is_not_known_yet() -> None:
    """A long prompt admitted first whose thread runs late (its end not reported yet) still ends first: the short
    request admitted beside it waits for that end instead of taking its own (it overtook a holder under load)."""
    queue = PrefillQueue("priority", budget=2048)
    long = queue.admit(1000, 20, lambda: False)
    short = queue.admit(10, 30, lambda: False)
    assert long is not None and short is not None
    ends: list[float] = []
    thread = threading.Thread(target=lambda: ends.append(queue.prefill_end(short, 1.0)))
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive() and not ends   # waiting: the earlier prefill's end is not known
    assert queue.prefill_end(long, 5.0) == 5.0
    thread.join(5)
    assert ends == [5.0]                    # with the long one's outputs, not before them
    queue.release(long)
    queue.release(short)
    # a prefill that leaves without an end (aborted) no longer holds the later one back
    first = queue.admit(1000, 20, lambda: False)
    second = queue.admit(10, 30, lambda: False)
    assert first is not None and second is not None
    queue.leave(first)
    assert queue.prefill_end(second, 2.0) == 2.0
