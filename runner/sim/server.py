"""The simulator's HTTP server: vLLM's OpenAI-compatible API, ``/metrics`` and ``/_sim`` control.

A stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with chunked transfer encoding and
``TCP_NODELAY``: one thread per connection, each stream sleeping to absolute planned
send times (so lateness never accumulates). A stream that woke late catches up at twice
its pace, never in a burst: each chunk is written at least half its step after the one
before (:data:`CATCH_UP`), so a late thread never writes several steps at once, which a
client would read as one socket read, intervals of exactly 0. Every chunk is one engine step
(``1 + accepted`` tokens); counters move before the chunk that reports them is
written, so a scrape made after a client saw ``[DONE]`` includes the whole request.

Routes::

    GET  /health  /v1/models  /version  /metrics
    POST /v1/completions  /v1/chat/completions
    GET  /_sim/state  /_sim/faults  /_sim/config  /_sim/truth?after=N&request_id=ID
    POST /_sim/faults  (DELETE /_sim/faults)  /_sim/<action>  (actions: runner.sim.host.ACTIONS)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .config import SimConfig
from .exposition import CONTENT_TYPE
from .faults import FaultState
from .host import EngineSession, Host, HostActionError, wall_time
from .llamacpp_metrics import CONTENT_TYPE as LLAMACPP_CONTENT_TYPE
from .model import Generation, Step, token_text
from .openai import (
    FINGERPRINT,
    NULL_TOP,
    ApiError,
    ApiRequest,
    chat_chunk,
    chat_delta,
    completion_chunk,
    engine_check,
    error_body,
    full_usage,
    invalid,
    parse_request,
    usage_chunk,
    usage_of,
)
from .semantics import completion_logprobs, cut_at_stop, schema_text
from .truth import RequestTruth, TruthLog

__all__ = ["SimServer"]

_SLICE_S = 0.05  # longest single sleep, so stops and stopped engines are noticed
CATCH_UP = 0.5   # a late stream's chunks come at least this part of their step after the one before


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class SimServer(ThreadingHTTPServer):
    """One simulated vLLM host on one port."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], config: SimConfig) -> None:
        self.config = config
        self.faults = FaultState(config.faults)
        self.truth = TruthLog()
        self.host = Host(config, self.faults, self.truth)
        self.stopping = threading.Event()
        self.hung_until = 0.0  # a hang_after_cancel fault: requests wait until then
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)
        self.host.serving_url = f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (reset, closed mid-reply) is no error of the server's: nothing is printed.
        Anything else is, as socketserver prints it."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._connections_lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def close_connections(self) -> None:
        """Cut every open connection (idle keep-alive ones and streams in progress)."""
        with self._connections_lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def sleep_until(self, when: float, engine: EngineSession | None = None) -> bool:
        """Sleep to ``perf_counter() == when``; ``False`` if the server or the engine stopped.

        Plain ``time.sleep`` (clock_nanosleep: the tightest wake-up Python offers), in
        slices of at most 50 ms so that a stop is noticed; one wake-up per chunk.
        """
        while True:
            if self.stopping.is_set() or (engine is not None and engine.stopped):
                return False
            left = when - time.perf_counter()
            if left <= 0:
                return True
            time.sleep(min(left, _SLICE_S))


