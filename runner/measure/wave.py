"""A wave: scrape ``/metrics``, run the prompts (batch 1 or concurrent), scrape again.

:func:`measure_wave` is the measurement client's one entry point; it returns a
:class:`WaveResult` whose :meth:`~WaveResult.summary` is the ``wave.measured`` payload
of ``docs/events.md`` without the window keys and the records blob, and whose
:meth:`~WaveResult.records_jsonl` is that blob (one JSON object per request, every
request included).
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import httpx

from ledger.errors import ExternalError, FormatError
from ledger.strictjson import read_json

from .bounds import MAX_METRICS_BYTES, MAX_MODELS_BYTES, ReplyRefused, fetch
from .family import Prompt
from .interpreter import quiet_interpreter
from .metrics import CounterDeltas, MetricsSnapshot, merge_snapshots, parse_metrics, series_deltas
from .record import RequestRecord, clip
from .request import Cutter, run_request, utc_now
from .sources import CounterSource, GaugeReading, select_source
from .totals import WaveTotals
from .transport import StampingTransport
from .urls import has_credentials, redact

__all__ = ["ListedModel", "Scrape", "UrlCounters", "WaveResult", "host_load", "list_models", "measure_wave",
           "scrape_metrics", "served_models"]

MAX_PARALLEL_SCRAPES = 8  # metrics URLs scraped at once (each on its own connection)
SETTLE_S = 5.0         # how long the after-scrape waits for a settling source's in-flight gauge to reach 0
SETTLE_POLL_S = 0.05   # between two scrapes while it waits
_COLLECT_EVERY = 256   # finished requests between two young-generation collections in a streamed wave
                       # (and x 64 between two full ones)


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _no_credentials(url: str, what: str) -> str:
    """``url``, refused when it has a ``user:password@`` part: a wave records its URLs, so credentials
    travel apart, as an :class:`~.urls.OriginAuth` (``auth``), and go only to their own origin."""
    if has_credentials(url):
        raise FormatError(f"{what} {redact(url)!r} carries credentials: pass them as auth "
                          "(runner.measure.urls.OriginAuth), never inside a URL that is recorded")
    return url


@dataclass(frozen=True)
class Scrape:
    """One ``/metrics`` read: a snapshot, or why there is none."""

    snapshot: MetricsSnapshot | None
    problem: str | None = None
    absent: bool = False          # the endpoint does not exist (HTTP 404): not a vLLM server


@dataclass(frozen=True)
class UrlCounters:
    """One metrics URL's own share of a wave: after - before of each series the source reads."""

    url: str
    series: Mapping[str, Any]          # series -> delta (``None``: absent or reset); per-position: a list
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "series": dict(self.series), "problems": list(self.problems)}


def host_load() -> tuple[float, float, float] | None:
    """The runner host's load average over 1, 5 and 15 minutes (``None`` where the OS has none)."""
    try:
        one, five, fifteen = os.getloadavg()
    except (OSError, AttributeError):
        return None
    return (round(one, 4), round(five, 4), round(fifteen, 4))


def _problem(exc: BaseException) -> str:
    return clip(f"{type(exc).__name__}: {exc}", 300)


def scrape_metrics(http: httpx.Client, url: str, timeout_s: float = 10.0, *, headers: Mapping[str, str] | None = None,
                   max_bytes: int = MAX_METRICS_BYTES,
                   on_socket: Callable[[socket.socket | None], None] | None = None) -> Scrape:
    """Read ``/metrics`` within ``timeout_s`` overall and ``max_bytes``; what went wrong is the scrape's problem."""
    _no_credentials(url, "the metrics URL")
    try:
        reply = fetch(http, "GET", url, deadline_s=timeout_s, max_bytes=max_bytes, what=f"metrics at {url}",
                      headers=headers, on_socket=on_socket)
    except httpx.TimeoutException:
        return Scrape(None, f"metrics at {url} did not answer within {timeout_s:g} s")
    except ReplyRefused as exc:
        return Scrape(None, f"metrics at {url} refused: {exc}")
    except (httpx.HTTPError, OSError) as exc:
        return Scrape(None, f"metrics unreachable at {url}: {_problem(exc)}")
    if reply.status == 404:
        return Scrape(None, f"no metrics endpoint at {url} (HTTP 404)", absent=True)
    if reply.status != 200:
        return Scrape(None, f"metrics at {url} answered HTTP {reply.status}")
    try:
        return Scrape(parse_metrics(reply.text))
    except FormatError as exc:
        return Scrape(None, f"metrics at {url} unreadable: {clip(str(exc), 300)}")


