"""What a server reports of its own effective parameters, read from its own endpoints (hostile input).

:func:`read_served` asks, each within a deadline and a byte cap:

- ``GET /v1/models``: the first model's ``id``, ``root`` and ``max_model_len`` (vLLM lists them);
- ``GET /metrics``: the labels of vLLM's ``vllm:cache_config_info`` info series (``block_size``,
  ``enable_prefix_caching``, ``num_gpu_blocks``, ...), the first metrics URL that has it;
- ``GET /server_info?config_format=json`` (vLLM's development mode, ``VLLM_SERVER_DEV_MODE=1``):
  ``model_config.max_model_len``, ``cache_config.enable_prefix_caching`` and ``block_size``,
  ``speculative_config`` (its scalar members; ``null``: none) and
  ``model_config.override_generation_config`` (the server's default sampling overrides).

What an endpoint does not answer, or answers with something that is not what vLLM sends, is
left out and its ``sources`` entry says why; nothing here raises for what a server does. Strings
are cut to :data:`VALUE_CHARS`, members to :data:`MAX_MEMBERS`. :func:`served_count` reads a
counter source's served-requests counter (``vllm:request_success_total``) summed over every URL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ledger.errors import FormatError
from ledger.strictjson import read_json

from .bounds import MAX_METRICS_BYTES, MAX_MODELS_BYTES, ReplyRefused, fetch
from .exposition import samples
from .sources import select_source
from .transport import tls_context
from .wave import scrape_metrics

__all__ = ["CACHE_INFO", "CACHE_LABELS", "INFO_BYTES", "read_served", "served_count"]

CACHE_INFO = "vllm:cache_config_info"
# the cache_config_info labels kept (vLLM 0.32 has some forty; these say what serves the prompts)
CACHE_LABELS = ("block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "num_gpu_blocks",
                "num_cpu_blocks", "prefix_caching_hash_algo", "sliding_window")
INFO_BYTES = 4 << 20      # /server_info carries the server's whole config and environment
VALUE_CHARS = 200
MAX_MEMBERS = 64


def _scalar(value: Any) -> Any:
    """A reported value as a record may keep it: a bounded string, a finite number, a boolean, null."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else str(value)[:VALUE_CHARS]
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:VALUE_CHARS]


def _scalars(table: Any) -> dict[str, Any] | None:
    """A mapping's scalar members (nested ones as bounded text), at most :data:`MAX_MEMBERS`."""
    if not isinstance(table, Mapping):
        return None
    return {str(k)[:VALUE_CHARS]: _scalar(v) for k, v in list(table.items())[:MAX_MEMBERS]}