class _Aborted(Exception):
    """The client went away, or the engine/server stopped under the stream."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: SimServer

    # ------------------------------------------------------------------ plumbing

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, _dumps(value))

    def _read_body(self) -> bytes:
        length = self.headers.get("content-length")
        if length is None:
            return b""
        return self.rfile.read(int(length))

    def _read_json(self) -> Any:
        raw = self._read_body()
        if not raw:
            return {}
        return json.loads(raw)

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        handler: Callable[[dict[str, list[str]]], None] | None = None
        if method == "GET":
            handler = {
                "/health": self._health, "/v1/models": self._models, "/version": self._version,
                "/metrics": self._metrics, "/_sim/state": self._state, "/_sim/faults": self._faults_get,
                "/_sim/truth": self._truth, "/_sim/config": self._config,
                **({"/server_info": self._server_info} if self.server.config.dev_mode else {}),
            }.get(path)
        elif method == "POST":
            if path == "/v1/completions":
                handler = lambda _q: self._generate("completion")  # noqa: E731
            elif path == "/v1/chat/completions":
                handler = lambda _q: self._generate("chat")  # noqa: E731
            elif path == "/_sim/faults":
                handler = self._faults_post
            elif path.startswith("/_sim/"):
                action = path[len("/_sim/"):]
                handler = lambda _q: self._action(action)  # noqa: E731
        elif method == "DELETE" and path == "/_sim/faults":
            handler = self._faults_delete
        if handler is None:
            self._read_body()
            if path.startswith("/_sim/"):
                self._json(404, error_body(f"{method} {path} not found", "NotFoundError", None, 404))
            else:   # FastAPI's answer for a route vLLM does not have
                self._json(404, {"detail": "Not Found"})
            return
        try:
            handler(parse_qs(url.query))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    # ------------------------------------------------------------------ plain endpoints

    def _health(self, _query: dict[str, list[str]]) -> None:
        self._send(200 if self.server.host.health() else 503, b"", "application/json")

    def _models(self, _query: dict[str, list[str]]) -> None:
        config = self.server.config
        if self.server.host.engine is None:
            self._json(503, error_body("no engine is running on this host", "ServiceUnavailableError", None, 503))
            return
        if config.metrics_format == "none":   # llama-cpp-python's listing: no root, no context length
            self._json(200, {"object": "list", "data": [{"id": config.model, "object": "model",
                                                         "owned_by": "me", "permissions": []}]})
            return
        self._json(200, {"object": "list", "data": [{
            "id": config.model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
            "root": config.model, "parent": None, "max_model_len": config.max_model_len, "permission": [],
        }]})

    def _server_info(self, query: dict[str, list[str]]) -> None:
        """vLLM's development-mode ``/server_info`` (``VLLM_SERVER_DEV_MODE=1``): the parts of its config
        the simulator has (``?config_format=json``: a JSON object; else vLLM's text form)."""
        config = self.server.config
        engine = self.server.host.engine
        spec = engine.arm.speculative_config() if engine is not None else None
        vllm_config = {"model_config": {"model": config.model, "max_model_len": config.max_model_len},
                       "cache_config": {"block_size": 16, "enable_prefix_caching": config.enable_prefix_caching},
                       "scheduler_config": {"policy": config.scheduling_policy,
                                            "max_num_batched_tokens": config.max_num_batched_tokens},
                       "speculative_config": spec or None}
        text = query.get("config_format", ["text"])[-1] != "json"
        self._json(200, {"vllm_config": json.dumps(vllm_config) if text else vllm_config,
                         "vllm_env": {"VLLM_SERVER_DEV_MODE": True}, "system_env": {}})

    def _version(self, _query: dict[str, list[str]]) -> None:
        self._json(200, {"version": "0.32.0+tally.sim"})   # the vLLM it is held to (docs/sim.md)

    def _metrics(self, _query: dict[str, list[str]]) -> None:
        fmt = self.server.config.metrics_format
        if fmt == "none":   # a server without /metrics (llama-cpp-python's llama_cpp.server)
            self._json(404, {"detail": "Not Found"})
            return
        if self.server.faults.metrics_down:
            self._send(503, b"metrics unavailable (simulated fault)\n", "text/plain; charset=utf-8")
            return
        engine = self.server.host.engine
        if engine is None:
            self._send(503, b"no engine is running on this host\n", "text/plain; charset=utf-8")
            return
        backlog = self.server.faults.take("backlog")   # another tenant's load in this scrape
        content_type = LLAMACPP_CONTENT_TYPE if fmt == "llamacpp" else CONTENT_TYPE
        self._send(200, engine.metrics.exposition(backlog), content_type)

    # ------------------------------------------------------------------ control

    def _state(self, _query: dict[str, list[str]]) -> None:
        self._json(200, self.server.host.state())

    def _config(self, _query: dict[str, list[str]]) -> None:
        """The config, and (``reported``) what a start of each arm reports: its config digest and
        speculative config, read by a site before the drain (``served_arms``)."""
        config = self.server.config
        reported = {arm.name: {"config_digest": arm.reported_config_digest(),
                               "speculative_config": arm.speculative_config()} for arm in config.arms}
        self._json(200, {**config.to_dict(), "reported": reported})

    def _faults_get(self, _query: dict[str, list[str]]) -> None:
        self._json(200, {"faults": self.server.faults.snapshot()})

    def _faults_delete(self, _query: dict[str, list[str]]) -> None:
        self.server.faults.clear()
        self._json(200, {"ok": True, "faults": {}})

    def _faults_post(self, _query: dict[str, list[str]]) -> None:
        from ledger.errors import FormatError

        try:
            body = self._read_json()
        except ValueError as exc:
            self._json(400, {"ok": False, "error": f"body is not JSON: {exc}"})
            return
        if not isinstance(body, dict):
            self._json(400, {"ok": False, "error": "body must be a JSON object"})
            return
        if body.pop("clear", False):
            self.server.faults.clear()
        try:
            self.server.faults.set(body)
        except FormatError as exc:
            self._json(400, {"ok": False, "error": str(exc)})
            return
        self._json(200, {"ok": True, "faults": self.server.faults.snapshot()})

    def _truth(self, query: dict[str, list[str]]) -> None:
        try:
            after = int(query.get("after", ["0"])[0])
        except ValueError:
            self._json(400, {"ok": False, "error": "after must be an integer"})
            return
        records = self.server.truth.since(after)
        wanted = query.get("request_id")
        if wanted:
            records = [r for r in records if r.request_id in wanted]
        self._json(200, {"requests": [r.to_json() for r in records], "next": len(self.server.truth),
                         "totals": self.server.truth.totals(after)})

    def _action(self, action: str) -> None:
        try:
            args = self._read_json()
        except ValueError as exc:
            self._json(400, {"ok": False, "action": action, "error": f"body is not JSON: {exc}"})
            return
        if not isinstance(args, dict):
            self._json(400, {"ok": False, "action": action, "error": "body must be a JSON object"})
            return
        try:
            result = self.server.host.act(action, args)
        except HostActionError as exc:
            self._json(exc.status, exc.body())
            return
        self._json(200, result)

    # ------------------------------------------------------------------ generation

    def _generate(self, kind: str) -> None:
        server = self.server
        config = server.config
        arrival = time.perf_counter()
        raw = self._read_body()
        truth = server.truth.new(request_id="", kind=kind, stream=False, arrival=arrival, arrival_wall=wall_time())
        try:
            body = json.loads(raw) if raw else None
        except ValueError as exc:
            self._refuse(truth, invalid(f"body.{getattr(exc, 'pos', 0)}", "json_invalid", "JSON decode error"))
            return
        try:
            request = parse_request("completion" if kind == "completion" else "chat", body, config)
        except ApiError as exc:
            self._refuse(truth, exc)
            return
        truth.stream = request.stream
        truth.max_tokens = request.params.max_tokens
        truth.prompt_tokens = len(request.prompt_ids)
        truth.seed, truth.priority, truth.cache_salt = request.seed, request.priority, request.cache_salt
        truth.engine_fields = dict(request.engine_fields) if request.engine_fields else None
        prefix = "cmpl-" if kind == "completion" else "chatcmpl-"
        header_id = self.headers.get("x-request-id")
        truth.request_id = prefix + (request.request_id or header_id or uuid.uuid4().hex)
        failure = server.faults.take("http_5xx")
        if failure is not None:
            truth.fault = "http_5xx"
            self._refuse(truth, ApiError(failure["status"], "Simulated internal server error.",
                                         "InternalServerError", None), status="failed")
            return
        admitted = server.host.admit()
        if isinstance(admitted, str):
            self._refuse(truth, ApiError(503, admitted, "ServiceUnavailableError", None), status="failed")
            return
        engine, engine_index = admitted
        if server.hung_until > time.perf_counter():  # the engine hangs after a cancel (a fault)
            server.sleep_until(server.hung_until, engine)
        try:
            truth.start, truth.arm, truth.engine = engine.number, engine.arm.name, engine_index
            problem = engine_check(request, engine.arm, config.vocab_size)
            if problem is not None:
                truth.status, truth.http_status, truth.error = "rejected", problem.status, problem.body()
                if request.stream:
                    self._stream_error_only(truth.request_id, problem)
                else:
                    self._json(problem.status, problem.body())
                return
            self._run(request, truth, engine, engine_index)
        finally:
            server.host.release(engine)

    def _refuse(self, truth: RequestTruth, error: ApiError, status: str = "rejected") -> None:
        truth.status, truth.http_status, truth.error = status, error.status, error.body()
        self._json(error.status, error.body())

    def _stream_headers(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _write_frames(self, *frames: bytes) -> None:
        data = b"".join(b"data: " + frame + b"\n\n" for frame in frames)
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _stream_error_only(self, rid: str, error: ApiError) -> None:
        """vLLM's streaming refusal: HTTP 200, one error frame, then ``[DONE]``."""
        self._stream_headers()
        self._write_frames(_dumps(error.body()), b"[DONE]")
        self._end_stream()

    def _generation(self, request: ApiRequest, engine: EngineSession) -> tuple[Generation, float]:
        config = self.server.config
        fingerprint = hashlib.sha256(repr(request.prompt_ids).encode()).hexdigest()[:16]
        diverge: tuple[int, bool] | None = None
        if request.params.greedy:
            fault = self.server.faults.take_for("greedy_diverge", engine.arm.name)
            if fault is None:  # a lossy arm: a request the near tie (if any) spared diverges for real
                lossy = self.server.faults.take_for("greedy_lossy", engine.arm.name)
                fault = None if lossy is None else {**lossy, "near_tie": False}
            diverge = None if fault is None else (fault["position"], fault["near_tie"])
        if request.seed is not None:
            # Common random numbers: the same request draws the same uniforms on every arm, so
            # arms differ only by what they do with them (an identical arm gives identical steps).
            key = f"{config.seed}|seed={request.seed}|{fingerprint}|{request.params.max_tokens}"
        else:
            with engine._lock:
                engine.unseeded += 1
                key = f"{config.seed}|{engine.arm.name}|start={engine.number}|n={engine.unseeded}"
        with engine._lock:
            cold = 0.0 if engine.warmed else config.cold_ttft_extra_ms
            engine.warmed = True
        cached = engine.prefix.admit(request.cache_salt, request.prompt_ids) if config.enable_prefix_caching else 0
        generation = Generation(
            arm=engine.arm, params=request.params, prompt_tokens=len(request.prompt_ids), seed_key=key,
            eos_token_id=config.eos_token_id, vocab_size=config.vocab_size, eos_probability=config.eos_probability,
            start_factor=engine.start_factor, step_jitter=config.step_jitter, ttft_extra_ms=cold,
            cached_tokens=cached,
            greedy_key=f"{config.seed}|greedy{request.params.penalized}", context=request.prompt_ids,
            diverge=diverge, draft_past_end=config.metrics_format != "llamacpp",
        )
        return generation, cold

    def _run(self, request: ApiRequest, truth: RequestTruth, engine: EngineSession, engine_index: int) -> None:
        server = self.server
        config = server.config
        scale = config.time_scale / 1000.0
        faults = server.faults
        slow = faults.take("slow_ttft")
        stall = faults.take("stall")
        drop = faults.take("drop")
        error_frame = faults.take("error_frame") if request.stream else None
        arm = engine.arm.name
        stops = request.stop if request.stop and not faults.take_for("ignore_stop", arm) else ()
        schema = request.schema if request.schema is not None and not faults.take_for("ignore_schema", arm) else None
        if request.params.min_tokens and faults.take_for("ignore_min_tokens", arm):
            request = replace(request, params=replace(request.params, min_tokens=0))
        blip = faults.take("thermal_blip")
        if blip is not None:
            server.host.blip(blip["cap_mhz"])
        truth.fault = ",".join(name for name, spec in (("slow_ttft", slow), ("stall", stall), ("drop", drop),
                                                        ("error_frame", error_frame)) if spec) or None
        generation, cold = self._generation(request, engine)
        truth.cached_tokens = generation.cached_tokens
        load = engine.load
        seated = False
        if load is not None:   # step_model "batch": a seat among max_num_seqs first (the wait is queueing)
            while not (seated := load.seats.acquire(timeout=_SLICE_S)):
                if server.stopping.is_set() or engine.stopped:
                    break
        metrics = engine.metrics
        metrics.request_started(engine_index, len(request.prompt_ids), request.params.max_tokens,
                                cached_tokens=generation.cached_tokens)
        created = int(time.time())
        planned = truth.arrival if load is None else max(truth.arrival, time.perf_counter())
        last_sent: float | None = None   # a late stream's chunks may go later than planned, never in a burst
        completion_tokens = 0
        text_parts: list[str] = []   # the full text, for a reply that is not streamed
        reasoning_parts: list[str] = []   # its reasoning text (a reasoning arm, chat only)
        reasoning_budget = engine.arm.reasoning_tokens if request.kind == "chat" else 0
        stop_tail = ""               # the emitted text's last characters: all a stop string can still span
        longest_stop = max((len(stop) for stop in stops), default=0)
        token_ids: list[int] = []
        finish_reason: str | None = None
        stop_reason: int | str | None = None
        outcome = "finished"
        key = id(truth)
        # the waiting queue (docs/sim.md): its place taken before the reply begins (a client that saw the
        # headers knows the request is in), the prefill started when the policy and the budget let it
        queued = engine.queue.enqueue(generation.prompt_tokens - generation.cached_tokens, request.priority)
        ticket = None
        try:
            if request.stream:
                self._stream_headers()
            if load is not None and not seated:
                raise _Aborted
            ticket = engine.queue.wait(queued, lambda: server.stopping.is_set() or engine.stopped)
            if ticket is None:
                raise _Aborted
            if ticket.waited:   # its prefill starts now, not on arrival
                planned = max(planned, time.perf_counter())
            while True:
                context = len(request.prompt_ids) + generation.generated
                step = generation.next_step(server.host.clock_factor())
                if step is None:
                    break
                batch: tuple[int, float] | None = None
                if load is not None:
                    if step.index == 0:
                        load.set(key, 0, len(request.prompt_ids) - generation.cached_tokens, generation.cached_tokens)
                    else:
                        load.set(key, 1 + step.drafts, 0, context)
                    batch_ms, batched = load.step()
                    factor = server.host.clock_factor() * generation.start_factor
                    step = replace(step, duration_ms=batch_ms * factor + (cold if step.index == 0 else 0.0))
                    left = request.params.max_tokens - generation.generated
                    # the next step's tokens, its drafts expected at the arm's draft_rate
                    load.set(key, 1 + (round(min(engine.arm.k, left - 1) * engine.arm.draft_rate)
                                       if engine.arm.k else 0), 0, context + len(step.tokens))
                    batch = (batched, load.kv_usage())
                text = "".join(token_text(t, config.eos_token_id) for t in step.tokens)
                if stops:
                    step, text, stopped, overhang = cut_at_stop(step, stops, stop_tail, config.eos_token_id)
                    if stopped:
                        generation.finish_reason = "stop"
                    if overhang and not request.stream:  # the stop string began in an earlier step's text
                        _drop_tail(text_parts, overhang)
                chunk_index = len(truth.planned)
                delay = step.duration_ms * scale
                if step.index == 0 and slow:
                    delay += slow["seconds"]
                if stall and chunk_index == stall["after_chunks"]:
                    delay += stall["seconds"]
                previous = planned
                planned += delay
                if step.index == 0 and ticket is not None:   # one step's outputs come together
                    planned = engine.queue.prefill_end(ticket, planned,
                                                      lambda: server.stopping.is_set() or engine.stopped)
                due = planned if last_sent is None or not request.stream else max(planned, last_sent + delay * CATCH_UP)
                if not server.sleep_until(due, engine):
                    raise _Aborted
                if step.index == 0:   # the prefill is done: its tokens return to the budget
                    engine.queue.release(ticket)
                if drop and chunk_index == drop["after_chunks"]:
                    outcome = "dropped"
                    break
                if error_frame and chunk_index == error_frame["after_chunks"]:
                    outcome = "error_frame"
                    break
                metrics.step(engine_index, len(step.tokens), step.drafts, step.accepted, planned - previous,
                             first=step.index == 0, batch=batch)
                # the step's counts first: a request's last step is in what its finish reports
                truth.tokens.append(len(step.tokens))
                truth.drafts.append(step.drafts)
                truth.accepted.append(step.accepted)
                completion_tokens += len(step.tokens)
                if step.finish_reason is not None:
                    finish_reason, stop_reason = step.finish_reason, step.stop_reason
                    self._observe_finish(truth, metrics, engine_index, finish_reason, planned, completion_tokens)
                before = completion_tokens - len(step.tokens)
                thinking = min(max(reasoning_budget - before, 0), len(step.tokens))   # this step's reasoning tokens
                reasoning, visible = _split_reasoning(step, text, thinking, config.eos_token_id)
                truth.reasoning_tokens += thinking
                if request.stream and config.stream_mode == "token":
                    sent = self._stream_tokens(request, truth.request_id, created, step, engine, planned, before,
                                               reasoning_budget)
                elif request.stream:
                    frames = self._step_frames(request, truth.request_id, created, step, visible, completion_tokens,
                                               reasoning=reasoning, reasoning_tokens=truth.reasoning_tokens)
                    sent = time.perf_counter()
                    self._write_frames(*frames)
                else:
                    sent = time.perf_counter()
                    token_ids.extend(step.tokens)
                if not request.stream:
                    text_parts.append(visible)
                    reasoning_parts.append(reasoning)
                if stops:
                    stop_tail = (stop_tail + text)[-longest_stop:]
                truth.planned.append(planned)
                truth.sent.append(sent)
                last_sent = time.perf_counter()
                truth.completion_tokens = completion_tokens
        except (_Aborted, OSError):
            outcome = "aborted"
            hang = faults.take("hang_after_cancel")
            if hang is not None:
                server.hung_until = time.perf_counter() + hang["seconds"]
        finally:
            engine.queue.leave(queued)   # its tokens back to the budget, or out of the queue
            if load is not None:
                load.leave(key)
                if seated:
                    load.seats.release()
        truth.finish_reason = finish_reason
        if outcome != "finished":
            truth.status = "failed" if outcome == "error_frame" else "aborted"
            reason = "error" if outcome == "error_frame" else "abort"
            last = truth.planned[-1] if truth.planned else truth.arrival
            self._observe_finish(truth, metrics, engine_index, reason, last, completion_tokens)
            if outcome == "error_frame" and error_frame is not None:
                body = error_body(error_frame["message"], "InternalServerError", None, 500)
                truth.error = body
                self._safe(self._write_frames, _dumps(body), b"[DONE]", end=True)
                return
            self.close_connection = True
            self._safe(self.connection.shutdown, socket.SHUT_RDWR)
            return
        truth.status = "finished"
        usage = usage_of(len(request.prompt_ids), completion_tokens, truth.reasoning_tokens)
        if request.stream:
            tail: list[bytes] = []
            if request.include_usage:
                tail.append(_dumps(usage_chunk(truth.request_id, created, request.model, request.kind, usage)))
            tail.append(b"[DONE]")
            self._safe(self._write_frames, *tail, end=True)
            return
        text = "".join(text_parts)
        if schema is not None:  # structured output: an instance of the schema
            text, finish_reason = schema_text(schema, len(request.prompt_ids)), "stop"
        answer = self._full_response(request, truth.request_id, created, text, finish_reason, stop_reason,
                                     full_usage(len(request.prompt_ids), completion_tokens, truth.reasoning_tokens),
                                     token_ids, "".join(reasoning_parts) or None)
        if request.logprobs and request.kind == "completion" and generation.params.greedy:
            answer["choices"][0]["logprobs"] = completion_logprobs(generation, token_ids, config.eos_token_id,
                                                                   request.logprobs)
        self._json(200, answer)

    def _safe(self, action: Callable[..., object], *args: Any, end: bool = False) -> None:
        """Write (or shut down) and tolerate a client that already left."""
        try:
            action(*args)
            if end:
                self._end_stream()
        except OSError:
            self.close_connection = True

    def _observe_finish(self, truth: RequestTruth, metrics: Any, engine_index: int, reason: str, last: float,
                        completion_tokens: int) -> None:
        """The request-level histograms, once per request (finish, abort or error)."""
        if truth.observed:
            return
        first = truth.planned[0] if truth.planned else last
        truth.decode_s = last - first
        truth.observed = True
        metrics.request_finished(engine_index, reason, prefill_s=first - truth.arrival, decode_s=truth.decode_s,
                                 e2e_s=last - truth.arrival, generation_tokens=completion_tokens,
                                 prompt_tokens=truth.prompt_tokens or 0, counts=truth.counters())

    def _stream_tokens(self, request: ApiRequest, rid: str, created: int, step: Step, engine: EngineSession,
                       planned: float, before: int, reasoning_budget: int = 0) -> float:
        """One chunk per token, as llama.cpp streams: the step's tokens ``token_burst_ms`` apart (the first
        ``reasoning_budget`` tokens of the completion as reasoning).

        Returns when the first chunk was written (the step's send time)."""
        config = self.server.config
        gap = config.token_burst_ms * config.time_scale / 1000.0
        first_sent = 0.0
        last = len(step.tokens) - 1
        for j, token in enumerate(step.tokens):
            if j and not self.server.sleep_until(planned + j * gap, engine):
                raise _Aborted
            single = replace(step, tokens=(token,), finish_reason=step.finish_reason if j == last else None,
                             stop_reason=step.stop_reason if j == last else None)
            word = token_text(token, config.eos_token_id)
            thinking = before + j < reasoning_budget
            frames = self._step_frames(request, rid, created, single, "" if thinking else word, before + j + 1,
                                       first=step.index == 0 and j == 0, reasoning=word if thinking else "",
                                       reasoning_tokens=min(before + j + 1, reasoning_budget))
            sent = time.perf_counter()
            self._write_frames(*frames)
            if j == 0:
                first_sent = sent
        return first_sent

    def _step_frames(self, request: ApiRequest, rid: str, created: int, step: Step, text: str,
                     completion_tokens: int, first: bool | None = None, reasoning: str = "",
                     reasoning_tokens: int = 0) -> list[bytes]:
        """A step's frames; ``reasoning`` (chat): its reasoning text, ``reasoning_tokens`` the request's so far."""
        first = step.index == 0 if first is None else first
        model = request.model
        usage = usage_of(len(request.prompt_ids), completion_tokens, reasoning_tokens) \
            if request.continuous_usage else None
        ids = step.tokens if request.return_token_ids else None
        if request.kind == "completion":
            prompt_ids = request.prompt_ids if (request.return_token_ids and first) else None
            return [_dumps(completion_chunk(rid, created, model, text, finish_reason=step.finish_reason,
                                            stop_reason=step.stop_reason, token_ids=ids,
                                            prompt_token_ids=prompt_ids, usage=usage))]
        frames = []
        if first:
            role_usage = usage_of(len(request.prompt_ids), 0) if request.continuous_usage else None
            frames.append(_dumps(chat_chunk(rid, created, model, {"role": "assistant", "content": ""},
                                            finish_reason=None, usage=role_usage,
                                            prompt=request.prompt_ids if request.return_token_ids else None)))
        frames.append(_dumps(chat_chunk(rid, created, model, chat_delta(text, reasoning),
                                        finish_reason=step.finish_reason,
                                        stop_reason=step.stop_reason, token_ids=ids, usage=usage)))
        return frames

    def _full_response(self, request: ApiRequest, rid: str, created: int, text: str, finish_reason: str | None,
                       stop_reason: int | str | None, usage: dict[str, Any], token_ids: list[int],
                       reasoning: str | None = None) -> dict[str, Any]:
        """The non-streamed answer, with vLLM 0.32's members in its order; with ``return_token_ids`` the
        choice carries ``token_ids`` and the prompt's ``prompt_token_ids`` (null otherwise)."""
        ids = token_ids if request.return_token_ids else None
        prompt_ids = list(request.prompt_ids) if request.return_token_ids else None
        top = {"id": rid, "object": "text_completion" if request.kind == "completion" else "chat.completion",
               "created": created, "model": request.model}
        if request.kind == "completion":
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                                      "stop_reason": stop_reason, "token_ids": ids, "prompt_logprobs": None,
                                      "prompt_token_ids": prompt_ids, "routed_experts": None}
            return {**top, "choices": [choice], "service_tier": None, "system_fingerprint": FINGERPRINT,
                    "usage": usage, **NULL_TOP}
        message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                   "function_call": None, "reasoning": reasoning}
        chat: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason,
                                "stop_reason": stop_reason, "token_ids": ids, "routed_experts": None}
        return {**top, "choices": [chat], "service_tier": None, "system_fingerprint": FINGERPRINT, "usage": usage,
                "prompt_logprobs": None, "prompt_token_ids": prompt_ids, "prompt_text": None, **NULL_TOP}


def _split_reasoning(step: Step, text: str, thinking: int, eos_token_id: int) -> tuple[str, str]:
    """A step's text as (reasoning, answer): its first ``thinking`` tokens' words are reasoning."""
    if not thinking:
        return "", text
    reasoning = "".join(token_text(t, eos_token_id) for t in step.tokens[:thinking])
    return reasoning, text[len(reasoning):] if text.startswith(reasoning) else text


def _drop_tail(parts: list[str], count: int) -> None:
    """Remove the last ``count`` characters of the text ``parts`` joins to (in place)."""
    while count > 0 and parts:
        last = parts.pop()
        if len(last) > count:
            parts.append(last[:-count])
        count -= len(last)
