"""The simulated engine's ``/metrics``: vLLM V1's Prometheus series, exposed by prometheus_client.

The series, help texts, labels and buckets are those of ``reference/vllm.md`` 1.1-1.3
(``PrometheusStatLogger`` / ``SpecDecodingProm``), and the exposition is
``prometheus_client.generate_latest`` itself, so ``_total`` suffixes, ``_created``
gauges, histogram ``_bucket``/``_count``/``_sum`` lines and Go-style floats are
exactly what a real server prints. One :class:`EngineMetrics` lives as long as one
engine session: a restart starts every counter from zero again (new ``_created``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

__all__ = ["CONTENT_TYPE", "EngineMetrics", "SimMetrics", "engine_metrics"]

CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"   # what vLLM 0.32 (prometheus_client 0.26) answers
_LABELS = ("model_name", "engine")
_REASONS = ("stop", "length", "abort", "error", "repetition")
_SMALL_BUCKETS = {"n": (1, 2, 5, 10, 20), "preemptions": (1, 2, 3, 4, 5, 10, 20)}
# vLLM 0.32's cache_config_info labels (the real server's values where the simulator has none of its own)
_CACHE_INFO = {
    "_block_size_resolved": "True", "block_size": "16", "cache_dtype": "auto", "cache_hit_alignment_tokens": "None",
    "effective_attention_block_size": "16", "enable_mamba_shared_prefix_checkpoint": "False",
    "enable_prefix_caching": "True", "gpu_memory_utilization": "0.92", "hash_block_size": "None",
    "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "None", "kv_cache_memory_bytes": "None", "kv_cache_size_tokens": "None",
    "kv_offloading_backend": "native", "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None",
    "num_gpu_blocks": "None", "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None", "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None", "sliding_window": "None", "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False", "use_replayssm": "False", "user_specified_block_size": "False",
}
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

    def exposition(self, backlog: Mapping[str, Any] | None = None) -> bytes: ...

    def request_started(self, engine: int, prompt_tokens: int, max_tokens: int, cached_tokens: int = 0) -> None: ...

    def step(self, engine: int, tokens: int, drafts: int, accepted: int, seconds: float, first: bool,
             batch: tuple[int, float] | None = None) -> None: ...

    def request_finished(self, engine: int, reason: str, *, prefill_s: float, decode_s: float, e2e_s: float,
                         generation_tokens: int, prompt_tokens: int = 0,
                         counts: Mapping[str, Any] | None = None) -> None: ...


def engine_metrics(model: str, engines: int, k: int, spec_series: Sequence[str], max_model_len: int,
                   metrics_format: str = "vllm", *, prefix_caching: bool = True) -> SimMetrics:
    """The metrics of a new engine session in the simulator's ``metrics_format``."""
    if metrics_format == "llamacpp":
        from .llamacpp_metrics import LlamaCppMetrics

        return LlamaCppMetrics(spec_series, k)
    return EngineMetrics(model, engines, k, spec_series, max_model_len, prefix_caching=prefix_caching)


