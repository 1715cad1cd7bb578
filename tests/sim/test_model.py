"""The speculative-decoding model (pure): prefix acceptance, counting, timing, determinism."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runner.sim.config import ArmConfig
from runner.sim.model import Generation, SamplingParams, prompt_token_ids


def run(arm: ArmConfig, max_tokens: int, key: str = "k", **params: object) -> list:
    gen = Generation(arm=arm, params=SamplingParams(max_tokens=max_tokens, **params),  # type: ignore[arg-type]
                     prompt_tokens=100, seed_key=key)
    steps = []
    while (step := gen.next_step()) is not None:
        steps.append(step)
    return steps


def test_acceptance_matches_the_configured_probabilities() -> None:
    arm = ArmConfig("x", k=4, acceptance=(0.9, 0.6, 0.5, 0.2))
    steps = run(arm, 40_000, ignore_eos=True)
    rounds = [s for s in steps if s.drafts == 4]
    mean = sum(s.accepted for s in rounds) / len(rounds)
    assert abs(mean - arm.expected_accepted_per_round()) < 0.03
    first_pos = sum(1 for s in rounds if s.accepted >= 1) / len(rounds)
    assert abs(first_pos - 0.9) < 0.01


@given(max_tokens=st.integers(1, 300), k=st.integers(0, 6), seed=st.text(max_size=5))
def test_token_accounting(max_tokens: int, k: int, seed: str) -> None:
    arm = ArmConfig("x", k=k, acceptance=tuple([0.7] * k))
    steps = run(arm, max_tokens, key=seed, ignore_eos=True)
    assert sum(len(s.tokens) for s in steps) == max_tokens
    assert steps[0].drafts == 0 and len(steps[0].tokens) == 1
    for s in steps[1:]:
        assert 0 <= s.accepted <= s.drafts == k   # full-depth drafts to the end, as vLLM schedules them
    for s in steps[1:-1]:
        assert len(s.tokens) == 1 + s.accepted
    assert steps[-1].finish_reason == "length"
    # the last step's accepted drafts past max_tokens are counted, as vLLM counts them, and not emitted
    last = steps[-1]
    assert 1 <= len(last.tokens) <= 1 + last.accepted
    discarded = 1 + last.accepted - len(last.tokens) if last.index > 0 else 0
    assert len(steps) + sum(s.accepted for s in steps) == max_tokens + discarded


def test_accepted_past_max_tokens_is_counted_not_emitted() -> None:
    # every draft accepted: a 5-deep step with 2 tokens left emits 2 and counts 5 accepted (vLLM does)
    steps = run(ArmConfig("x", k=5, acceptance=(1.0,) * 5), 8, ignore_eos=True)
    assert [len(s.tokens) for s in steps] == [1, 6, 1]
    assert [s.accepted for s in steps] == [0, 5, 5]


def test_step_time_grows_with_depth_and_clock_dial_back() -> None:
    shallow = run(ArmConfig("s", k=1, acceptance=(0.5,), step_base_ms=10, step_per_token_ms=1), 50, ignore_eos=True)
    deep = run(ArmConfig("d", k=5, acceptance=(0.5,) * 5, step_base_ms=10, step_per_token_ms=1), 50, ignore_eos=True)
    assert shallow[1].duration_ms == 12.0 and deep[1].duration_ms == 16.0
    gen = Generation(arm=ArmConfig("x", step_base_ms=10, step_per_token_ms=0), params=SamplingParams(max_tokens=5),
                     prompt_tokens=1, seed_key="c")
    gen.next_step()
    assert gen.next_step(clock_factor=1.15).duration_ms == 10 * 1.15  # type: ignore[union-attr]


def test_a_draft_rate_below_one_drafts_in_that_share_of_steps() -> None:
    """draft_rate 0.3 (prompt lookup): about 30 % of decode steps draft, the others schedule one token and
    cost a plain step; at the default 1 every decode step but none drafts."""
    arm = ArmConfig("lookup", k=4, acceptance=(0.5,) * 4, step_base_ms=10, step_per_token_ms=1, draft_rate=0.3)
    steps = [s for key in range(20) for s in run(arm, 200, key=f"r{key}", ignore_eos=True)[1:]]
    drafting = [s for s in steps if s.drafts]
    assert 0.25 < len(drafting) / len(steps) < 0.35, len(drafting) / len(steps)
    assert all(s.duration_ms == 11.0 for s in steps if not s.drafts)   # one token: base + 1 x per token
    every = run(ArmConfig("draft", k=4, acceptance=(0.5,) * 4), 200, ignore_eos=True)[1:]
    assert all(s.drafts == 4 for s in every)


def test_ttft_depends_on_prompt_length() -> None:
    arm = ArmConfig("x", ttft_base_ms=40, ttft_per_1k_tokens_ms=12)
    short = Generation(arm=arm, params=SamplingParams(max_tokens=2), prompt_tokens=1000, seed_key="a").next_step()
    long = Generation(arm=arm, params=SamplingParams(max_tokens=2), prompt_tokens=150_000, seed_key="a").next_step()
    assert short is not None and long is not None
    assert short.duration_ms == 52.0 and long.duration_ms == 40 + 12 * 150


def test_eos_stops_unless_ignored_and_min_tokens() -> None:
    arm = ArmConfig("x")
    forced = run(arm, 8, allowed_token_ids=(1,))
    assert forced[-1].finish_reason == "stop" and sum(len(s.tokens) for s in forced) == 1
    ignored = run(arm, 8, allowed_token_ids=(1,), ignore_eos=True)
    assert ignored[-1].finish_reason == "length" and sum(len(s.tokens) for s in ignored) == 8
    blocked = run(arm, 8, allowed_token_ids=(1, 5), min_tokens=4)
    assert sum(len(s.tokens) for s in blocked) >= 5 or blocked[-1].finish_reason == "length"


def test_same_key_same_steps() -> None:
    arm = ArmConfig("x")
    assert run(arm, 200, key="a", ignore_eos=True) == run(arm, 200, key="a", ignore_eos=True)
    assert run(arm, 200, key="a", ignore_eos=True) != run(arm, 200, key="b", ignore_eos=True)


def test_tokenizer_is_deterministic() -> None:
    assert prompt_token_ids("a b  c", 32000) == prompt_token_ids("a b c", 32000)
    assert len(prompt_token_ids("one two three", 32000)) == 3
