"""The simulator plays the smoke stage faithfully: T=0 identity across arms, its faults, stop, schema, hangs."""

from __future__ import annotations

import json
import time

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

import runner.sim as sim
from runner.sim import SimHandle
from runner.sim.config import ArmConfig
from runner.sim.model import Generation, SamplingParams
from tests.simhelpers import fast_config


def emitted(arm: ArmConfig, max_tokens: int = 40, diverge: tuple[int, bool] | None = None,
            seed_key: str = "seeded") -> list[int]:
    gen = Generation(arm=arm, params=SamplingParams(max_tokens=max_tokens, greedy=True, ignore_eos=True),
                     prompt_tokens=10, seed_key=seed_key, greedy_key="prompt", diverge=diverge)
    tokens: list[int] = []
    while (step := gen.next_step()) is not None:
        tokens.extend(step.tokens)
    return tokens


@settings(max_examples=30, deadline=None)
@given(k=st.integers(0, 7), accept=st.floats(0.0, 1.0), seed=st.text(max_size=4))
def test_t0_output_is_the_same_on_every_arm_whatever_its_drafts(k: int, accept: float, seed: str) -> None:
    plain = emitted(ArmConfig("plain", k=0, acceptance=()))
    spec = emitted(ArmConfig("spec", k=k, acceptance=(accept,) * k), seed_key=seed)
    assert spec == plain


def test_a_diverging_arm_takes_the_runner_up_at_the_position_and_goes_its_own_way() -> None:
    arm = ArmConfig("spec", k=3, acceptance=(0.8, 0.6, 0.4))
    base = emitted(arm)
    diverged = emitted(arm, diverge=(7, False))
    assert diverged[:7] == base[:7] and diverged[7] != base[7]
    assert diverged[8:] != base[8:]
    gen = Generation(arm=arm, params=SamplingParams(max_tokens=4, greedy=True), prompt_tokens=1, seed_key="s",
                     greedy_key="prompt", diverge=(7, True))
    assert gen.margin(7) == 0.01 and gen.margin(6) > 0.5  # a near tie only where the fault says


