"""The smoke stage's greedy identity probe on the real llama.cpp pair: it runs, and its outcome is recorded.

Plain llama_cpp.server (A) against prompt-lookup speculative decoding (B), SmolLM2-135M on
CPU. llama-cpp-python returns no token ids, so the plan declares ``compare = "text"``: the
tokens' texts from ``logprobs`` on ``/v1/completions`` (a server that refuses logprobs is
asked again without, and compared by characters). Tiny: 8 greedy tokens per start.
"""

from __future__ import annotations

import json
from pathlib import Path

from .llamasite import LlamaSite
from .test_llama_windows import _after, _window, home  # noqa: F401 (fixture)

SMOKE = """
[smoke]
starts = ["A1", "B1"]
probes = ["greedy_identity"]
compare = "text"
max_tokens = 8
logprobs = 2
near_tie_margin = 0.05
timeout_s = 120.0
"""


def test_the_greedy_identity_probe_runs_on_the_real_pair_and_records_its_evidence(
        llama_site: LlamaSite, home: Path) -> None:  # noqa: F811
    plan = llama_site.directory / "pp3-llamacpp-smoke.toml"
    text = (llama_site.directory / "pp3-llamacpp.toml").read_text().replace('"llamacpp-pp3"',
                                                                             '"llamacpp-smoke"')
    plan.write_text(text + SMOKE)
    window_id, result, book = _window(llama_site, home, plan.name)
    try:
        assert result["ending"] == "restored", result
        events = _after(llama_site, home, window_id, book)
        results = {e.payload["start"]: e.payload for e in events if e.type == "smoke.result"}
        assert set(results) == {"A1", "B1"}
        assert results["A1"]["outcome"] == "recorded"
        b1 = results["B1"]
        assert b1["outcome"] in ("pass", "near_tie", "fail") and b1["reference"] == "A1"
        evidence = json.loads(book.blob(b1["evidence"]["blob"].removeprefix("sha256:")).data)  # type: ignore[union-attr]
        mine, ref = evidence["emitted"], evidence["reference"]["emitted"]
        assert mine["sequence"] and ref["sequence"] and mine["basis"] in ("token_text", "characters")
        if b1["outcome"] == "pass":
            assert mine["text"] == ref["text"]
        else:  # where they differ, and both continuations from there
            assert b1["position"] is not None and evidence["divergence"]["candidate_continuation"]
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        failed = b1["outcome"] == "fail"  # a failure reaches the decision as a REJECT naming it
        assert any(r.startswith("failure: greedy-identity") for r in decision["result"]["reasons"]) == failed
        assert decision["result"]["decision"] == "REJECT" or not failed
    finally:
        book.close()


# ---------------------------------------------------------------------- the smoke stage judges what it measured

STAGE = """
[smoke]
starts = ["A1", "B1"]
probes = ["greedy_identity", "stop"]
compare = "text"
max_tokens = 32
logprobs = 2
near_tie_margin = 0.15
timeout_s = 120.0
"""
# 0.15 nats: batched draft verification shifts the logprobs of identical tokens by up to 0.14 nats here
# (measured on this pair); a q4_0 KV cache moves them by more.
Q4KV_ARM = """
[arms.lookup-q4kv]            # the lossy candidate: prompt lookup and a q4_0 KV cache (K and V)
args = ["--logits_all", "True", "--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "8",
        "--type_k", "2", "--type_v", "2", "--flash_attn", "True"]
speculative = { method = "prompt-lookup-decoding", num_speculative_tokens = 8, verification = "standard" }
"""


def _stage_plan(site: LlamaSite, window_id: str, candidate: str | None = None) -> str:
    """The example pp3 plan with the issue's smoke stage; ``candidate``: another arm B of the site."""
    text = (site.directory / "pp3-llamacpp.toml").read_text().replace('"llamacpp-pp3"', f'"{window_id}"')
    if candidate is not None:
        config = site.directory / "llamasite.toml"
        if f"[arms.{candidate}]" not in config.read_text():
            config.write_text(config.read_text() + Q4KV_ARM)
        digest = site.script("digest", candidate).stdout.strip().splitlines()[-1]
        text = text.replace('name = "lookup"', f'name = "{candidate}"').replace(
            "30871e973a08e4bbbf455b0c70edee9ff847364a1831727c7c7bd6b586bfa056", digest)
    name = f"{window_id}.toml"
    (site.directory / name).write_text(text + STAGE)
    return name


def test_plain_against_honest_prompt_lookup_is_not_rejected_by_the_smoke_stage(
        llama_site: LlamaSite, home: Path) -> None:  # noqa: F811
    """Greedy identity (near ties followed teacher-forced) and the stop probe pass an honest candidate; the
    rehearsal found llama-cpp-python's repeat_penalty honoured, so its T=0 requests were greedy."""
    window_id, result, book = _window(llama_site, home, _stage_plan(llama_site, "llamacpp-smoke-honest"))
    try:
        assert result["ending"] == "restored", result
        events = _after(llama_site, home, window_id, book)
        fields = next(e.payload for e in events if e.type == "gate.result" and e.payload["gate"] == "rehearsal")
        assert fields["evidence"]["fields"]["repetition_penalty"] == "honoured", fields["evidence"]["fields"]
        results = {(e.payload["start"], e.payload["probe"]): e.payload for e in events if e.type == "smoke.result"}
        b1 = results[("B1", "greedy_identity")]
        assert b1["outcome"] in ("pass", "near_tie"), b1["summary"]
        assert results[("B1", "stop")]["outcome"] in ("pass", "not_exercised"), results[("B1", "stop")]["summary"]
        decision = next(e.payload for e in events if e.type == "decision.recorded")["result"]
        assert decision["decision"] != "REJECT", decision["reasons"]
        assert not any(r.startswith("failure: ") for r in decision["reasons"]), decision["reasons"]
    finally:
        book.close()


def test_plain_against_prompt_lookup_with_a_q4_0_kv_cache_is_rejected_by_greedy_identity(
        llama_site: LlamaSite, home: Path) -> None:  # noqa: F811
    window_id, result, book = _window(llama_site, home,
                                      _stage_plan(llama_site, "llamacpp-smoke-q4kv", "lookup-q4kv"))
    try:
        assert result["ending"] == "restored", result
        events = _after(llama_site, home, window_id, book)
        b1 = next(e.payload for e in events if e.type == "smoke.result" and e.payload["start"] == "B1"
                  and e.payload["probe"] == "greedy_identity")
        assert b1["outcome"] == "fail" and b1["margin"] is not None and b1["margin"] > 0.15, b1["summary"]
        decision = next(e.payload for e in events if e.type == "decision.recorded")["result"]
        assert decision["decision"] == "REJECT"
        assert any(r.startswith("failure: greedy-identity: B1 diverges from A1") for r in decision["reasons"])
    finally:
        book.close()
