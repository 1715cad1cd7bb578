"""The capability probe and the rehearsal's vLLM checks on the real vLLM 0.32 pair.

Recorded as each field really is on vLLM 0.32 (measured here): ``seed``, ``max_tokens``,
``ignore_eos``, ``min_tokens``, ``allowed_token_ids``, ``stop_token_ids``, ``stop``,
``return_token_ids``, ``stream_options.include_usage``, ``cache_salt`` and vLLM's
``structured_outputs`` honoured; ``guided_json`` (gone since v0.12) and llama-cpp-python's
``response_format`` form ignored. ``logit_bias``: vLLM 0.32 still refuses it under
speculative decoding (the control's 400, the R16 cause confirmed on the n-gram engine),
and the plain engine acts on it (the control's 200, learnt from ``bias-eos``): the
rehearsal passes both. ``priority`` is read by a type check on both (vLLM reads it
under either scheduling policy; whether it is acted on is not observable in a tiny probe).
"""

from __future__ import annotations

import json
from pathlib import Path

from .test_llama_windows import _tally
from .vllmpair import EOS, VllmSite

HONOURED = ("seed", "max_tokens", "ignore_eos", "min_tokens", "allowed_token_ids", "stop_token_ids", "stop",
            "return_token_ids", "stream_options.include_usage", "cache_salt", "structured_outputs")


def _rehearse(site: VllmSite, arm: str, out: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    out.mkdir(parents=True)
    done = _tally(out, "rehearse", "--url", site.url(arm), "--eos", str(EOS), "--out", str(out / "r"), "--json",
                  timeout=600)
    return done.returncode, json.loads(done.stdout)


def test_the_capability_probe_records_each_field_as_vllm_032_has_it(vllm_pair: VllmSite, tmp_path: Path) -> None:
    for arm in ("plain", "ngram"):
        code, out = _rehearse(vllm_pair, arm, tmp_path / arm)
        fields = out["fields"]
        assert all(fields[f] == "honoured" for f in HONOURED), (arm, fields)
        assert fields["guided_json"] == fields["response_format"] == "ignored", (arm, fields)
        assert fields["priority"] == "honoured"   # a type check: the object is refused (body.priority)
        priority = next(c for c in out["capabilities"] if c["field"] == "priority")
        assert priority["basis"] == "type check"
        assert code == 0 and out["verdict"] == "PASS", (arm, out["reading"], out["capability_failures"])
        control = next(p for p in out["probes"] if p["probe"] == "control")
        if arm == "ngram":   # refused under speculative decoding, with vLLM's message: the cause confirmed
            assert control["status"] == 400 and "speculative decoding" in control["error"]["message"]
            assert out["cause_confirmed"] is True and fields["logit_bias"] == "refused"
        else:                # answered and acted on: the rehearsal learnt it, and passes a healthy server
            assert control["status"] == 200 and control["ok"] and "acts on it" in control["detail"]
            assert out["cause_confirmed"] is False and fields["logit_bias"] == "honoured"