def _complete(http: httpx.Client, url: str, **body: object) -> dict:
    reply = http.post(f"{url}/v1/completions", json={"prompt": "one two three four", "temperature": 0,
                                                     "max_tokens": 24, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_diverge_fault_applies_to_its_arm_at_t0_only(server: SimHandle, http: httpx.Client) -> None:
    before = _complete(http, server.url, return_token_ids=True)["choices"][0]["token_ids"]
    server.set_faults(greedy_diverge={"arm": "someone-else", "position": 2})
    assert _complete(http, server.url, return_token_ids=True)["choices"][0]["token_ids"] == before
    server.set_faults(greedy_diverge={"arm": "production", "position": 2})
    after = _complete(http, server.url, return_token_ids=True, logprobs=2)["choices"][0]
    assert after["token_ids"][:2] == before[:2] and after["token_ids"][2] != before[2]
    tops = after["logprobs"]["top_logprobs"]
    assert len(tops) == len(after["token_ids"]) and all(len(t) == 2 for t in tops)


def test_stop_strings_end_the_text_before_their_first_occurrence_unless_ignored(server: SimHandle,
                                                                                http: httpx.Client) -> None:
    full = _complete(http, server.url)["choices"][0]["text"]
    word = full.split()[5]
    cut = _complete(http, server.url, stop=[word])["choices"][0]
    assert cut["text"] == full[: full.find(word)] and cut["finish_reason"] == "stop"
    server.set_faults(ignore_stop={})
    ignored = _complete(http, server.url, stop=[word])["choices"][0]
    assert ignored["text"] == full and ignored["finish_reason"] == "length"


def test_structured_outputs_answer_the_schema_unless_the_fault_ignores_it(server: SimHandle,
                                                                         http: httpx.Client) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
              "required": ["name", "count"]}
    for field in ({"structured_outputs": {"json": schema}}, {"guided_json": schema}):
        value = json.loads(_complete(http, server.url, **field)["choices"][0]["text"])
        assert isinstance(value["name"], str) and isinstance(value["count"], int)
    server.set_faults(ignore_schema={"arm": "production"})
    text = _complete(http, server.url, structured_outputs={"json": schema})["choices"][0]["text"]
    try:
        json.loads(text)
        parsed = True
    except ValueError:
        parsed = False
    assert not parsed


def test_an_engine_hangs_after_a_cancel_when_the_fault_says_so() -> None:
    with sim.start(fast_config(faults={"hang_after_cancel": {"seconds": 1.5}}), seed=3) as handle, \
            httpx.Client(timeout=30) as http:
        with http.stream("POST", f"{handle.url}/v1/completions",
                         json={"prompt": "a b", "max_tokens": 400, "stream": True, "ignore_eos": True}) as reply:
            next(reply.iter_bytes())  # the first chunk, then the client leaves
        time.sleep(0.3)  # the server notices on its next write
        began = time.perf_counter()
        _complete(http, handle.url, max_tokens=2)
        assert time.perf_counter() - began > 0.8  # the next request waited out the hang


def test_a_t0_prompt_ending_with_part_of_its_continuation_continues_it(server: SimHandle, http: httpx.Client) -> None:
    """Teacher forcing: at T=0 a token depends on the context before it, so prompt + the first k tokens of the
    continuation continue with the rest of it, margins included."""
    whole = _complete(http, server.url, return_token_ids=True, logprobs=2)["choices"][0]
    prompt, ids = whole["prompt_token_ids"], whole["token_ids"]
    forced = _complete(http, server.url, prompt=prompt + ids[:9], max_tokens=24 - 9, return_token_ids=True,
                       logprobs=2)["choices"][0]
    assert forced["token_ids"] == ids[9:]
    assert forced["logprobs"]["top_logprobs"] == whole["logprobs"]["top_logprobs"][9:]
    other = _complete(http, server.url, prompt=[*prompt, ids[0] + 1], max_tokens=8, return_token_ids=True)
    assert other["choices"][0]["token_ids"] != ids[1:9]  # another token there: another continuation


def test_the_lossy_fault_takes_the_request_the_near_tie_spared(server: SimHandle, http: httpx.Client) -> None:
    before = _complete(http, server.url, return_token_ids=True)["choices"][0]["token_ids"]
    server.set_faults(greedy_diverge={"arm": "production", "position": 2, "near_tie": True},
                      greedy_lossy={"arm": "production", "position": 5})
    tied = _complete(http, server.url, return_token_ids=True, logprobs=2)["choices"][0]
    assert tied["token_ids"][:2] == before[:2] and tied["token_ids"][2] != before[2]
    assert min(tied["logprobs"]["top_logprobs"][2].values()) > max(tied["logprobs"]["top_logprobs"][2].values()) - 0.02
    lossy = _complete(http, server.url, return_token_ids=True, logprobs=2)["choices"][0]
    assert lossy["token_ids"][:5] == before[:5] and lossy["token_ids"][5] != before[5]
    top = sorted(lossy["logprobs"]["top_logprobs"][5].values())
    assert top[1] - top[0] >= 0.5  # an ordinary margin: no near tie
    assert _complete(http, server.url, return_token_ids=True)["choices"][0]["token_ids"] == before  # both spent


def test_a_penalty_changes_the_t0_answer_and_a_default_one_stays_unless_neutralised() -> None:
    """A server whose own repeat penalty is 1.1 (llama-cpp-python's) answers T=0 otherwise than the raw top-1,
    until the request sets it neutral, under vLLM's name or llama-cpp-python's; one that ignores the field
    keeps its default whatever the request says."""
    neutral = {"repetition_penalty": 1.0}
    with sim.start(fast_config(), seed=5) as raw, sim.start(fast_config(repetition_penalty=1.1), seed=5) as llama, \
            sim.start(fast_config(repetition_penalty=1.1, ignore_fields=["repetition_penalty"]), seed=5) as deaf, \
            httpx.Client(timeout=30) as http:
        top1 = _complete(http, raw.url)["choices"][0]["text"]
        assert _complete(http, raw.url, presence_penalty=2.0)["choices"][0]["text"] != top1
        assert _complete(http, raw.url, frequency_penalty=2.0)["choices"][0]["text"] != top1
        assert _complete(http, llama.url)["choices"][0]["text"] != top1  # its default is on
        assert _complete(http, llama.url, **neutral)["choices"][0]["text"] == top1
        assert _complete(http, llama.url, repeat_penalty=1.0)["choices"][0]["text"] == top1
        assert _complete(http, deaf.url, **neutral, repeat_penalty=1.0)["choices"][0]["text"] != top1
