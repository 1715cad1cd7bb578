"""The example llama.cpp site's server itself, on the real llama_cpp.server (production of the session's site).

llama_cpp.server serves one request at a time and, by default (``interrupt_requests``),
ends the stream in flight as soon as another request waits: no ``finish_reason``, no
``[DONE]`` (measured here: at concurrency 2, three of four 32-token requests cut after one
token). The site starts its servers with ``--interrupt_requests False``, so a request that
arrives meanwhile waits its turn and a wave above concurrency 1 is measured whole.
"""

from __future__ import annotations

from runner.measure.family import Prompt
from runner.measure.wave import measure_wave

from .llamasite import LlamaSite

COUNT = "Count from one to one hundred: one, two, three,"


def test_a_wave_at_concurrency_3_delivers_every_stream_whole(llama_site: LlamaSite) -> None:
    url = llama_site.serving_url
    prompts = tuple(Prompt(f"count-{i}", COUNT) for i in range(3))
    wave = measure_wave(url, url + "/metrics", prompts, model="smollm2", max_tokens=24, seed=5, concurrency=3,
                        counter_source="llamacpp", speculative=False, wave_deadline_s=180.0)
    records = sorted(wave.requests, key=lambda r: r.send_t)
    assert all(r.status == "ok" and r.finish_reason == "length" and r.delivered_tokens == 24 for r in records), \
        [(r.status, r.reason, r.delivered_tokens) for r in records]
    assert wave.complete, wave.incomplete_reasons
    # all three were in flight together, and served one after another: the last to start streaming
    # waited for the others (its first token came after at least one of them had ended)
    first_token = [r.send_t + r.chunk_t[0] for r in records]
    ended = [r.send_t + r.ended_s for r in records]
    assert max(r.send_t for r in records) < min(ended)
    assert max(first_token) > min(ended)


def test_the_site_warm_up_goes_to_chat_completions_on_real_llama_cpp(llama_site: LlamaSite) -> None:
    """The example site's warm-up with ``params.endpoint = "chat"`` (the waves go to chat completions) is a chat
    request llama_cpp.server serves; the plan's engine-side sampling fields ride along in its body. Unlike vLLM
    (tests/real/test_vllm_site_parts.py), llama_cpp.server serves a repetition_penalty of -1 (it reads
    ``repeat_penalty``, and ignores a field it does not know): a field it ignores is the capability probe's to
    find before the window, not the warm-up's."""
    import json
    import os
    import subprocess

    def warmup(params: dict[str, object]) -> subprocess.CompletedProcess[str]:
        request = json.dumps({"action": "warmup", "host": None, "params": params})
        return subprocess.run(llama_site.command("warmup"), capture_output=True, text=True, timeout=300,
                              cwd=llama_site.directory, env=dict(os.environ, TALLY_REQUEST=request))

    chat = warmup({"endpoint": "chat", "engine_sampling": {"repetition_penalty": 1.0}})
    assert chat.returncode == 0, chat.stderr
    assert '"requests": 2' in chat.stdout
    ignored = warmup({"endpoint": "chat", "engine_sampling": {"repetition_penalty": -1.0}})
    assert ignored.returncode == 0 and '"requests": 2' in ignored.stdout, ignored.stderr