MAX_CONTEXT = 1 << 31


@dataclass(frozen=True)
class ListedModel:
    """A model a server lists, with the context length it serves when it says (vLLM's ``max_model_len``)."""

    id: str
    max_model_len: int | None = None


def list_models(base_url: str, *, timeout_s: float = 10.0, http: httpx.Client | None = None,
                headers: Mapping[str, str] | None = None, auth: httpx.Auth | None = None) -> list[str]:
    """The model ids a server lists at ``/v1/models``; ``ExternalError`` if it does not answer."""
    return [m.id for m in served_models(base_url, timeout_s=timeout_s, http=http, headers=headers, auth=auth)]


def served_models(base_url: str, *, timeout_s: float = 10.0, http: httpx.Client | None = None,
                  headers: Mapping[str, str] | None = None, auth: httpx.Auth | None = None) -> list[ListedModel]:
    """The models a server lists at ``/v1/models``; ``ExternalError`` if it does not answer.

    The whole exchange takes at most ``timeout_s`` and the reply at most 1 MiB.
    ``max_model_len`` is kept only as an integer from 1 to 2^31 (anything else: not said).
    ``headers`` go with the request; credentials go as ``auth`` (an :class:`~.urls.OriginAuth`).
    """
    url = f"{_base(_no_credentials(base_url, 'the server URL'))}/v1/models"
    client = http or httpx.Client(transport=StampingTransport(), headers=dict(headers or {}), auth=auth)
    try:
        reply = fetch(client, "GET", url, deadline_s=timeout_s, max_bytes=MAX_MODELS_BYTES, what=f"the reply of {url}")
    except httpx.TimeoutException:
        raise ExternalError(f"cannot reach {base_url}: no answer from {url} within {timeout_s:g} s") from None
    except ReplyRefused as exc:
        raise ExternalError(f"{url} answered, but {exc}") from None
    except (httpx.HTTPError, OSError) as exc:
        raise ExternalError(f"cannot reach {base_url}: {_problem(exc)}") from None
    finally:
        if http is None:
            client.close()
    if reply.status >= 500:
        raise ExternalError(f"{url} answered HTTP {reply.status}")
    if reply.status != 200:
        return []
    try:
        body = read_json(reply.body, f"the reply of {url}", max_bytes=MAX_MODELS_BYTES)
        data = body.get("data", []) if isinstance(body, dict) else []
        return [ListedModel(str(m["id"]), _context(m.get("max_model_len")))
                for m in data if isinstance(m, dict) and isinstance(m.get("id"), str | int)]
    except (FormatError, TypeError, AttributeError):
        return []


def _context(value: Any) -> int | None:
    return value if type(value) is int and 1 <= value <= MAX_CONTEXT else None


