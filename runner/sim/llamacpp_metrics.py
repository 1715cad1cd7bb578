"""The simulated engine's ``/metrics`` as the native llama.cpp server prints it (``llama-server --metrics``).

The series, their order, HELP texts and types are those of ``server_task_result_metrics::
to_metrics`` (``tools/server/server-task.cpp``); the values follow
``metrics_on_prediction`` (``server-context.cpp``): a request's tokens, decode time and
speculative counts are added when it *finishes*, ``tokens_predicted_total`` counts every
generated token (the first one too) and ``tokens_predicted_seconds_total`` the time from
the first token to the last. Values are written as a C++ stream writes a double, with 6
significant digits (``%g``), so large counters are rounded exactly as a real server's are.
``llamacpp:spec_decode_num_drafts_total`` appears when the simulator's ``spec_metrics``
has ``drafts``; the per-position counter once something was drafted and ``spec_metrics``
has ``per_pos``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CONTENT_TYPE", "LlamaCppMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4"

_COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)
_GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)


def _g(value: float) -> str:
    """A double as ``std::ostream << double`` writes it (default precision: 6 significant digits)."""
    return format(float(value), ".6g")


class LlamaCppMetrics:
    """The llama.cpp-style counters of one engine session (the simulator's engines are one server)."""

    def __init__(self, spec_series: Sequence[str], k: int) -> None:
        self._spec_series = tuple(spec_series)
        self._k = k
        self._lock = threading.Lock()
        self._values = {name: 0.0 for name, _ in (*_COUNTERS, *_GAUGES)}
        self._per_pos: list[int] = []
        self._steps = 0

    def exposition(self, backlog: Mapping[str, Any] | None = None) -> bytes:
        with self._lock:
            values = dict(self._values)
            per_pos = list(self._per_pos)
        if backlog:   # fault ``backlog``: another tenant's deferred requests (llama.cpp reports no KV usage here)
            values["requests_deferred"] = float(backlog["waiting"])
        decodes = max(values["n_decode_total"], 1.0)
        values["n_busy_slots_per_decode"] = self._steps / decodes
        if values["prompt_seconds_total"] > 0:
            values["prompt_tokens_seconds"] = values["prompt_tokens_total"] / values["prompt_seconds_total"]
        if values["tokens_predicted_seconds_total"] > 0:
            values["predicted_tokens_seconds"] = values["tokens_predicted_total"] / values[
                "tokens_predicted_seconds_total"]
        lines: list[str] = []

        def add(kind: str, items: Sequence[tuple[str, str]]) -> None:
            for name, help_text in items:
                if name == "spec_decode_num_drafts_total" and "drafts" not in self._spec_series:
                    continue
                lines.extend([f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                              f"llamacpp:{name} {_g(values[name])}"])

        add("counter", _COUNTERS)
        add("gauge", _GAUGES)
        if per_pos and "per_pos" in self._spec_series:
            name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
            lines += [f'{name}{{position="{i}"}} {n}' for i, n in enumerate(per_pos)]
        return ("\n".join(lines) + "\n").encode("utf-8")

    # ------------------------------------------------------------------ updates (EngineMetrics' interface)

    def request_started(self, engine: int, prompt_tokens: int, max_tokens: int, cached_tokens: int = 0) -> None:
        with self._lock:
            self._values["requests_processing"] += 1

    def step(self, engine: int, tokens: int, drafts: int, accepted: int, seconds: float, first: bool,
             batch: tuple[int, float] | None = None) -> None:
        with self._lock:
            self._values["n_decode_total"] += 1   # one llama_decode per step (concurrent slots share none here)
            self._steps += 1

    def request_finished(self, engine: int, reason: str, *, prefill_s: float, decode_s: float, e2e_s: float,
                         generation_tokens: int, prompt_tokens: int = 0,
                         counts: Mapping[str, Any] | None = None) -> None:
        """The request's contribution, added at its end as llama.cpp's ``metrics_on_prediction`` does."""
        counts = counts or {}
        with self._lock:
            v = self._values
            v["requests_processing"] -= 1
            v["prompt_tokens_total"] += prompt_tokens
            v["prompt_seconds_total"] += prefill_s
            v["n_tokens_max"] = max(v["n_tokens_max"], float(prompt_tokens + generation_tokens))
            if generation_tokens > 0:
                v["tokens_predicted_total"] += generation_tokens
                v["tokens_predicted_seconds_total"] += decode_s
                v["spec_decode_num_draft_tokens_total"] += int(counts.get("draft_tokens", 0))
                v["spec_decode_num_accepted_tokens_total"] += int(counts.get("accepted", 0))
                # the steps that proposed a draft, as llama.cpp counts them (below 1 per step: draft_rate)
                v["spec_decode_num_drafts_total"] += int(counts.get("drafts", counts.get("rounds", 0)))
                if counts.get("drafts", counts.get("rounds")) and len(self._per_pos) < self._k:
                    self._per_pos += [0] * (self._k - len(self._per_pos))   # sized at the first verification
                for position, n in dict(counts.get("accepted_per_pos") or {}).items():
                    while len(self._per_pos) <= int(position):
                        self._per_pos.append(0)
                    self._per_pos[int(position)] += int(n)
