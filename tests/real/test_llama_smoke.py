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