@dataclass(frozen=True)
class WaveResult:
    """One measured wave."""

    family: str
    seed: int
    max_tokens: int
    concurrency: int
    started_at: str
    ended_at: str
    duration_s: float
    counters: CounterDeltas
    incomplete_reasons: tuple[str, ...]
    notes: tuple[str, ...]
    requests: tuple[RequestRecord, ...]
    url: str
    metrics_url: str | None
    model: str
    chat: bool
    ignore_eos: bool
    cancelled: bool
    before: MetricsSnapshot | None = None
    after: MetricsSnapshot | None = None
    totals: WaveTotals = field(default_factory=WaveTotals)
    streamed: bool = False           # the records went to ``on_request`` only: ``requests`` is empty
    unlisted: int = 0                # requests never sent and not given a record (``unsent_records``)
    source: CounterSource = field(default_factory=select_source)
    speculative: bool | None = None  # what the caller said of the arm (None: nothing)
    gauges_before: GaugeReading | None = None
    gauges_after: GaugeReading | None = None
    load_before: tuple[float, float, float] | None = None
    load_after: tuple[float, float, float] | None = None
    metrics_urls: tuple[str, ...] = ()          # every URL scraped (their counters summed)
    per_url: tuple[UrlCounters, ...] = ()       # each URL's own deltas (two URLs or more)

    @property
    def complete(self) -> bool:
        return not self.incomplete_reasons

    @property
    def counters_note(self) -> str | None:
        """One line on why server counters are missing (``None`` when the spec series are there)."""
        if self.counters_available:
            return None
        if self.counters.absent is not None:
            return self.counters.absent
        for line in (*self.incomplete_reasons, *self.notes):
            if "metrics" in line:
                return line
        return "speculative-decoding series missing"

    @property
    def counters_available(self) -> bool:
        """The server exposed speculative-decoding counters for this wave."""
        return any(self.counters.to_json()[k] is not None for k in ("rounds", "accepted", "draft_tokens"))

    @cached_property
    def _client(self) -> dict[str, Any]:
        return self.totals.client()

    def summary(self) -> dict[str, Any]:
        """The ``wave.measured`` payload minus window keys and ``records`` (``docs/events.md``).

        For a streamed wave ``requests`` and ``client.ttft_s`` are :class:`.spool.Spooled`
        (write them with :func:`.spool.dump_json`).
        """
        return {
            "family": self.family,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "concurrency": self.concurrency,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "counters": self.counters.to_json(),
            "counters_missing": list(self.counters.missing),
            "complete": self.complete,
            "incomplete_reasons": list(self.incomplete_reasons),
            "client": dict(self._client),
            "requests": self.totals.summary_entries(),
            "counter_source": self.counter_source_info(),
            "gauges": self.gauges(),
            "host_load": {"before": list(self.load_before) if self.load_before is not None else None,
                          "after": list(self.load_after) if self.load_after is not None else None,
                          "cpus": os.cpu_count()},
        }

    def counter_source_info(self) -> dict[str, Any]:
        """The ``counter_source`` member of ``wave.measured``: the source and how each counter was derived."""
        c = self.counters
        info: dict[str, Any] = {
            "name": self.source.name, "speculative": self.speculative, "counts_rounds": self.source.counts_rounds,
            "chunks_are_steps": self.source.chunks_are_steps, "derived": dict(c.derived),
        }
        if c.resolution:
            info["resolution"] = dict(c.resolution)
        if any("first tokens" in how for how in c.derived.values()):
            info["first_tokens"] = self.totals.with_content
        if c.absent is not None:
            info["absent"] = c.absent
        return info

    def gauges(self) -> dict[str, Any]:
        """The ``gauges`` member: the server's gauges before and after the wave (``None``: not read)."""
        readings = [g for g in (self.gauges_before, self.gauges_after) if g is not None]
        series = {k: v for g in readings for k, v in g.series.items() if v is not None}
        return {"before": self.gauges_before.to_json() if self.gauges_before is not None else None,
                "after": self.gauges_after.to_json() if self.gauges_after is not None else None,
                "series": dict(sorted(series.items()))}

    def records_jsonl(self) -> bytes:
        """Every request's full record, one JSON object per line, in request order."""
        if self.streamed:
            raise ValueError("the records of a streamed wave went to on_request; they were not kept")
        return b"".join(r.json_line() for r in self.requests)

    @property
    def ok(self) -> int:
        return self.totals.counts["ok"]

    def figures(self) -> dict[str, Any]:
        """Derived figures for people (``tally measure``); see docs/measure.md for definitions."""
        c = self.counters
        server: dict[str, Any] | None = None
        if self.counters_available:
            drafts = c.drafts if c.drafts is not None else c.rounds
            draft_tokens, accepted = c.draft_tokens, c.accepted
            server = {
                "rounds": c.rounds, "drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted,
                "acceptance_rate": accepted / draft_tokens if accepted is not None and draft_tokens else None,
                "mean_acceptance_length": 1 + accepted / drafts if accepted is not None and drafts else None,
                "per_position_acceptance": ([n / drafts for n in c.accepted_per_pos]
                                            if c.accepted_per_pos is not None and drafts else None),
                "decode_s": c.decode_s, "generation_tokens": c.generation_tokens,
            }
        client = self._client
        t = self.totals
        delivered = t.delivered_tokens
        return {
            "requests": {k: client.get(k, 0) for k in ("requests", "ok", "failed", "timed_out", "cancelled", "censored",
                                                       "bounded")},
            "early_stops": t.early_stops,
            "ttft_ms": _scaled(t.ttft_ok.percentiles(), 1000.0),
            "decode_tps_per_request_p50": t.decode_tps.percentile(50),
            "decode_tps_pooled": client["decode_tps"],
            "chunk_interval_ms": client["chunk_interval_ms"],
            "chunks_are_steps": self.source.chunks_are_steps,
            "token_itl_ms": client["token_itl_ms"],
            "tpot_ms": client["tpot_ms"],
            "token_count_sources": client["token_count_sources"],
            "tokens_per_chunk": client["tokens_per_chunk"],
            "tpot_ms_p50": t.tpot_ms.percentile(50),
            "e2e_ms": _scaled(t.e2e_s.percentiles(), 1000.0),
            "output_tps": delivered / self.duration_s if self.duration_s > 0 else None,
            "duration_s": self.duration_s,
            "delivered_tokens": delivered,
            "server": server,
        }

    def close(self) -> None:
        """Remove a streamed wave's spool (its summary entries and samples)."""
        self.totals.close()


