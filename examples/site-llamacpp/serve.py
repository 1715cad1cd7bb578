"""Run llama-cpp-python's OpenAI-compatible server with llama-server's /metrics and /health.

    python serve.py --model MODEL.gguf --port 8090 [any llama_cpp.server option ...]

``llama_cpp.server`` (the PyPI package llama-cpp-python) serves ``/v1/completions`` and
``/v1/chat/completions`` but exports no ``/metrics`` and no ``/health``. This wrapper
starts the very same server and counts, inside the process, what the native llama.cpp
server (``llama-server --metrics``) exports under the same names, so tally's
``llamacpp`` counter source reads either the same way:

    llamacpp:prompt_tokens_total            prompt tokens evaluated (prefill)
    llamacpp:prompt_seconds_total           seconds spent evaluating them
    llamacpp:tokens_predicted_total         tokens generated
    llamacpp:tokens_predicted_seconds_total seconds spent in generation steps
    llamacpp:n_decode_total                 llama_decode calls (batches evaluated)
    llamacpp:spec_decode_num_drafts_total   draft proposals (prompt-lookup decoding)
    llamacpp:spec_decode_num_draft_tokens_total    tokens proposed
    llamacpp:spec_decode_num_accepted_tokens_total proposed tokens the target accepted
    llamacpp:requests_processing            requests in flight (gauge)
    llamacpp:requests_deferred              requests waiting for the model (gauge)
    llamacpp:kv_cache_usage_ratio           filled share of the context (gauge)

It also honours ``ignore_eos``, which llama_cpp.server silently drops: a request asking
for it gets the end-of-generation token biased away (``logit_bias`` -100), which is what
llama-server does for ``ignore_eos``.

Counting happens in ``Llama.generate`` (every token it yields), ``Llama.eval`` (every
batch, timed; the first eval of a request is its prompt) and the prompt-lookup draft
model (every proposal). A generation step evaluates the sampled token plus the drafts;
the drafts the target then reproduces are accepted, so each step emits 1 + accepted
tokens, as in llama.cpp. This is an example site's server, not part of tally.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

COUNTERS = ("prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total",
            "tokens_predicted_seconds_total", "n_decode_total", "spec_decode_num_drafts_total",
            "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total")


class Meter:
    """The process's counters and gauges (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, float] = dict.fromkeys(COUNTERS, 0.0)
        self.in_flight = 0
        self.kv_ratio = 0.0

    def add(self, **amounts: float) -> None:
        with self.lock:
            for name, amount in amounts.items():
                self.values[name] += amount

    def exposition(self, speculative: bool) -> str:
        with self.lock:
            values = dict(self.values)
            processing = min(self.in_flight, 1)
            deferred = max(self.in_flight - 1, 0)
            kv = self.kv_ratio
        lines = []
        for name in COUNTERS:
            if name.startswith("spec_decode") and not speculative:
                continue  # a server without speculative decoding exports no spec series
            lines += [f"# TYPE llamacpp:{name} counter", f"llamacpp:{name} {_number(values[name])}"]
        for name, value in (("requests_processing", processing), ("requests_deferred", deferred),
                            ("kv_cache_usage_ratio", kv)):
            lines += [f"# TYPE llamacpp:{name} gauge", f"llamacpp:{name} {_number(value)}"]
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


METER = Meter()