class EngineMetrics:
    """The Prometheus registry of one engine session (``engines`` data-parallel engines)."""

    def __init__(self, model: str, engines: int, k: int, spec_series: Sequence[str], max_model_len: int, *,
                 prefix_caching: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # vLLM serves prometheus_client's default registry: the process, platform and GC collectors come first
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.k = k
        token_buckets = _tokens_buckets(max_model_len)
        self.zeros: list[Counter] = []   # families vLLM exports that the simulator never moves (GPU, MM, KV transfer)
        for name, what in (("flops", "number of floating point operations"), ("read_bytes", "number of bytes read "
                           "from memory"), ("write_bytes", "number of bytes written to memory")):
            self.zeros.append(Counter(f"vllm:estimated_{name}_per_gpu", f"Estimated {what} per GPU (for Model "
                                      "Flops Utilization calculations).", _LABELS, registry=r))
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             _LABELS, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             _LABELS, registry=r)
        self.waiting_by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason", "Number of waiting requests by reason. Reason labels: 'capacity' = "
            "waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV "
            "transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.", (*_LABELS, "reason"),
            registry=r)
        self.sleep_state = Gauge(
            "vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            (*_LABELS, "sleep_state"), registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                              _LABELS, registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
                                      "queried tokens.", _LABELS, registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                                   _LABELS, registry=r)
        for name in ("queries", "hits"):
            self.zeros.append(Counter(f"vllm:external_prefix_cache_{name}", f"External prefix cache {name} from KV "
                                      "connector cross-instance cache sharing, in terms of number of "
                                      f"{'queried' if name == 'queries' else 'cached'} tokens.", _LABELS, registry=r))
        for name, what in (("queries", "queries, in terms of number of queried items."),
                           ("hits", "hits, in terms of number of cached items.")):
            self.zeros.append(Counter(f"vllm:mm_cache_{name}", f"Multi-modal cache {what}", _LABELS, registry=r))
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                   _LABELS, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", _LABELS,
                                     registry=r)
        self.prompt_by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                                        (*_LABELS, "source"), registry=r)
        self.prompt_cached = Counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
                                     _LABELS, registry=r)
        self.cached_by_source = Counter(
            "vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by the cache tier that supplied them: "
            "device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.", (*_LABELS, "source"), registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                         _LABELS, registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               (*_LABELS, "finished_reason"), registry=r)
        self.rejections = Counter("vllm:admission_rejections", "Number of admission attempts rejected by a queue "
                                  "limit, by reason.", ("model_name", "reason"), registry=r)
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
        self.req_preemptions = Histogram("vllm:request_num_preemptions", "Histogram of the number of times a request "
                                         "was preempted.", _LABELS, buckets=_SMALL_BUCKETS["preemptions"], registry=r)
        self.req_computed = Histogram("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens "
                                      "computed during prefill (excluding cached tokens).", _LABELS,
                                      buckets=token_buckets, registry=r)
        self.cache_info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                (*sorted(_CACHE_INFO), "engine"), registry=r)
        self.req_prompt = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                    _LABELS, buckets=token_buckets, registry=r)
        self.req_generation = Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                        _LABELS, buckets=token_buckets, registry=r)
        self.iteration = Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                   _LABELS, buckets=_ITERATION_BUCKETS, registry=r)
        self.req_max_generation = Histogram("vllm:request_max_num_generation_tokens", "Histogram of maximum number "
                                            "of requested generation tokens.", _LABELS, buckets=token_buckets,
                                            registry=r)
        self.req_n = Histogram("vllm:request_params_n", "Histogram of the n request parameter.", _LABELS,
                               buckets=_SMALL_BUCKETS["n"], registry=r)
        self.req_max_tokens = Histogram("vllm:request_params_max_tokens",
                                        "Histogram of the max_tokens request parameter.", _LABELS,
                                        buckets=token_buckets, registry=r)
        # vLLM creates every labelled child at start-up, so each series exists from the first scrape.
        for engine in range(engines):
            labels = (model, str(engine))
            for family in self._per_engine():
                family.labels(*labels)
            for reason in ("capacity", "deferred"):
                self.waiting_by_reason.labels(*labels, reason)
            for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
                self.sleep_state.labels(*labels, state).set(value)
            for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
                self.prompt_by_source.labels(*labels, source)
            for source in ("device", "host", "p2p", "disk", "external_unspecified"):
                self.cached_by_source.labels(*labels, source)
            for reason in _REASONS:
                self.success.labels(*labels, reason)
            info = dict(_CACHE_INFO, engine=str(engine), enable_prefix_caching=str(prefix_caching))
            self.cache_info.labels(**info).set(1)
            if self.per_pos is not None:
                for position in range(k):
                    self.per_pos.labels(*labels, str(position))
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            self.rejections.labels(model, reason)
        self.model = model
        self.engines = engines
        self._cache: dict[int, dict[str, Any]] = {}
        self._backlog_lock = threading.Lock()

    def _per_engine(self) -> list[Any]:
        """The families labelled (model_name, engine) alone: created for each engine at start-up, as vLLM does."""
        return [m for m in (self.running, self.waiting, self.kv_usage, self.prefix_queries, self.prefix_hits,
                            self.preemptions, self.prompt_tokens, self.prompt_cached, self.generation_tokens,
                            self.drafts, self.draft_tokens, self.accepted, self.ttft, self.itl, self.tpot, self.e2e,
                            self.queue, self.inference, self.prefill, self.decode, self.req_prompt,
                            self.req_generation, self.req_max_generation, self.req_n, self.req_max_tokens,
                            self.iteration, self.req_preemptions, self.req_computed, *self.zeros) if m is not None]

    def exposition(self, backlog: Mapping[str, Any] | None = None) -> bytes:
        """The scrape; ``backlog`` (fault ``backlog``) shows another tenant's queue and KV usage in this one."""
        if not backlog:
            return generate_latest(self.registry)
        with self._backlog_lock:
            children = [(self.waiting.labels(self.model, str(e)), self.kv_usage.labels(self.model, str(e)))
                        for e in range(self.engines)]
            kept = [(w._value.get(), kv._value.get()) for w, kv in children]
            for w, kv in children:
                w.set(float(backlog["waiting"]))
                if backlog["kv_cache_usage"] >= 0:
                    kv.set(float(backlog["kv_cache_usage"]))
            try:
                return generate_latest(self.registry)
            finally:
                for (w, kv), (waiting, usage) in zip(children, kept, strict=True):
                    w.set(waiting)
                    kv.set(usage)

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
                "success": {r: self.success.labels(*labels, r) for r in _REASONS},
                "req_max_generation": self.req_max_generation.labels(*labels), "req_n": self.req_n.labels(*labels),
                "prefix_queries": self.prefix_queries.labels(*labels), "prefix_hits": self.prefix_hits.labels(*labels),
                "prompt_cached": self.prompt_cached.labels(*labels),
                "computed": self.prompt_by_source.labels(*labels, "local_compute"),
                "cache_hit": self.prompt_by_source.labels(*labels, "local_cache_hit"),
                "device": self.cached_by_source.labels(*labels, "device"),
                "req_computed": self.req_computed.labels(*labels),
                "req_preemptions": self.req_preemptions.labels(*labels),
                "drafts": self.drafts.labels(*labels) if self.drafts is not None else None,
                "draft_tokens": self.draft_tokens.labels(*labels) if self.draft_tokens is not None else None,
                "accepted": self.accepted.labels(*labels) if self.accepted is not None else None,
                "per_pos": ([self.per_pos.labels(*labels, str(p)) for p in range(self.k)]
                            if self.per_pos is not None else None),
            }
            self._cache[engine] = cached
        return cached

    def request_started(self, engine: int, prompt_tokens: int, max_tokens: int, cached_tokens: int = 0) -> None:
        c = self._children(engine)
        c["running"].inc()
        c["prompt_tokens"].inc(prompt_tokens)
        c["req_prompt"].observe(prompt_tokens)
        c["req_max_tokens"].observe(max_tokens)
        c["req_max_generation"].observe(max_tokens)
        c["req_n"].observe(1)
        c["queue"].observe(0.0)
        c["prefix_queries"].inc(prompt_tokens)
        c["prefix_hits"].inc(cached_tokens)
        c["prompt_cached"].inc(cached_tokens)
        c["computed"].inc(prompt_tokens - cached_tokens)
        c["cache_hit"].inc(cached_tokens)
        c["device"].inc(cached_tokens)
        c["req_computed"].observe(prompt_tokens - cached_tokens)

    def step(self, engine: int, tokens: int, drafts: int, accepted: int, seconds: float, first: bool,
             batch: tuple[int, float] | None = None) -> None:
        """One engine step of one request; ``seconds`` since its previous output. ``batch`` (step_model
        "batch"): the tokens the whole batch's step scheduled, and the KV cache share it holds."""
        c = self._children(engine)
        c["generation"].inc(tokens)
        c["iteration"].observe(tokens if batch is None else batch[0])
        if batch is not None:
            self.kv_usage.labels(self.model, str(engine)).set(batch[1])
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
        c["req_preemptions"].observe(0)
        if generation_tokens > 1:
            c["tpot"].observe(decode_s / (generation_tokens - 1))
