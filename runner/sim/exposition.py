"""The simulated engine's ``/metrics``: vLLM V1's Prometheus series, exposed by prometheus_client.

The series, help texts, labels and buckets are those of ``reference/vllm.md`` 1.1-1.3
(``PrometheusStatLogger`` / ``SpecDecodingProm``), and the exposition is
``prometheus_client.generate_latest`` itself, so ``_total`` suffixes, ``_created``
gauges, histogram ``_bucket``/``_count``/``_sum`` lines and Go-style floats are
exactly what a real server prints. One :class:`EngineMetrics` lives as long as one
engine session: a restart starts every counter from zero again (new ``_created``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "EngineMetrics", "SimMetrics", "engine_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABELS = ("model_name", "engine")
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                    240.0, 480.0, 960.0, 1920.0, 7680.0)
_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def _tokens_buckets(max_model_len: int) -> list[float]:
    """vLLM's 1-2-5 buckets up to max_model_len."""
    out: list[float] = []
    mantissa, exponent = (1, 2, 5), 0
    while True:
        for m in mantissa:
            value = m * 10**exponent
            if value > max_model_len:
                return out
            out.append(float(value))
        exponent += 1


class SimMetrics(Protocol):
    """What the server updates as it serves, whatever the exposition (vLLM's, llama.cpp's)."""

    def exposition(self) -> bytes: ...

    def request_started(self, engine: int, prompt_tokens: int, max_tokens: int) -> None: ...

    def step(self, engine: int, tokens: int, drafts: int, accepted: int, seconds: float, first: bool) -> None: ...

    def request_finished(self, engine: int, reason: str, *, prefill_s: float, decode_s: float, e2e_s: float,
                         generation_tokens: int, prompt_tokens: int = 0,
                         counts: Mapping[str, Any] | None = None) -> None: ...


def engine_metrics(model: str, engines: int, k: int, spec_series: Sequence[str], max_model_len: int,
                   metrics_format: str = "vllm") -> SimMetrics:
    """The metrics of a new engine session in the simulator's ``metrics_format``."""
    if metrics_format == "llamacpp":
        from .llamacpp_metrics import LlamaCppMetrics

        return LlamaCppMetrics(spec_series, k)
    return EngineMetrics(model, engines, k, spec_series, max_model_len)