def instrument() -> None:
    """Count what llama-server counts, by wrapping Llama.generate, Llama.eval and the draft model."""
    from llama_cpp import llama, llama_speculative

    original_generate = llama.Llama.generate
    original_eval = llama.Llama.eval
    original_draft = llama_speculative.LlamaPromptLookupDecoding.__call__

    def generate(self: Any, tokens: Any, *args: Any, **kwargs: Any) -> Iterator[int]:
        # The server runs one generation at a time per model (behind its lock), but a streamed
        # one is advanced from pool threads: its state lives on the model, not in a thread.
        state = {"prompt": True, "yielded_since_eval": 0, "drafted": 0}
        self._meter_state = state
        try:
            for token in original_generate(self, tokens, *args, **kwargs):
                METER.add(tokens_predicted_total=1)
                state["yielded_since_eval"] += 1
                with METER.lock:
                    METER.kv_ratio = self.n_tokens / max(self.n_ctx(), 1)
                yield token
        finally:
            _settle(state)
            self._meter_state = None

    def evaluate(self: Any, tokens: Any) -> None:
        state = getattr(self, "_meter_state", None)
        batches = max(1, -(-len(tokens) // max(self.n_batch, 1)))
        started = time.perf_counter()
        original_eval(self, tokens)
        seconds = time.perf_counter() - started
        if state is None or state["prompt"]:
            METER.add(prompt_tokens_total=len(tokens), prompt_seconds_total=seconds, n_decode_total=batches)
            if state is not None:
                state["prompt"] = False
            return
        _settle(state)
        state["drafted"] = max(len(tokens) - 1, 0)  # the sampled token, then the drafts it verifies
        METER.add(tokens_predicted_seconds_total=seconds, n_decode_total=batches)

    def draft(self: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        proposed = original_draft(self, input_ids, *args, **kwargs)
        if len(proposed):
            METER.add(spec_decode_num_drafts_total=1, spec_decode_num_draft_tokens_total=len(proposed))
        return proposed

    llama.Llama.generate = generate  # type: ignore[method-assign]
    llama.Llama.eval = evaluate  # type: ignore[method-assign]
    llama_speculative.LlamaPromptLookupDecoding.__call__ = draft  # type: ignore[method-assign]


def _settle(state: dict[str, Any]) -> None:
    """Credit the last verification step: of the drafts it evaluated, those reproduced were accepted."""
    if state["drafted"]:
        accepted = min(max(state["yielded_since_eval"] - 1, 0), state["drafted"])
        METER.add(spec_decode_num_accepted_tokens_total=accepted)
        state["drafted"] = 0
    state["yielded_since_eval"] = 0


class IgnoreEos:
    """ASGI middleware: ``"ignore_eos": true`` in a completion request becomes a -100 bias on EOS."""

    def __init__(self, app: Any, eos_ids: list[int]) -> None:
        self.app = app
        self.eos_ids = eos_ids

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or not str(scope.get("path", "")).startswith(
                "/v1/"):
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("ignore_eos") is True:
            bias = data.get("logit_bias") if isinstance(data.get("logit_bias"), dict) else {}
            data["logit_bias"] = {**bias, **{str(t): -100 for t in self.eos_ids}}
            body = json.dumps(data).encode()
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.app({**scope, "headers": headers}, replay, send)


def main() -> None:
    import argparse

    import uvicorn
    from llama_cpp.server.__main__ import (  # the server's own option parsing
        ModelSettings,
        ServerSettings,
        Settings,
        add_args_from_model,
        create_app,
        parse_model_from_args,
    )

    parser = argparse.ArgumentParser(description="llama_cpp.server with llama-server's /metrics and /health")
    add_args_from_model(parser, Settings)
    args = parser.parse_args()
    server = parse_model_from_args(ServerSettings, args)
    model = parse_model_from_args(ModelSettings, args)
    instrument()
    app = create_app(server_settings=server, model_settings=[model])
    speculative = model.draft_model is not None

    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse

    @app.middleware("http")
    async def in_flight(request: Request, call_next: Any) -> Any:
        counted = request.url.path.startswith("/v1/") and request.method == "POST"
        if counted:
            with METER.lock:
                METER.in_flight += 1
        try:
            return await call_next(request)
        finally:
            if counted:
                with METER.lock:
                    METER.in_flight -= 1

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(METER.exposition(speculative), media_type="text/plain; version=0.0.4")

    @app.get("/health", include_in_schema=False)
    def health() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    from llama_cpp import Llama

    probe = Llama(model_path=model.model, vocab_only=True, verbose=False)
    eos_ids = sorted({int(probe.token_eos()), *_chat_eos(probe)})
    print(f"serve.py: pid {os.getpid()} on {server.host}:{server.port}, speculative {speculative}, "
          f"EOS ids {eos_ids}", file=sys.stderr, flush=True)
    uvicorn.run(IgnoreEos(app, eos_ids), host=server.host, port=server.port, log_level="warning")


def _chat_eos(model: Any) -> list[int]:
    """The chat template's end-of-turn token (``<|im_end|>`` and the like), when it is one token."""
    ids = []
    for text in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
        tokens = model.tokenize(text.encode(), add_bos=False, special=True)
        if len(tokens) == 1:
            ids.append(int(tokens[0]))
    return ids


if __name__ == "__main__":
    main()
