"""The simulator held to real vLLM: the same probes against both, reduced to what must agree.

Each probe sends a few tiny requests to a server without speculative decoding (``plain``)
or with it (``spec``) and reduces the answers to *features*: status codes, error bodies'
type/param/code, finish and stop reasons, which members a reply, a choice, a chunk and
usage carry, how streamed tokens are chunked, and every ``/metrics`` family with its
type and label names. Texts, ids, times and token counts (the simulator's model is not
SmolLM2) are left out, except where a feature is a relation (``max_tokens`` honoured,
one token per chunk).

``observe(urls)`` gives ``{"probe.feature": value}``; ``differences(sim, real)`` the keys
on which two observations disagree. The simulator's documented deviations from vLLM 0.32
are the rows of the table under "Deviations from vLLM 0.32" in ``docs/sim.md``, each
naming its key; ``tests/sim/test_conformance.py`` checks that the differences are exactly
those (a deviation that disappears, or a new one, fails). The real answers are recorded
in ``tests/sim/fixtures/vllm-0.32-observations.json`` by ``tests/real/test_vllm_conformance.py``'s
recording run (``TALLY_RECORD_CONFORMANCE=1``), and checked against the live server
wherever vLLM is installed.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from runner.sim.config import SimConfig

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm-0.32-observations.json"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "sim.md"
DEVIATIONS_HEADING = "## Deviations from vLLM 0.32"

MODEL = "smollm2"
EOS = 2
VOCAB = 49152
MAX_MODEL_LEN = 2048
K = 4                      # the spec server's num_speculative_tokens
COUNT = "Count from one to one hundred: one, two, three,"
REPEAT = " ".join(["red green blue"] * 5) + " red"   # n-gram speculation finds its drafts in it
Features = dict[str, Any]


@dataclass(frozen=True)
class Conn:
    client: httpx.Client
    urls: dict[str, str]   # "plain" | "spec" -> base URL

    def post(self, server: str, path: str, body: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.client.post(self.urls[server] + path, content=content,
                                headers={"content-type": "application/json"})

    def completion(self, server: str, **body: Any) -> httpx.Response:
        return self.post(server, "/v1/completions", {"model": MODEL, "prompt": COUNT, **body})

    def stream(self, server: str, path: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
        """(status, frames) of a streamed request: each ``data:`` frame parsed (``"[DONE]"`` kept)."""
        frames: list[Any] = []
        with self.client.stream("POST", self.urls[server] + path, json={"model": MODEL, **body, "stream": True}) as r:
            if r.status_code != 200:
                r.read()
                return r.status_code, [r.json()]
            for line in r.iter_lines():
                if line.startswith("data: "):
                    data = line[len("data: "):]
                    frames.append(data if data == "[DONE]" else json.loads(data))
        return 200, frames


# ---------------------------------------------------------------------- reductions


def keys(value: Any) -> list[str] | None:
    return sorted(value) if isinstance(value, dict) else None


def error_shape(response: httpx.Response) -> Features:
    """Status and the error body's members (its message is text; only a few probes keep it)."""
    try:
        body = response.json()
    except ValueError:
        return {"status": response.status_code, "body": "not JSON"}
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return {"status": response.status_code, "body_keys": keys(body)}
    return {"status": response.status_code, "body_keys": keys(body), "error_keys": keys(error),
            "type": error.get("type"), "param": error.get("param"), "code": error.get("code")}


def metric_families(text: str) -> Features:
    """Every family: ``TYPE [label names]`` (``le`` and ``quantile`` left out), from the exposition's lines."""
    types: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            labels.setdefault(name, set())
        elif line and not line.startswith("#"):
            match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?", line)
            if match is None:
                continue
            sample = match.group(1)
            names = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', match.group(3) or "")) - {"le", "quantile"}
            family = _family_of(sample, types)
            if family is not None:
                labels[family] |= names
    return {name: f"{kind} [{','.join(sorted(labels[name]))}]" for name, kind in types.items()}


def _family_of(sample: str, types: dict[str, str]) -> str | None:
    if sample in types:
        return sample
    for suffix in ("_total", "_bucket", "_sum", "_count", "_info"):
        if sample.endswith(suffix) and sample[: -len(suffix)] in types:
            return sample[: -len(suffix)]
    return None


def positions(text: str) -> list[str]:
    return sorted(set(re.findall(r'spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"', text)),
                  key=int)


# ---------------------------------------------------------------------- the probes