class EngineMetrics:
    """The Prometheus registry of one engine session (``engines`` data-parallel engines)."""

    def __init__(self, model: str, engines: int, k: int, spec_series: Sequence[str], max_model_len: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.k = k
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             _LABELS, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             _LABELS, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                              _LABELS, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", _LABELS,
                                     registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                         _LABELS, registry=r)
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                   _LABELS, registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               (*_LABELS, "finished_reason"), registry=r)
        self.drafts: Counter | None = None
        self.draft_tokens: Counter | None = None
        self.accepted: Counter | None = None
        self.per_pos: Counter | None = None
        if k > 0:
            if "drafts" in spec_series:
                self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", _LABELS,
                                      registry=r)
            if "draft_tokens" in spec_series:
                self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                                            _LABELS, registry=r)
            if "accepted" in spec_series:
                self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                                        _LABELS, registry=r)
            if "per_pos" in spec_series:
                self.per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                       "Accepted tokens per draft position.", (*_LABELS, "position"), registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              _LABELS, buckets=_TTFT_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             _LABELS, buckets=_ITL_BUCKETS, registry=r)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", _LABELS,
                              buckets=_TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             _LABELS, buckets=_REQUEST_BUCKETS, registry=r)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", _LABELS,
                               buckets=_REQUEST_BUCKETS, registry=r)
        self.inference = Histogram("vllm:request_inference_time_seconds",
                                   "Histogram of time spent in RUNNING phase for request.", _LABELS,
                                   buckets=_REQUEST_BUCKETS, registry=r)
        self.prefill = Histogram("vllm:request_prefill_time_seconds",
                                 "Histogram of time spent in PREFILL phase for request.", _LABELS,
                                 buckets=_REQUEST_BUCKETS, registry=r)
        self.decode = Histogram("vllm:request_decode_time_seconds",
                                "Histogram of time spent in DECODE phase for request.", _LABELS,
                                buckets=_REQUEST_BUCKETS, registry=r)
        token_buckets = _tokens_buckets(max_model_len)
        self.req_prompt = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                    _LABELS, buckets=token_buckets, registry=r)
        self.req_generation = Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                        _LABELS, buckets=token_buckets, registry=r)
        self.req_max_tokens = Histogram("vllm:request_params_max_tokens",
                                        "Histogram of the max_tokens request parameter.", _LABELS,
                                        buckets=token_buckets, registry=r)
        self.iteration = Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                   _LABELS, buckets=_ITERATION_BUCKETS, registry=r)
        # vLLM creates every labelled child at start-up, so each series exists from the first scrape.
        for engine in range(engines):
            labels = (model, str(engine))
            for metric in (self.running, self.waiting, self.kv_usage, self.prompt_tokens, self.generation_tokens,
                           self.preemptions, self.drafts, self.draft_tokens, self.accepted, self.ttft, self.itl,
                           self.tpot, self.e2e, self.queue, self.inference, self.prefill, self.decode,
                           self.req_prompt, self.req_generation, self.req_max_tokens, self.iteration):
                if metric is not None:
                    metric.labels(*labels)
            for reason in ("stop", "length", "abort", "error"):
                self.success.labels(*labels, reason)
            if self.per_pos is not None:
                for position in range(k):
                    self.per_pos.labels(*labels, str(position))
        self.model = model
        self._cache: dict[int, dict[str, Any]] = {}

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------------ updates
    # Labelled children are looked up once per engine: a step costs a few microseconds.

    def _children(self, engine: int) -> dict[str, Any]:
        cached = self._cache.get(engine)
        if cached is None:
            labels = (self.model, str(engine))
            cached = {
                "running": self.running.labels(*labels), "prompt_tokens": self.prompt_tokens.labels(*labels),
                "req_prompt": self.req_prompt.labels(*labels), "req_max_tokens": self.req_max_tokens.labels(*labels),
                "queue": self.queue.labels(*labels), "generation": self.generation_tokens.labels(*labels),
                "iteration": self.iteration.labels(*labels), "ttft": self.ttft.labels(*labels),
                "itl": self.itl.labels(*labels), "prefill": self.prefill.labels(*labels),
                "decode": self.decode.labels(*labels), "inference": self.inference.labels(*labels),
                "e2e": self.e2e.labels(*labels), "req_generation": self.req_generation.labels(*labels),
                "tpot": self.tpot.labels(*labels),
                "success": {r: self.success.labels(*labels, r) for r in ("stop", "length", "abort", "error")},
                "drafts": self.drafts.labels(*labels) if self.drafts is not None else None,
                "draft_tokens": self.draft_tokens.labels(*labels) if self.draft_tokens is not None else None,
                "accepted": self.accepted.labels(*labels) if self.accepted is not None else None,
                "per_pos": ([self.per_pos.labels(*labels, str(p)) for p in range(self.k)]
                            if self.per_pos is not None else None),
            }
            self._cache[engine] = cached
        return cached

    def request_started(self, engine: int, prompt_tokens: int, max_tokens: int) -> None:
        c = self._children(engine)
        c["running"].inc()
        c["prompt_tokens"].inc(prompt_tokens)
        c["req_prompt"].observe(prompt_tokens)
        c["req_max_tokens"].observe(max_tokens)
        c["queue"].observe(0.0)

    def step(self, engine: int, tokens: int, drafts: int, accepted: int, seconds: float, first: bool) -> None:
        """One engine step of one request; ``seconds`` since its previous output."""
        c = self._children(engine)
        c["generation"].inc(tokens)
        c["iteration"].observe(tokens)
        (c["ttft"] if first else c["itl"]).observe(seconds)
        if drafts > 0:
            if c["drafts"] is not None:
                c["drafts"].inc()
            if c["draft_tokens"] is not None:
                c["draft_tokens"].inc(drafts)
            if c["accepted"] is not None:
                c["accepted"].inc(accepted)
            if c["per_pos"] is not None:
                for position in range(accepted):
                    c["per_pos"][position].inc()

    def request_finished(self, engine: int, reason: str, *, prefill_s: float, decode_s: float, e2e_s: float,
                         generation_tokens: int, prompt_tokens: int = 0,
                         counts: Mapping[str, Any] | None = None) -> None:
        c = self._children(engine)
        c["running"].dec()
        c["success"][reason].inc()
        c["prefill"].observe(prefill_s)
        c["decode"].observe(decode_s)
        c["inference"].observe(prefill_s + decode_s)
        c["e2e"].observe(e2e_s)
        c["req_generation"].observe(generation_tokens)
        if generation_tokens > 1:
            c["tpot"].observe(decode_s / (generation_tokens - 1))