def _table(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _get_json(http: httpx.Client, url: str, timeout_s: float, max_bytes: int, what: str) -> tuple[Any, str]:
    """(the JSON body, "read") or (None, why not)."""
    try:
        reply = fetch(http, "GET", url, deadline_s=timeout_s, max_bytes=max_bytes, what=what)
    except httpx.TimeoutException:
        return None, f"no answer within {timeout_s:g} s"
    except ReplyRefused as exc:
        return None, f"refused: {str(exc)[:VALUE_CHARS]}"
    except (httpx.HTTPError, OSError) as exc:
        return None, f"unreachable: {type(exc).__name__}"
    if reply.status != 200:
        return None, f"HTTP {reply.status}"
    try:
        return read_json(reply.body, what, max_bytes=max_bytes), "read"
    except FormatError as exc:
        return None, f"not JSON: {str(exc)[:VALUE_CHARS]}"


def _models(http: httpx.Client, base: str, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    body, status = _get_json(http, f"{base}/v1/models", timeout_s, MAX_MODELS_BYTES, "the /v1/models reply")
    data = body.get("data") if isinstance(body, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else None
    if first is None:
        return None, status if status != "read" else "lists no model"
    length = first.get("max_model_len")
    return {"id": _scalar(first.get("id")), "root": _scalar(first.get("root")),
            "max_model_len": length if type(length) is int and 1 <= length <= 1 << 31 else None}, "read"


def _cache_info(http: httpx.Client, urls: Sequence[str], timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    status = "no metrics URL"
    for url in urls:
        try:
            reply = fetch(http, "GET", url, deadline_s=timeout_s, max_bytes=MAX_METRICS_BYTES, what=f"metrics at {url}")
        except httpx.TimeoutException:
            status = f"no answer within {timeout_s:g} s"
            continue
        except (ReplyRefused, httpx.HTTPError, OSError) as exc:
            status = f"unreadable: {type(exc).__name__}"
            continue
        if reply.status != 200:
            status = f"HTTP {reply.status}"
            continue
        try:
            for name, labels, _value in samples(reply.text):
                if name == CACHE_INFO:
                    return {k: _scalar(labels[k]) for k in CACHE_LABELS if k in labels}, "read"
        except (ValueError, TypeError, IndexError):
            status = "not exposition text"
            continue
        status = f"no {CACHE_INFO} series"
    return None, status


def _server_info(http: httpx.Client, base: str, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    body, status = _get_json(http, f"{base}/server_info?config_format=json", timeout_s, INFO_BYTES,
                             "the /server_info reply")
    config = body.get("vllm_config") if isinstance(body, dict) else None
    if isinstance(config, str):   # an older vLLM's text form: not read
        return None, "vllm_config is text, not JSON"
    if not isinstance(config, Mapping):
        return None, status if status != "read" else "no vllm_config"
    model, cache = (_table(config.get(key)) for key in ("model_config", "cache_config"))
    out: dict[str, Any] = {}
    length = model.get("max_model_len")
    if type(length) is int and 1 <= length <= 1 << 31:
        out["max_model_len"] = length
    for key in ("enable_prefix_caching", "block_size"):
        if key in cache:
            out[key] = _scalar(cache[key])
    if "speculative_config" in config:
        spec = config["speculative_config"]
        out["speculative_config"] = _scalars(spec) if spec is not None else None
    overrides = _scalars(model.get("override_generation_config"))
    if overrides:
        out["override_generation_config"] = overrides
    return out, "read"


def read_served(serving_url: str, metrics_urls: Sequence[str], *, timeout_s: float = 10.0,
                http: httpx.Client | None = None) -> dict[str, Any]:
    """What the server reports (``models``, ``cache_config``, ``server_info``; absent: not reported) and
    ``sources``: endpoint -> ``read`` or why not."""
    base = serving_url.rstrip("/").removesuffix("/v1")
    client = http or httpx.Client(verify=tls_context())   # the process's one TLS context (17 ms each)
    try:
        models, models_status = _models(client, base, timeout_s)
        cache, cache_status = _cache_info(client, metrics_urls, timeout_s)
        info, info_status = _server_info(client, base, timeout_s)
    finally:
        if http is None:
            client.close()
    out: dict[str, Any] = {}
    for key, value in (("models", models), ("cache_config", cache), ("server_info", info)):
        if value:
            out[key] = value
    out["sources"] = {"/v1/models": models_status, "/metrics": cache_status, "/server_info": info_status}
    return out


def served_count(urls: Sequence[str], counter_source: str, *, timeout_s: float = 10.0,
                 http: httpx.Client | None = None) -> tuple[float | None, str | None, str, str]:
    """(the counter summed over every URL, its series, what it counts, why it could not be read).

    ``None`` when the source has no such counter, a URL cannot be read or lacks the series."""
    source = select_source(counter_source)
    series, counts = source.served_series, source.served_counts
    if series is None or not source.scrapes:
        return None, None, counts, f"the {source.label} counter source has no served-requests counter"
    if not urls:
        return None, series, counts, "the site lists no metrics URL"
    client = http or httpx.Client(verify=tls_context())   # the process's one TLS context (17 ms each)
    total = 0.0
    try:
        for url in urls:
            scrape = scrape_metrics(client, url, timeout_s)
            if scrape.snapshot is None:
                return None, series, counts, scrape.problem or f"metrics at {url} unreadable"
            if series not in scrape.snapshot.values:
                return None, series, counts, f"{url} exposes no {series}"
            total += scrape.snapshot.values[series]
    finally:
        if http is None:
            client.close()
    return total, series, counts, ""