def probe_endpoints(c: Conn) -> Iterator[tuple[str, Any]]:
    health = c.client.get(c.urls["plain"] + "/health")
    yield "health.status", health.status_code
    yield "health.body", health.text
    models = c.client.get(c.urls["plain"] + "/v1/models").json()
    yield "models.keys", keys(models)
    yield "models.card_keys", keys(models["data"][0])
    yield "models.max_model_len", models["data"][0].get("max_model_len")
    yield "version.keys", keys(c.client.get(c.urls["plain"] + "/version").json())
    metrics = c.client.get(c.urls["plain"] + "/metrics")
    yield "metrics.content_type", metrics.headers.get("content-type")
    missing = c.client.get(c.urls["plain"] + "/v1/no-such-endpoint")
    yield "unknown_path.status", missing.status_code
    yield "unknown_path.body_keys", keys(missing.json())


def probe_metrics(c: Conn) -> Iterator[tuple[str, Any]]:
    for server in ("plain", "spec"):
        text = c.client.get(c.urls[server] + "/metrics").text
        for family, shape in metric_families(text).items():
            yield f"{server}.{family}", shape
        yield f"{server}.positions", positions(text)


def probe_errors(c: Conn) -> Iterator[tuple[str, Any]]:
    cases: dict[str, tuple[str, Any]] = {
        "invalid_json": ("plain", b"{not json"),
        "not_an_object": ("plain", [1, 2]),
        "no_prompt": ("plain", {"model": MODEL, "max_tokens": 4}),
        "max_tokens_zero": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 0}),
        "max_tokens_string": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": "four"}),
        "unknown_model": ("plain", {"model": "no-such-model", "prompt": COUNT, "max_tokens": 4}),
        "context_overflow": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": MAX_MODEL_LEN + 100}),
        "stream_options_without_stream": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 4,
                                                    "stream_options": {"include_usage": True}}),
        "priority_object": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 4, "priority": {"a": 1}}),
        "cache_salt_object": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 4, "cache_salt": {"a": 1}}),
        "cache_salt_empty": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 4, "cache_salt": ""}),
        "allowed_empty": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 4, "allowed_token_ids": []}),
        "allowed_out_of_vocab": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 4,
                                           "allowed_token_ids": [VOCAB + 7]}),
        "logit_bias_out_of_vocab": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 4,
                                              "logit_bias": {str(VOCAB + 7): 5}}),
        "n_two": ("plain", {"model": MODEL, "prompt": COUNT, "max_tokens": 2, "n": 2}),
        "logit_bias_spec": ("spec", {"model": MODEL, "prompt": COUNT, "max_tokens": 4, "logit_bias": {str(EOS): 100}}),
        "min_p_spec": ("spec", {"model": MODEL, "prompt": COUNT, "max_tokens": 4, "min_p": 0.5}),
    }
    for name, (server, body) in cases.items():
        response = c.post(server, "/v1/completions", body)
        for feature, value in error_shape(response).items():
            yield f"{name}.{feature}", value
        if name in ("logit_bias_spec", "min_p_spec"):   # the rehearsal's control reads this message
            yield f"{name}.message", (response.json().get("error") or {}).get("message")
    status, frames = c.stream("spec", "/v1/completions", {"prompt": COUNT, "max_tokens": 4,
                                                          "logit_bias": {str(EOS): 100}})
    yield "logit_bias_spec_stream.status", status
    yield "logit_bias_spec_stream.frames", [keys(f) if isinstance(f, dict) else f for f in frames]


