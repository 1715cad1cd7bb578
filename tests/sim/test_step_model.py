"""The batch-aware step model (runner/sim/batch.py) and the HTTP simulator's ``step_model = "batch"``."""

from __future__ import annotations

import itertools
import statistics
import threading
from dataclasses import asdict

import httpx
import pytest

import runner.sim as sim
from runner.sim import Acceptance, Budgets, Job, StepCosts, simulate
from runner.sim.model import Generation, SamplingParams

COSTS = StepCosts(10.0, 0.5, prefill_fixed_ms=30.0, per_prefill_token_ms=0.02)


def _decode_steps(result: sim.SimResult) -> list[sim.batch.EngineStep]:
    return [s for s in result.steps if s.prefill_tokens == 0]


@pytest.mark.parametrize("n", [1, 3, 8])
def test_batch_of_n_decodes_takes_fixed_plus_n_per_token(n: int) -> None:
    result = simulate([Job(32, 20)] * n, k=0, costs=COSTS, concurrency=n)
    steps = _decode_steps(result)
    full = [s for s in steps if s.running == n]
    assert full, "the n requests decode together"
    for step in full:
        assert step.decode_tokens == n
        assert step.duration_ms == pytest.approx(10.0 + n * 0.5)
    # every request's chunk gaps inside the full batch are that step time
    for outcome in result.outcomes:
        assert statistics.median(outcome.itl_ms) == pytest.approx(10.0 + n * 0.5)


@pytest.mark.parametrize("n", [1, 4])
def test_batch_with_drafts_schedules_k_plus_one_tokens_each(n: int) -> None:
    k = 3
    result = simulate([Job(32, 40)] * n, k=k, costs=COSTS, acceptance=Acceptance(0.0), concurrency=n)
    full = [s for s in _decode_steps(result) if s.drafts == n and s.draft_tokens == n * k]
    assert full
    for step in full:
        assert step.decode_tokens == n * (k + 1)
        assert step.draft_tokens == n * k and step.accepted == 0
        assert step.duration_ms == pytest.approx(10.0 + n * (k + 1) * 0.5)


