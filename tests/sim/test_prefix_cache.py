"""The simulator's prefix cache behaves as vLLM's: a primed prefix under the same cache_salt skips its prefill."""

from __future__ import annotations

from typing import Any

import httpx

from runner.sim import SimHandle
from runner.sim.prefix import BLOCK_TOKENS, PrefixCache

from .conftest import MODEL

PROMPT = " ".join(f"w{i % 97}" for i in range(1000))  # 1000 tokens on the simulator's tokenizer


def _send(http: httpx.Client, server: SimHandle, salt: str | None) -> None:
    body: dict[str, Any] = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2, "seed": 1}
    if salt is not None:
        body["cache_salt"] = salt
    assert http.post(f"{server.url}/v1/completions", json=body).status_code == 200


def _prefill_s(request: dict[str, Any]) -> float:
    """Planned time of the first token after the arrival (the model's prefill, no host noise)."""
    return float(request["planned"][0] - request["arrival"])


def test_a_primed_prefix_lowers_the_prefill(server: SimHandle, http: httpx.Client) -> None:
    for salt in ("block-a1", "block-a1", "block-b1"):
        _send(http, server, salt)
    first, primed, other = server.truth()["requests"][-3:]
    assert first["cached_tokens"] == 0 and first["prompt_tokens"] == 1000
    assert primed["cached_tokens"] == 1000 // BLOCK_TOKENS * BLOCK_TOKENS  # full blocks only
    assert other["cached_tokens"] == 0                                   # another salt shares nothing
    assert _prefill_s(primed) < _prefill_s(first) and _prefill_s(primed) < _prefill_s(other)


def test_a_restarted_engine_starts_with_an_empty_cache(server: SimHandle, http: httpx.Client) -> None:
    server.control("drain")
    server.control("start_arm", arm="B", role="experiment")
    _send(http, server, None)
    _send(http, server, None)
    assert server.truth()["requests"][-1]["cached_tokens"] > 0  # no salt: still cached, as in vLLM
    server.control("stop_arm")
    server.control("start_arm", arm="B", role="experiment")
    _send(http, server, None)
    assert server.truth()["requests"][-1]["cached_tokens"] == 0


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    cache = PrefixCache()
    prompt = list(range(32))
    assert cache.admit("s", prompt) == 0
    assert cache.admit("s", prompt) == 31
    assert cache.admit("s", prompt[:20]) == 16 and cache.admit("t", prompt) == 0
