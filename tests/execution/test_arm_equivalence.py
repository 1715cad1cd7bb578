"""Arms proven equal (seed 003: "worker/engine identity ... attested"): at the first start of each role,
the identity its host reports must equal the plan's first start's, but for the arms' switches (or in the
paths the plan registers as ``equal_identity``); a difference is a start_config FAIL: REJECT, naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ledger.errors import FormatError
from runner.gates.start_config import arm_differences
from runner.plan.parse import parse_plan

from .worlds import close, gate_all, run, small, window, world

B_DIGEST = "1f3d1794386b1163334c6a363cd5fa7e3d2f904bd984538eecef139d9257f9b4"


def _other_image(text: str) -> str:
    """Arm B's engine runs another image than A's (its reported config digest still B's declared one)."""
    text = small(text)
    return re.sub(r'(role = "B"\n(?:.*\n)*?sim = \{)', rf'\1 image = "sim/vllm-openai:v0.13.0", '
                  rf'reported_digest = "{B_DIGEST}",', text, count=1)


def _gates(w: object, window_id: str) -> list[dict[str, object]]:
    return [e.payload for e in w.book.events(stream=f"window/{window_id}", types=["gate.result"])  # type: ignore[attr-defined]
            if e.payload["gate"] == "start_config"]


def test_arms_that_differ_outside_their_switches_are_rejected_naming_the_member(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "w1", edit=_other_image)])
    try:
        gate_all(w)
        result = run(w, "w1")
        assert result.ending == "aborted" and result.decision == "REJECT", result
        reasons = " ".join(result.reasons)
        assert "start_config FAIL for start s2" in reasons and "arms differ in image" in reasons, reasons
        assert "s2 (B) reports 'sim/vllm-openai:v0.13.0', s1 (A) 'sim/vllm-openai:v0.12.0'" in reasons, reasons
        s2 = next(g for g in _gates(w, "w1") if g["start"] == "s2")
        assert s2["verdict"] == "FAIL"
        assert s2["evidence"]["equivalence"] == {"reference": "s1", "equal": "default", "paths": None,   # type: ignore[index]
                                                 "differing": ["image"]}
    finally:
        close(w)


def test_a_plan_that_registers_what_must_be_equal_is_held_to_that(tmp_path: Path) -> None:
    def edit(text: str) -> str:
        return re.sub(r"^(commit = .*)$", r'\1\nequal_identity = ["model", "hosts"]', _other_image(text), count=1,
                      flags=re.M)

    w = world(tmp_path, [window("seed000-controlled.toml", "w1", edit=edit)])
    try:
        gate_all(w)
        assert run(w, "w1").ending == "restored"   # the image may differ: the plan said which members must not
        gates = {g["start"]: g for g in _gates(w, "w1")}
        assert gates["s2"]["verdict"] == "PASS"
        assert gates["s2"]["evidence"]["equivalence"] == {"reference": "s1", "equal": "registered",  # type: ignore[index]
                                                          "paths": ["model", "hosts"], "differing": []}
        assert "equivalence" not in gates["s1"]["evidence"] and gates["s3"]["verdict"] == "PASS"  # type: ignore[operator]
    finally:
        close(w)


def test_equal_arms_pass_and_every_start_is_compared_with_the_first(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed003-abba.toml", "pp3",
                                edit=lambda t: t.replace("max_tokens = 1024", "max_tokens = 48"))])
    try:
        gate_all(w)
        assert run(w, "pp3").ending == "restored"
        compared = {g["start"]: g["evidence"].get("equivalence") for g in _gates(w, "pp3")}   # type: ignore[union-attr]
        same = {"reference": "A1", "equal": "default", "paths": None, "differing": []}
        assert compared["A1"] is None and compared["B1"] == compared["B2"] == compared["A2"] == same
    finally:
        close(w)


def test_the_default_leaves_out_the_switches_and_compares_the_rest() -> None:
    llama_a = {"args": [], "model": "SmolLM2.gguf", "model_sha256": "aa", "server": "llama_cpp.server 0.3.36",
               "speculative_config": None}
    llama_b = {**llama_a, "args": ["--draft_model", "prompt-lookup-decoding"],
               "speculative_config": {"method": "prompt-lookup-decoding"}}
    assert arm_differences(llama_b, llama_a, None) == []
    assert arm_differences({**llama_b, "model_sha256": "bb"}, llama_a, None) == ["model_sha256"]
    vllm_a = {"command": {"module": "vllm.entrypoints.openai.api_server", "args": ["--port", "1"],
                          "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}, "model_files": {"config.json": "cc"},
              "server": "vLLM 0.32.0"}
    vllm_b = {"command": {"module": "vllm.entrypoints.openai.api_server", "args": ["--speculative-config", "{}"],
                          "env": {"VLLM_CPU_KVCACHE_SPACE": "2"}}, "model_files": {"config.json": "cc"},
              "server": "vLLM 0.33.0"}
    assert arm_differences(vllm_b, vllm_a, None) == ["server"]
    assert arm_differences(vllm_b, vllm_a, ("model_files", "command.module")) == []
    assert arm_differences(vllm_b, vllm_a, ("model_files", "tokenizer")) == ["tokenizer"]   # not reported: not shown


def test_equal_identity_is_checked_when_the_plan_is_read() -> None:
    from runner.demo.scenarios import DATA
    from runner.plan.parse import read_plan_file

    path = DATA / "seed000-controlled.toml"
    plain = read_plan_file(path).plan
    assert plain.equal_identity is None and "equal_identity" not in plain.to_json()   # the digest stands
    registered = read_plan_file(path, overrides={"equal_identity": ["model"]}).plan
    assert registered.equal_identity == ("model",) and registered.sha256 != plain.sha256
    assert parse_plan(registered.to_json()).equal_identity == ("model",)   # as registered, read back
    with pytest.raises(FormatError, match="an empty list compares nothing"):
        read_plan_file(path, overrides={"equal_identity": []})
    with pytest.raises(FormatError, match="equal_identity"):
        read_plan_file(path, overrides={"equal_identity": ["model x"]})