def test_token_budget_splits_a_long_prefill_into_chunks_decodes_first() -> None:
    budget = 256
    jobs = [Job(16, 60, arrival_ms=0.0), Job(1000, 4, arrival_ms=100.0)]
    result = simulate(jobs, k=0, costs=COSTS, budgets=Budgets(max_num_batched_tokens=budget))
    long_prefill = [s for s in result.steps if s.start_ms >= 100.0 and s.prefill_tokens > 0]
    # the decode goes first in every step, the prefill takes what is left of the budget
    assert [s.decode_tokens for s in long_prefill] == [1] * len(long_prefill)
    assert [s.batched_tokens for s in long_prefill[:-1]] == [budget] * (len(long_prefill) - 1)
    assert sum(s.prefill_tokens for s in long_prefill) == 1000
    assert len(long_prefill) == -(-1000 // (budget - 1))
    short, long = result.outcomes
    assert short.generated == 60 and long.generated == 4
    # the long request's first token comes with its last chunk, the short one kept decoding meanwhile
    assert long.chunk_ms[0] == pytest.approx(long_prefill[-1].start_ms + long_prefill[-1].duration_ms)
    during = [t for t in short.chunk_ms if long_prefill[0].start_ms < t <= long.chunk_ms[0]]
    assert len(during) == len(long_prefill)


def test_sequence_budget_queues_the_rest() -> None:
    result = simulate([Job(16, 10)] * 3, k=0, costs=COSTS, budgets=Budgets(max_num_seqs=1), concurrency=3)
    assert max(s.running for s in result.steps) == 1
    first, second, third = sorted(result.outcomes, key=lambda o: o.ttft_ms)
    assert second.chunk_ms[0] > first.finished_ms  # type: ignore[operator]
    assert third.ttft_ms > 2 * first.ttft_ms + 2 * 9 * 10.5


def test_preemption_recomputes() -> None:
    # 4 requests of 64 + 200 tokens need 4 x 17 blocks; 40 blocks hold two of them at the end
    jobs = [Job(64, 200)] * 4
    result = simulate(jobs, k=0, costs=COSTS, budgets=Budgets(kv_blocks=40), concurrency=4)
    assert result.preemptions > 0
    assert all(o.generated == 200 for o in result.outcomes)
    preempted = [o for o in result.outcomes if o.preemptions]
    assert preempted
    # a preempted request's prompt and generated tokens are prefilled again: more prefill than the prompts
    prefilled = sum(s.prefill_tokens for s in result.steps)
    assert prefilled > sum(j.prompt_tokens for j in jobs)
    assert max(s.kv_blocks_used for s in result.steps) <= 40
    # never more KV than the cache: at most two requests ever hold their whole context
    assert all(s.kv_blocks_used <= 40 for s in result.steps)
    unbounded = simulate(jobs, k=0, costs=COSTS, concurrency=4)
    assert unbounded.preemptions == 0
    assert sum(s.prefill_tokens for s in unbounded.steps) == sum(j.prompt_tokens for j in jobs)


def test_acceptance_drawn_per_request_from_its_family() -> None:
    families = {"easy": Acceptance(0.9, 50.0), "hard": Acceptance(0.2, 50.0)}
    jobs = [Job(16, 80, family="easy")] * 30 + [Job(16, 80, family="hard")] * 30
    result = simulate(jobs, k=4, costs=COSTS, acceptance=families, concurrency=8, seed=3)
    easy = [o.rate for o in result.outcomes if o.job.family == "easy"]
    hard = [o.rate for o in result.outcomes if o.job.family == "hard"]
    assert statistics.mean(easy) == pytest.approx(0.9, abs=0.03)
    assert statistics.mean(hard) == pytest.approx(0.2, abs=0.05)
    assert len(set(easy)) == 30                      # each request its own rate
    replay = simulate(jobs[:3], k=4, costs=COSTS, acceptance=Acceptance(0.5, trace=(0.1, 0.7)), concurrency=3)
    assert [o.rate for o in replay.outcomes] == [0.1, 0.7, 0.1]


def test_a_batch_of_one_is_the_request_model() -> None:
    """Old arms under the batch model: one request alone takes exactly the per-request model's steps."""
    arm = sim.default_config().arm("A")
    costs, _budgets, _acceptance = sim.arm_model(arm)
    generation = Generation(arm=arm, params=SamplingParams(max_tokens=40, ignore_eos=True), prompt_tokens=300,
                            seed_key="x")
    steps = []
    while (step := generation.next_step()) is not None:
        steps.append(step)
    result = simulate([Job(300, 40)], k=arm.k, costs=costs, acceptance=Acceptance(0.0))
    (outcome,) = result.outcomes
    assert outcome.ttft_ms == pytest.approx(steps[0].duration_ms)
    by_drafts = {s.drafts: s.duration_ms for s in steps[1:]}
    for step in result.steps[1:]:
        assert step.duration_ms == pytest.approx(by_drafts.get(step.draft_tokens, step.duration_ms))
        assert step.duration_ms == pytest.approx(arm.step_base_ms + arm.step_per_token_ms * (step.draft_tokens + 1))


def test_old_configs_keep_their_meaning() -> None:
    """New arm fields are absent from an old arm's table and digest; the per-request model stays the default."""
    config = sim.default_config()
    assert config.step_model == "request"
    assert "step_model" not in config.to_dict()
    old_members = {"k", "acceptance", "step_base_ms", "step_per_token_ms", "ttft_base_ms", "ttft_per_1k_tokens_ms",
                   "clock_cap_mhz", "method", "verification", "image"}
    for arm in config.arms:
        assert set(arm.to_table()) == old_members
    batch = config.with_arm("A", max_num_seqs=4)
    assert batch.arm("A").digest() != config.arm("A").digest()
    assert batch.arm("A").to_table()["max_num_seqs"] == 4
    assert set(asdict(config.arm("A"))) > old_members


def _streams(url: str, n: int, max_tokens: int) -> None:
    """``n`` streamed requests sent together (one client each, connected first, released by a barrier)."""
    barrier = threading.Barrier(n)
    body = {"model": "m", "prompt": "a b c d", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}

    def one() -> None:
        with httpx.Client(timeout=60) as client:
            client.get(f"{url}/health")
            barrier.wait()
            with client.stream("POST", f"{url}/v1/completions", json=body) as response:
                for _ in response.iter_lines():
                    pass

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_http_simulator_batches_concurrent_requests() -> None:
    """step_model "batch": n concurrent streams each step at fixed + n x per_token (planned times in the truth
    log); max_num_seqs makes the rest wait; /metrics' iteration tokens count the whole batch's step."""
    config = sim.default_config().with_(step_model="batch", model="m", step_jitter=0.0, start_jitter=0.0,
                                        cold_ttft_extra_ms=0.0, production_arm="off")
    config = config.with_arm("off", step_base_ms=20.0, step_per_token_ms=5.0)
    n = 4
    with sim.start(config, time_scale=0.2) as host:
        _streams(host.url, n, 40)
        records = host.truth()["requests"]
        metrics = httpx.get(host.metrics_url).text
    gaps = [round((b - a) / 0.2 * 1000, 3) for r in records
            for a, b in zip(r["planned"][1:], r["planned"][2:], strict=False)]
    assert statistics.median(gaps) == pytest.approx(20.0 + n * 5.0, rel=0.01)
    iteration = [line for line in metrics.splitlines() if line.startswith("vllm:iteration_tokens_total_sum")]
    assert float(iteration[0].split()[-1]) > 40 * n   # each request's step counted the batch's tokens
    seated = config.with_arm("off", step_base_ms=20.0, step_per_token_ms=5.0, max_num_seqs=1)
    with sim.start(seated, time_scale=0.2) as host:
        _streams(host.url, 3, 10)
        records = host.truth()["requests"]
    spans = sorted((r["planned"][0], r["planned"][-1]) for r in records)
    for (_s1, end1), (start2, _e2) in itertools.pairwise(spans):
        assert start2 >= end1 - 1e-6   # one at a time: the next one's first token after the last one's end
