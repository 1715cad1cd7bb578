"""The OpenAI-compatible surface: request fields, chunk shapes, usage, [DONE], vLLM's errors."""

from __future__ import annotations

import json
from typing import Any

import httpx

from runner.sim import SimHandle

from .conftest import MODEL


def frames(response: httpx.Response) -> list[Any]:
    """The SSE data of a streamed response ([DONE] kept as the string)."""
    out: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream(http: httpx.Client, url: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
    with http.stream("POST", url, json=body) as response:
        return response.status_code, frames(response)


def test_models_health_version(server: SimHandle, http: httpx.Client) -> None:
    models = http.get(f"{server.url}/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == MODEL
    assert http.get(f"{server.url}/health").status_code == 200
    assert "version" in http.get(f"{server.url}/version").json()


def test_streaming_completion_shape(server: SimHandle, http: httpx.Client) -> None:
    status, data = stream(http, f"{server.url}/v1/completions", {
        "model": MODEL, "prompt": "The court held that", "max_tokens": 40, "ignore_eos": True, "seed": 5,
        "temperature": 1.0, "top_p": 1.0, "stream": True, "stream_options": {"include_usage": True},
        "return_token_ids": True, "cache_salt": "s1", "priority": 10,
    })
    assert status == 200
    assert data[-1] == "[DONE]"
    usage_chunk = data[-2]
    assert usage_chunk["choices"] == [] and list(usage_chunk["usage"]) == ["prompt_tokens", "total_tokens",
                                                                           "completion_tokens"]
    assert usage_chunk["usage"]["completion_tokens"] == 40
    chunks = data[:-2]
    assert all(c["object"] == "text_completion" and c["id"].startswith("cmpl-") for c in chunks)
    assert chunks[0]["choices"][0]["prompt_token_ids"] is not None
    assert all(c["choices"][0]["prompt_token_ids"] is None for c in chunks[1:])
    # one chunk per engine step: 1 + accepted tokens, the first (prefill) exactly one
    sizes = [len(c["choices"][0]["token_ids"]) for c in chunks]
    assert sizes[0] == 1 and sum(sizes) == 40 and max(sizes) <= 6 and max(sizes) > 1
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]


def test_usage_only_when_asked(server: SimHandle, http: httpx.Client) -> None:
    _, data = stream(http, f"{server.url}/v1/completions", {"prompt": "x y", "max_tokens": 5, "stream": True,
                                                            "ignore_eos": True})
    assert data[-1] == "[DONE]" and all("usage" not in d for d in data[:-1])
    assert all(d["choices"][0]["token_ids"] is None for d in data[:-1])


def test_chat_role_chunk_first(server: SimHandle, http: httpx.Client) -> None:
    status, data = stream(http, f"{server.url}/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 12,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    })
    assert status == 200
    first = data[0]
    assert first["object"] == "chat.completion.chunk" and first["id"].startswith("chatcmpl-")
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in d["choices"][0]["delta"] for d in data[1:-2])
    assert data[-2]["choices"] == [] and data[-2]["usage"]["completion_tokens"] == 12
    assert data[-3]["choices"][0]["finish_reason"] == "length"


def test_non_streaming_completion_and_chat(server: SimHandle, http: httpx.Client) -> None:
    body = http.post(f"{server.url}/v1/completions", json={"prompt": "a b c", "max_tokens": 9,
                                                            "ignore_eos": True}).json()
    assert body["object"] == "text_completion" and body["usage"]["completion_tokens"] == 9
    assert body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["text"]
    chat = http.post(f"{server.url}/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4, "ignore_eos": True}).json()
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 4


def test_allowed_token_ids_forcing_eos_stops(server: SimHandle, http: httpx.Client) -> None:
    body = http.post(f"{server.url}/v1/completions", json={
        "prompt": "terminator probe", "max_tokens": 8, "allowed_token_ids": [1], "priority": 10}).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 1


def test_min_tokens_blocks_eos(server: SimHandle, http: httpx.Client) -> None:
    body = http.post(f"{server.url}/v1/completions", json={
        "prompt": "p", "max_tokens": 8, "min_tokens": 3, "allowed_token_ids": [1, 7]}).json()
    assert body["usage"]["completion_tokens"] >= 4 or body["choices"][0]["finish_reason"] == "length"


def test_logit_bias_rejected_400_when_not_streaming(server: SimHandle, http: httpx.Client) -> None:
    response = http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 4,
                                                                "logit_bias": {"1": 100}})
    assert response.status_code == 400
    assert response.json() == {"error": {
        "message": "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding.",
        "type": "BadRequestError", "param": None, "code": 400}}


def test_logit_bias_streaming_is_error_frame_in_200(server: SimHandle, http: httpx.Client) -> None:
    status, data = stream(http, f"{server.url}/v1/completions", {
        "prompt": "p", "max_tokens": 4, "logit_bias": {"1": 100}, "stream": True})
    assert status == 200
    assert data[0]["error"]["code"] == 400 and "logit_bias" in data[0]["error"]["message"]
    assert data[1:] == ["[DONE]"]


def test_min_p_rejected_under_spec_decode(server: SimHandle, http: httpx.Client) -> None:
    response = http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 4, "min_p": 0.1})
    assert response.status_code == 400 and response.json()["error"]["type"] == "BadRequestError"


def test_logit_bias_accepted_without_spec_decode(http: httpx.Client) -> None:
    import runner.sim as sim

    from .conftest import fast_config

    with sim.start(fast_config(production_arm="off")) as off:
        response = http.post(f"{off.url}/v1/completions", json={"prompt": "p", "max_tokens": 4,
                                                                 "logit_bias": {"1": 1}})
        assert response.status_code == 200


def test_out_of_vocab_allowed_token_ids_400(server: SimHandle, http: httpx.Client) -> None:
    response = http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 4,
                                                                "allowed_token_ids": [99999999]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "allowed_token_ids"


def test_stream_options_without_stream_400(server: SimHandle, http: httpx.Client) -> None:
    response = http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 4,
                                                                "stream_options": {"include_usage": True}})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Stream options can only be defined when `stream=True`."


def test_unknown_model_404_and_bad_json_400(server: SimHandle, http: httpx.Client) -> None:
    response = http.post(f"{server.url}/v1/completions", json={"model": "nope", "prompt": "p"})
    assert response.status_code == 404 and response.json()["error"]["type"] == "NotFoundError"
    bad = http.post(f"{server.url}/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "error" in bad.json()


def test_context_length_refused(server: SimHandle, http: httpx.Client) -> None:
    response = http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 10_000_000})
    assert response.status_code == 400 and "maximum context length" in response.json()["error"]["message"]


def test_same_seed_same_output_different_seed_differs(server: SimHandle, http: httpx.Client) -> None:
    def run(seed: int) -> tuple[list[int], str]:
        _, data = stream(http, f"{server.url}/v1/completions", {
            "prompt": "same prompt", "max_tokens": 60, "ignore_eos": True, "seed": seed, "stream": True,
            "return_token_ids": True})
        chunks = [d for d in data if d != "[DONE]"]
        return [len(c["choices"][0]["token_ids"]) for c in chunks], "".join(c["choices"][0]["text"] for c in chunks)

    assert run(7) == run(7)
    assert run(7) != run(8)
