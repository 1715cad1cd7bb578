"""The example vLLM site's own parts: those that need no vLLM (the start-up line it reads the speculative
config from, and the serving port's relay, router.py, tried against the simulator on every test run), and its
warm-up on the real pair (sent as the waves are)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import httpx
import pytest

import runner.sim as sim
from tests.simhelpers import fast_config

from .sitecopy import free_port
from .vllmpair import EXAMPLE, VllmSite


def _site_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllmsite", EXAMPLE / "site-scripts" / "vllmsite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LINE = ("(EngineCore pid=18395) INFO 12-01 22:17:33 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
        "config: model='/m', speculative_config={spec}, tokenizer='/m', skip_tokenizer_init=False, dtype=bfloat16")


@pytest.mark.parametrize(("logged", "want"), [
    ("SpeculativeConfig(method='ngram', model=None, num_spec_tokens=4)", {"method": "ngram",
                                                                          "num_speculative_tokens": 4}),
    ("SpeculativeConfig(method='draft_model', model='/d', num_spec_tokens=3)",
     {"method": "draft_model", "num_speculative_tokens": 3, "model": "/d"}),
    ("None", None),
])
def test_the_speculative_config_is_the_engines_own_start_up_line(tmp_path: Path, logged: str,
                                                                  want: dict | None) -> None:  # type: ignore[type-arg]
    log = tmp_path / "engine.log"
    log.write_text("noise\n" + LINE.format(spec=logged) + "\nmore noise\n")
    assert _site_module().speculative_from_log(log) == (True, want)


def test_an_engine_without_its_start_up_line_reports_nothing(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO started\n")
    assert _site_module().speculative_from_log(log) == (False, None)
    assert _site_module().speculative_from_log(tmp_path / "missing.log") == (False, None)


def _route(state: Path, port: int | None, router: subprocess.Popen[bytes]) -> None:
    (state / "route.json").write_text(json.dumps({"port": port}))
    router.send_signal(signal.SIGHUP)
    time.sleep(0.3)


def test_the_router_relays_the_routed_engine_and_answers_503_when_nothing_is(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "route.json").write_text(json.dumps({"port": None}))
    port = free_port()
    router = subprocess.Popen([sys.executable, str(EXAMPLE / "router.py"), "--port", str(port), "--state",
                               str(state)], stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 20
        while True:
            with contextlib.suppress(httpx.TransportError):
                down = httpx.get(url + "/v1/models", timeout=5)
                break
            assert time.time() < deadline, "the router did not listen"
            time.sleep(0.1)
        assert down.status_code == 503 and down.json()["error"]["type"] == "ServiceUnavailableError"
        with sim.start(fast_config(), seed=5) as engine, httpx.Client(timeout=30) as client:
            _route(state, int(engine.url.rsplit(":", 1)[1]), router)
            frames = []
            with client.stream("POST", url + "/v1/completions", json={"prompt": "a b c", "max_tokens": 12,
                                                                      "ignore_eos": True, "stream": True}) as r:
                frames = [line for line in r.iter_lines() if line.startswith("data: ")]
            assert frames[-1] == "data: [DONE]" and len(frames) >= 3   # chunk by chunk, through the relay
            assert client.get(url + "/metrics").status_code == 200
            _route(state, None, router)   # a route change closes the kept-alive connection
            assert client.get(url + "/v1/models").status_code == 503
    finally:
        with contextlib.suppress(OSError):
            os.killpg(router.pid, signal.SIGTERM)
        router.wait(timeout=10)


def _chat_requests(url: str) -> float:
    """vLLM's own count of chat completions it answered 2xx (its HTTP instrumentation, per handler)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("http_requests_total{") and 'handler="/v1/chat/completions"' in line
               and 'status="2xx"' in line)


def test_the_site_warm_up_is_sent_as_the_waves_are_on_real_vllm(vllm_pair: VllmSite) -> None:
    """The example site's warm-up carries the plan's engine-side sampling fields (``params.engine_sampling``)
    and goes to chat completions when the waves do (``params.endpoint``): vLLM refuses the warm-up whose
    repetition_penalty it refuses (so the field reached it), and counts a chat warm-up's two requests on the
    chat handler. Production is routed back after (``up``)."""
    def warmup(params: dict[str, object]) -> subprocess.CompletedProcess[str]:
        request = json.dumps({"action": "warmup", "host": None, "params": params})
        return subprocess.run(vllm_pair.command("warmup"), capture_output=True, text=True, timeout=300,
                              cwd=vllm_pair.directory, env=dict(os.environ, TALLY_REQUEST=request))

    plain = vllm_pair.url("plain")
    try:
        assert vllm_pair.script("drain").returncode == 0
        started = vllm_pair.script("start_arm", "plain", "A")
        assert started.returncode == 0, started.stderr
        before = _chat_requests(plain)
        chat = warmup({"endpoint": "chat", "engine_sampling": {"repetition_penalty": 1.0}})
        assert chat.returncode == 0, chat.stderr
        assert _chat_requests(plain) - before == 2
        refused = warmup({"engine_sampling": {"repetition_penalty": -1.0}})
        assert refused.returncode != 0 and "did not answer the warm-up" in refused.stdout + refused.stderr
        assert warmup({}).returncode == 0   # without the field: the same request is served
    finally:
        vllm_pair.script("stop_arm")
        up = vllm_pair.script("up", timeout=1200)
        assert up.returncode == 0, up.stderr