def probe_finish(c: Conn) -> Iterator[tuple[str, Any]]:
    def ending(body: dict[str, Any]) -> tuple[Any, Any, Any]:
        choice = body["choices"][0]
        return choice.get("finish_reason"), choice.get("stop_reason"), body["usage"]["completion_tokens"]

    reason, stop, tokens = ending(c.completion("plain", max_tokens=4, temperature=0).json())
    yield "length", [reason, stop, tokens == 4]
    reason, stop, tokens = ending(c.completion("plain", max_tokens=4, allowed_token_ids=[EOS]).json())
    yield "eos_forced", [reason, stop, tokens]
    reason, stop, tokens = ending(c.completion("plain", max_tokens=4, allowed_token_ids=[EOS],
                                               ignore_eos=True).json())
    yield "ignore_eos", [reason, stop, tokens == 4]
    reason, stop, tokens = ending(c.completion("plain", max_tokens=4, allowed_token_ids=[EOS],
                                               min_tokens=3).json())
    yield "min_tokens", [reason, stop, tokens >= 3]
    reason, stop, tokens = ending(c.completion("plain", max_tokens=4, allowed_token_ids=[1000],
                                               stop_token_ids=[1000]).json())
    yield "stop_token_id", [reason, stop, tokens]
    reference = c.completion("plain", max_tokens=8, temperature=0).json()["choices"][0]["text"]
    word = reference.split()[len(reference.split()) // 2]
    body = c.completion("plain", max_tokens=8, temperature=0, stop=[word]).json()
    reason, stop, _ = ending(body)
    yield "stop_string", [reason, stop == word, body["choices"][0]["text"] == reference[: reference.find(word)]]


def probe_fields(c: Conn) -> Iterator[tuple[str, Any]]:
    body = c.completion("plain", max_tokens=4, temperature=0, return_token_ids=True).json()
    choice = body["choices"][0]
    yield "completion.keys", keys(body)
    yield "completion.choice_keys", keys(choice)
    yield "completion.usage_keys", keys(body["usage"])
    yield "completion.object", body.get("object")
    yield "completion.token_ids", [len(choice["token_ids"]) == body["usage"]["completion_tokens"],
                                   len(choice["prompt_token_ids"]) == body["usage"]["prompt_tokens"]]
    plain = c.completion("plain", max_tokens=4, temperature=0).json()["choices"][0]
    yield "completion.without_token_ids", [plain.get("token_ids"), plain.get("prompt_token_ids")]
    chat = c.post("plain", "/v1/chat/completions", {"model": MODEL, "max_tokens": 3, "temperature": 0,
                                                    "return_token_ids": True,
                                                    "messages": [{"role": "user", "content": "Count to five"}]}).json()
    yield "chat.keys", keys(chat)
    yield "chat.choice_keys", keys(chat["choices"][0])
    yield "chat.message_keys", keys(chat["choices"][0]["message"])
    yield "chat.object", chat.get("object")
    yield "chat.token_ids", [isinstance(chat["choices"][0].get("token_ids"), list),
                             isinstance(chat.get("prompt_token_ids"), list)]


def probe_streams(c: Conn) -> Iterator[tuple[str, Any]]:
    body = {"prompt": REPEAT, "max_tokens": 12, "temperature": 0, "return_token_ids": True,
            "stream_options": {"include_usage": True}}
    for server in ("plain", "spec"):
        _, frames = c.stream(server, "/v1/completions", body)
        chunks = [f for f in frames if isinstance(f, dict) and f.get("choices")]
        usage = [f for f in frames if isinstance(f, dict) and not f.get("choices")]
        sizes = [len(f["choices"][0]["token_ids"]) for f in chunks]
        yield f"{server}.completion.first_keys", keys(chunks[0])
        yield f"{server}.completion.choice_keys", keys(chunks[0]["choices"][0])
        # Only the first chunk carries the prompt's ids; on a loaded host the whole stream can arrive as
        # one chunk (the output collector merges unsent steps), so this reads "no later chunk repeats them".
        yield f"{server}.completion.later_prompt_token_ids", all(f["choices"][0].get("prompt_token_ids") is None
                                                                 for f in chunks[1:])
        yield f"{server}.completion.usage_chunk_keys", [keys(f) for f in usage]
        yield f"{server}.completion.usage_keys", keys(usage[0].get("usage")) if usage else None
        yield f"{server}.completion.done", frames[-1] == "[DONE]"
        yield f"{server}.completion.finish", [f["choices"][0]["finish_reason"] for f in chunks[-1:]]
        yield f"{server}.completion.tokens_sum", sum(sizes) == usage[0]["usage"]["completion_tokens"]
        yield f"{server}.completion.first_chunk_tokens", sizes[0]
        yield f"{server}.completion.tokens_per_chunk", ("one" if max(sizes) == 1 else
                                                       "at most k+1" if max(sizes) <= K + 1 else "more")
        yield f"{server}.completion.empty_chunks", sum(1 for s in sizes if s == 0)
    _, frames = c.stream("plain", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Count to five"}],
                                                            "max_tokens": 3, "temperature": 0,
                                                            "return_token_ids": True,
                                                            "stream_options": {"include_usage": True}})
    chunks = [f for f in frames if isinstance(f, dict) and f.get("choices")]
    yield "chat.first_keys", keys(chunks[0])
    yield "chat.first_delta", chunks[0]["choices"][0]["delta"]
    yield "chat.first_choice_keys", keys(chunks[0]["choices"][0])
    yield "chat.middle_choice_keys", keys(chunks[1]["choices"][0])
    yield "chat.last_choice_keys", keys(chunks[-1]["choices"][0])
    yield "chat.usage_chunk_keys", [keys(f) for f in frames if isinstance(f, dict) and not f.get("choices")]


def _counter(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, flags=re.M))