def _scaled(values: dict[str, float] | None, factor: float) -> dict[str, float] | None:
    return {k: v * factor for k, v in values.items()} if values is not None else None


def _request_body(prompt: Prompt, *, model: str, chat: bool, max_tokens: int, seed: int, ignore_eos: bool,
                  priority: int, temperature: float, top_p: float, return_token_ids: bool,
                  extra_body: Mapping[str, Any] | None, continuous_usage: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if chat:
        body["messages"] = prompt.chat_messages()
    else:
        body["prompt"] = prompt.text
    body.update({
        "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "seed": seed, "stream": True,
        "stream_options": {"include_usage": True, **({"continuous_usage_stats": True} if continuous_usage else {})},
        "ignore_eos": ignore_eos,
        "cache_salt": f"tally-{uuid.uuid4().hex}",
    })
    if priority:
        body["priority"] = priority
    if return_token_ids:
        body["return_token_ids"] = True
    if extra_body:
        body.update(extra_body)
    return body


def _not_sent(index: int, prompt: Prompt, why: str, seed: int, max_tokens: int) -> RequestRecord:
    return RequestRecord(index=index, prompt_id=prompt.id, status="cancelled",
                         reason=f"not sent: {'cancelled' if why == 'cancelled' else 'wave deadline passed'}",
                         sent_at=utc_now(), send_t=time.perf_counter(), ended_s=0.0, seed=seed,
                         max_tokens=max_tokens, cache_salt="")


def measure_wave(
    base_url: str,
    metrics_url: str | Sequence[str] | None,
    prompts: Sequence[Prompt],
    *,
    model: str,
    max_tokens: int,
    seed: int,
    concurrency: int = 1,
    deadline_s: float | None = None,
    wave_deadline_s: float | None = None,
    chat: bool = False,
    ignore_eos: bool = True,
    priority: int = 0,
    family: str = "",
    temperature: float = 1.0,
    top_p: float = 1.0,
    return_token_ids: bool = True,
    extra_body: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    on_request: Callable[[RequestRecord], None] | None = None,
    read_timeout_s: float = 300.0,
    headers: Mapping[str, str] | None = None,
    quiet: bool = True,
    metrics_headers: Mapping[str, str] | None = None,
    metrics_timeout_s: float = 10.0,
    auth: httpx.Auth | None = None,
    totals: WaveTotals | None = None,
    unsent_records: int | None = None,
    counter_source: str | CounterSource = "vllm",
    speculative: bool | None = None,
    tokenizer: Callable[[str], int] | None = None,
    continuous_usage: bool = False,
    decode_bound_s: float | None = None,
    keep_token_ids: bool = False,
    settle_s: float = SETTLE_S,
) -> WaveResult:
    """Run one wave of streaming requests and read the server's counters around it.

    ``base_url`` is the server (``http://host:8000``, with or without ``/v1``);
    ``metrics_url`` its ``/metrics`` (``None``: no server counters), or several URLs (engines
    and hosts): their counters are summed, each URL's own deltas kept in ``per_url``, and one URL
    that cannot be read leaves the wave incomplete with that URL named. Requests go out
    in prompt order, ``concurrency`` at a time, each with ``seed``, ``max_tokens``,
    T = ``temperature``, top_p, ``ignore_eos``, ``priority`` (sent when non-zero), a
    fresh ``cache_salt`` and ``stream_options.include_usage``. ``deadline_s`` cuts a
    request that long after its send (without it, after
    :data:`.bounds.DEFAULT_REQUEST_DEADLINE_S`), ``wave_deadline_s`` cuts everything that long
    after the wave began (requests not yet sent are recorded as cancelled); setting
    ``cancel`` does the same at once. ``on_request`` is called with each finished
    record (from worker threads). With ``quiet`` (the default) the GIL switch interval
    is lowered and cyclic GC suspended while the wave runs (:mod:`.interpreter`).
    Each ``/metrics`` scrape takes at most ``metrics_timeout_s`` (1 s after a cancel)
    and 16 MiB; ``metrics_headers`` are added to ``headers`` for it. ``headers`` go with
    every request, to every URL: credentials go as ``auth`` (an :class:`~.urls.OriginAuth`),
    which sends each URL's own only to that URL's origin; a URL with a ``user:password@``
    part is refused (``FormatError``), since the wave records its URLs.

    A wave too big to hold: pass ``totals`` (e.g. :meth:`.totals.WaveTotals.spooled`)
    and the records are added to it as they finish and not kept (``requests`` is empty,
    ``streamed`` true: keep them yourself with ``on_request``); ``prompts`` may then be
    a lazy sequence. ``unsent_records`` caps how many requests never sent (the wave
    stopped early) get a record each; the rest are counted in ``unlisted``.

    ``counter_source`` (``docs/measure.md``, "Counter sources") says which series the
    server exposes and how the counters are derived from them; ``"none"`` reads no
    ``/metrics`` at all. ``speculative`` is what the caller knows of the arm: ``False``
    (it runs no speculative decoding: rounds are the generated tokens after each
    request's first, accepted 0), ``True``, or ``None``. The server's gauges and the
    runner host's load average are read before and after the wave. ``tokenizer`` counts a
    chunk's tokens from its text when the server sends no token ids (declare one, or each
    chunk counts as one token, and the records say so); ``continuous_usage`` asks for
    ``stream_options.continuous_usage_stats`` (usage with every chunk, vLLM).
    ``decode_bound_s`` makes every request a bounded decode run (:func:`.request.run_request`):
    ``deadline_s`` then bounds the wait for its first token, and it is cut (``bounded``)
    that long after its first token.

    A source that counts a request only when the server releases it (llama.cpp:
    ``CounterSource.settle_series``) is scraped after the wave until that gauge reads 0
    (every ``SETTLE_POLL_S``, for at most ``settle_s``; not after a cancel): a request the
    client cut may still hold its slot for a moment. Still above 0 by then, the wave is
    incomplete and says so.

    Never raises for what the server does: failures are recorded; only bad arguments
    raise ``FormatError``.
    """
    if not len(prompts):
        raise FormatError("a wave needs at least one prompt")
    if concurrency < 1:
        raise FormatError(f"concurrency must be at least 1, got {concurrency}")
    if max_tokens < 1:
        raise FormatError(f"max_tokens must be at least 1, got {max_tokens}")
    for name, value in (("deadline_s", deadline_s), ("wave_deadline_s", wave_deadline_s),
                        ("metrics_timeout_s", metrics_timeout_s), ("decode_bound_s", decode_bound_s),
                        ("settle_s", settle_s)):
        if value is not None and value <= 0:
            raise FormatError(f"{name} must be positive, got {value}")
    source = select_source(counter_source)
    urls: tuple[str, ...] = (() if not source.scrapes or not metrics_url
                             else (metrics_url,) if isinstance(metrics_url, str) else tuple(metrics_url))
    base = _base(_no_credentials(base_url, "the server URL"))
    for url in urls:
        _no_credentials(url, "the metrics URL")
    endpoint = f"{base}/v1/chat/completions" if chat else f"{base}/v1/completions"
    total = len(prompts)
    workers = min(concurrency, total)
    scrapers = max(1, min(len(urls), MAX_PARALLEL_SCRAPES))
    limits = httpx.Limits(max_connections=workers + scrapers, max_keepalive_connections=workers + scrapers)
    streamed = totals is not None
    records: list[RequestRecord | None] = [] if streamed else [None] * total
    errors: list[BaseException] = []
    lock = threading.Lock()
    next_index = [0]
    unsent = [0]
    listed = [0]
    with httpx.Client(transport=StampingTransport(limits), headers=dict(headers or {}), auth=auth) as http, \
            (quiet_interpreter() if quiet else contextlib.nullcontext()):
        started_at = utc_now()
        cutter = Cutter(cancel, None)

        def scrape_one(url: str) -> Scrape:
            was_cancelled = cancel is not None and cancel.is_set()
            # a cancel cuts a scrape in flight; after one, a scrape gets a second at most
            ticket = cutter.register(None, wave=False, cancellable=not was_cancelled)
            try:
                return scrape_metrics(http, url, min(metrics_timeout_s, 1.0) if was_cancelled
                                      else metrics_timeout_s, headers=metrics_headers, on_socket=ticket.attach)
            finally:
                cutter.release(ticket)

        def scrape() -> tuple[Scrape, ...] | None:
            """Every URL's scrape, in URL order; several at once (at most ``MAX_PARALLEL_SCRAPES``)."""
            if len(urls) < 2:
                return tuple(scrape_one(url) for url in urls) if urls else None
            with ThreadPoolExecutor(scrapers, thread_name_prefix="tally-scrape") as pool:
                return tuple(pool.map(scrape_one, urls))

        def settled(scrapes: tuple[Scrape, ...] | None) -> tuple[tuple[Scrape, ...] | None, str | None]:
            """Scrape again until the source's in-flight gauge reads 0 (the scrapes, and why not, if not)."""
            series = source.settle_series
            if series is None or scrapes is None:
                return scrapes, None
            limit = time.perf_counter() + settle_s
            while True:
                running = sum(s.snapshot.values.get(series, 0.0) for s in scrapes if s.snapshot is not None)
                if running <= 0 or (cancel is not None and cancel.is_set()):
                    return scrapes, None
                if time.perf_counter() + SETTLE_POLL_S > limit:
                    return scrapes, (f"{series} still {running:g} {settle_s:g} s after the wave: the counters may "
                                     f"miss those requests ({source.label} counts a request when it releases it)")
                time.sleep(SETTLE_POLL_S)
                scrapes = scrape() or scrapes  # never None: the URLs are there

        try:
            load_before = host_load()
            before = scrape()
            start = time.perf_counter()
            cutter.set_wave_deadline(start + wave_deadline_s if wave_deadline_s is not None else None)

            def work() -> None:
                try:
                    while True:
                        with lock:
                            index = next_index[0]
                            next_index[0] += 1
                        if index >= total:
                            return
                        prompt = prompts[index]
                        why = cutter.stop_reason()
                        if why is not None:
                            with lock:
                                if unsent_records is not None and unsent[0] >= unsent_records:
                                    next_index[0] = total  # the rest are counted, not listed
                                    return
                                unsent[0] += 1
                            record = _not_sent(index, prompt, why, seed, max_tokens)
                        else:
                            body = _request_body(prompt, model=model, chat=chat, max_tokens=max_tokens, seed=seed,
                                                 ignore_eos=ignore_eos, priority=priority, temperature=temperature,
                                                 top_p=top_p, return_token_ids=return_token_ids,
                                                 extra_body=extra_body, continuous_usage=continuous_usage)
                            record = run_request(http, endpoint, body, index=index, prompt_id=prompt.id,
                                                 cutter=cutter, deadline_s=deadline_s, read_timeout_s=read_timeout_s,
                                                 chunks_are_steps=source.chunks_are_steps, tokenizer=tokenizer,
                                                 decode_bound_s=decode_bound_s, keep_token_ids=keep_token_ids)
                        with lock:
                            listed[0] += 1
                            collect = -1
                            if totals is not None and listed[0] % _COLLECT_EVERY == 0:
                                collect = 2 if listed[0] % (_COLLECT_EVERY * 64) == 0 else 1
                            if totals is not None:
                                totals.add(record)
                            else:
                                records[index] = record
                        if on_request is not None:
                            on_request(record)
                        if collect >= 0 and not gc.isenabled():
                            # a streamed wave may run for hours with cyclic GC suspended: collect the young
                            # generations (the finished requests' cycles) now and then, all of them rarely
                            gc.collect(collect)
                except BaseException as exc:  # a bug or a failing callback: stop this worker, raise after the join
                    errors.append(exc)

            threads = [threading.Thread(target=work, name=f"tally-measure-{i}", daemon=True) for i in range(workers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            duration = time.perf_counter() - start
            after, unsettled = settled(scrape())
            load_after = host_load()
        finally:
            cutter.close()
        ended_at = utc_now()
    done = [r for r in records if r is not None]
    result = _result(done, before, after, family=family, seed=seed, max_tokens=max_tokens, concurrency=concurrency,
                     started_at=started_at, ended_at=ended_at, duration=duration, url=base, metrics_urls=urls,
                     model=model, chat=chat, ignore_eos=ignore_eos,
                     cancelled=cancel is not None and cancel.is_set(), totals=totals, unlisted=total - listed[0],
                     source=source, speculative=speculative, loads=(load_before, load_after), unsettled=unsettled)
    if errors:
        raise errors[0]
    return result


def _merged(scrapes: tuple[Scrape, ...] | None, *, all_read: bool = True) -> MetricsSnapshot | None:
    """The scrapes of every URL summed (``None`` when one could not be read, unless not ``all_read``)."""
    snaps = [s.snapshot for s in scrapes or () if s.snapshot is not None]
    if not snaps or (all_read and len(snaps) != len(scrapes or ())):
        return None
    return merge_snapshots(snaps)


def _merged_steps(source: CounterSource, deltas: CounterDeltas, records: Sequence[RequestRecord]) -> str | None:
    """A note when the server counted more decode steps than the chunks it streamed after each first.

    On real vLLM (0.32) a stream whose reader falls behind gets the outputs of several
    engine steps merged into one chunk (the output collector merges what the stream has
    not taken yet): such a chunk's interval spans more than one step. Measured on 2 busy
    cores: 16 one-token steps reached the client as 15 chunks."""
    if not source.chunks_are_steps or deltas.rounds is None or not records:
        return None
    streamed = sum(max(len(r.chunk_t) - 1, 0) for r in records)
    if deltas.rounds <= streamed:
        return None
    merged = deltas.rounds - streamed
    return (f"the server counted {deltas.rounds} decode steps, the client received {streamed} chunks after each "
            f"request's first: {merged} step{'s' if merged != 1 else ''} reached the client merged into another's "
            "chunk (the server's output fell behind), so not every chunk interval is one round")


def _gauges(source: CounterSource, scrapes: tuple[Scrape, ...] | None,
            merged: MetricsSnapshot | None) -> GaugeReading | None:
    """The gauges of the scrapes that were read (``merged``: all of them, already summed)."""
    snapshot = merged if merged is not None else _merged(scrapes, all_read=False)
    return source.gauges(snapshot) if snapshot is not None else None


def _result(records: list[RequestRecord], before: tuple[Scrape, ...] | None, after: tuple[Scrape, ...] | None, *,
            family: str, seed: int, max_tokens: int, concurrency: int, started_at: str, ended_at: str,
            duration: float, url: str, metrics_urls: tuple[str, ...], model: str, chat: bool, ignore_eos: bool,
            cancelled: bool,
            totals: WaveTotals | None = None, unlisted: int = 0, source: CounterSource | None = None,
            speculative: bool | None = None,
            loads: tuple[tuple[float, float, float] | None, ...] = (None, None),
            unsettled: str | None = None) -> WaveResult:
    streamed = totals is not None
    tally = totals if totals is not None else WaveTotals.of(records)
    source = source if source is not None else select_source()
    reasons: list[str] = []
    notes: list[str] = []
    merged_before, merged_after = _merged(before), _merged(after)
    per_url: list[UrlCounters] = []
    if not source.scrapes:
        deltas = source.unavailable()
    elif before is None or after is None:
        deltas = source.unavailable()
        notes.append("no metrics URL given: server counters not read")
    elif merged_before is None or merged_after is None:
        deltas = source.unavailable()   # a sum without one of its URLs is no sum: every counter missing
        for was, now in zip(before, after, strict=True):
            if was.problem is not None and was.problem == now.problem:
                reasons.append(f"{was.problem} (before and after the wave)")
            else:
                for when, scrape in (("before", was), ("after", now)):
                    if scrape.problem is not None:
                        reasons.append(f"{scrape.problem} ({when} the wave)")
    else:
        deltas = source.deltas(merged_before, merged_after, speculative=speculative,
                               first_tokens=tally.with_content)
        reasons.extend(deltas.problems)
        if len(metrics_urls) > 1:
            for u, was, now in zip(metrics_urls, before, after, strict=True):
                assert was.snapshot is not None and now.snapshot is not None
                series, problems = series_deltas(was.snapshot, now.snapshot, source.series())
                per_url.append(UrlCounters(u, series, problems))
                reasons.extend(f"metrics at {u}: {problem}" for problem in problems
                               if f"metrics at {u}: {problem}" not in reasons)
    notes.extend(deltas.notes)
    merged_note = _merged_steps(source, deltas, records)
    if merged_note is not None:
        notes.append(merged_note)
    if unsettled is not None:
        reasons.append(unsettled)
    for status, label in (("failed", "failed"), ("timeout", "timed out"), ("cancelled", "cancelled")):
        count = tally.counts[status]
        if count:
            reasons.append(f"{count} request{'s' if count != 1 else ''} {label}")
    if unlisted:
        reasons.append(f"{unlisted} request{'s' if unlisted != 1 else ''} not sent")
        notes.append(f"{unlisted} request{'s' if unlisted != 1 else ''} not sent because the wave stopped early "
                     "(counted, not listed one by one)")
    if cancelled:
        reasons.append("wave cancelled")
    if tally.early_stops:
        early = tally.early_stops
        hint = " although ignore_eos was sent: the server may ignore ignore_eos" if ignore_eos else ""
        seen = ", ".join(sorted(tally.early_finish_reasons)) + (", ..." if tally.more_finish_reasons else "")
        notes.append(f"{early} request{'s' if early != 1 else ''} stopped before max_tokens "
                     f"(finish_reason {seen}){hint}")
    return WaveResult(
        family=family, seed=seed, max_tokens=max_tokens, concurrency=concurrency, started_at=started_at,
        ended_at=ended_at, duration_s=duration, counters=deltas, incomplete_reasons=tuple(reasons),
        notes=tuple(notes), requests=tuple(records), url=url, metrics_url=metrics_urls[0] if metrics_urls else None,
        model=model, chat=chat, ignore_eos=ignore_eos, cancelled=cancelled,
        before=merged_before, after=merged_after, metrics_urls=metrics_urls, per_url=tuple(per_url),
        totals=tally, streamed=streamed, unlisted=unlisted, source=source, speculative=speculative,
        gauges_before=_gauges(source, before, merged_before), gauges_after=_gauges(source, after, merged_after),
        load_before=loads[0], load_after=loads[1],
    )