def probe_counters(c: Conn) -> Iterator[tuple[str, Any]]:
    """Drafts accepted past max_tokens: vLLM counts every draft a step accepted, also those the request
    then discards, so Δaccepted exceeds the delivered drafts (Δgeneration - first tokens - Δdecode steps)."""
    names = ("vllm:spec_decode_num_accepted_tokens_total", "vllm:generation_tokens_total",
             "vllm:inter_token_latency_seconds_count")
    before = c.client.get(c.urls["spec"] + "/metrics").text
    lengths = (7, 8, 9, 16)   # a 4-deep step after the first token lands beyond some of these
    for n in lengths:
        c.completion("spec", prompt=REPEAT, max_tokens=n, temperature=0, ignore_eos=True)
    after = c.client.get(c.urls["spec"] + "/metrics").text
    accepted, generated, steps = (_counter(after, name) - _counter(before, name) for name in names)
    delivered = generated - len(lengths) - steps
    yield "spec.generated_is_delivered", generated == sum(lengths)
    yield "spec.accepted_counted_past_max_tokens", accepted > delivered >= 0


PROBES: dict[str, Callable[[Conn], Iterator[tuple[str, Any]]]] = {
    "endpoints": probe_endpoints, "metrics": probe_metrics, "errors": probe_errors, "finish": probe_finish,
    "fields": probe_fields, "streams": probe_streams, "counters": probe_counters,
}


def observe(urls: dict[str, str], timeout: float = 120.0) -> Features:
    """Every probe's features, ``{"probe.feature": value}`` (values JSON-like)."""
    out: Features = {}
    with httpx.Client(timeout=timeout) as client:
        conn = Conn(client, urls)
        for name, probe in PROBES.items():
            for feature, value in probe(conn):
                out[f"{name}.{feature}"] = json.loads(json.dumps(value))
    return out


TRAFFIC_DEPENDENT = ("metrics.*.http_*",)
"""Features that depend on the traffic a server has seen (the HTTP instrumentation's label sets appear as
handlers are hit): left out when a live server is compared with its recorded observations."""
LOAD_DEPENDENT = ("*.completion.tokens_per_chunk", "*.completion.first_chunk_tokens")
"""Features that depend on how busy the server's host is: a stream's tokens per chunk grow past k+1, and
its first chunk carries more than the prefill's one token, on a loaded host (vLLM's output collector
merges the steps a stream has not sent yet into one chunk, docs/measure.md; both seen on the 2-core CI
host during a full test run: a first chunk of 4 tokens from the ngram server). Left out when a live
server is compared, with its recorded observations and with the simulator (which is held to the
recorded value)."""


def steady(diffs: set[str], patterns: Iterable[str] = TRAFFIC_DEPENDENT + LOAD_DEPENDENT) -> set[str]:
    """The differences no pattern of ``patterns`` covers."""
    patterns = tuple(patterns)
    return {key for key in diffs if not any(fnmatch.fnmatchcase(key, p) for p in patterns)}


def differences(sim: Features, real: Features) -> set[str]:
    return {key for key in sim.keys() | real.keys() if sim.get(key, "absent") != real.get(key, "absent")}


def unexplained(diffs: set[str], patterns: Iterable[str]) -> tuple[set[str], set[str]]:
    """(differences no pattern covers, patterns that cover no difference): both must be empty."""
    patterns = tuple(patterns)
    unused = {p for p in patterns if not any(fnmatch.fnmatchcase(key, p) for key in diffs)}
    return steady(diffs, patterns), unused


def recorded() -> Features:
    return dict(json.loads(FIXTURE.read_text())["observations"])


def documented_deviations(text: str | None = None) -> dict[str, str]:
    """The deviation table of docs/sim.md: key pattern (``fnmatch``) -> what differs."""
    text = DOCS.read_text() if text is None else text
    section = text.split(DEVIATIONS_HEADING, 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|\s*([^|]*)\|", line)
        if match:
            out[match.group(1)] = match.group(2).strip()
    return out


def sim_configs() -> tuple[SimConfig, SimConfig]:
    """The simulator set up as the real pair is: SmolLM2's name, EOS, vocabulary and context; vLLM's default
    scheduling (fcfs, no development-mode /server_info) and the CPU server's 2048-token prefill budget; k = 0
    and 4."""
    base = SimConfig().with_(model=MODEL, eos_token_id=EOS, vocab_size=VOCAB, max_model_len=MAX_MODEL_LEN,
                             time_scale=0.01, scheduling_policy="fcfs", dev_mode=False,
                             max_num_batched_tokens=2048)
    plain = base.with_arm(base.production_arm, k=0, acceptance=())
    spec = base.with_arm(base.production_arm, k=K, acceptance=(0.9, 0.8, 0.7, 0.6))
    return plain, spec
