"""Simulator configuration: arms (speculative-decoding behaviour), server facts, faults.

A configuration is a TOML (or JSON) file; every field has a default, so an empty file
is a valid configuration (``runner/sim/default.toml`` shows them all). Loading validates
every field and names the one in error (``FieldError``).

Times in an arm are *model* milliseconds; the server multiplies them by ``time_scale``
(0.01 makes a 512-token request take tens of milliseconds). Fault times are real
seconds (tests set real deadlines).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ledger.errors import FormatError
from ledger.strictfile import read_limited
from ledger.strictjson import read_json
from ledger.stricttoml import MAX_TOML_BYTES, read_toml

from ..fields import Fields

__all__ = [
    "FAULT_KINDS",
    "IGNORABLE_FIELDS",
    "METRICS_FORMATS",
    "REFUSABLE_FIELDS",
    "SCHEDULING_POLICIES",
    "SPEC_SERIES",
    "STEP_MODELS",
    "STREAM_MODES",
    "ArmConfig",
    "SimConfig",
    "config_from_dict",
    "default_config",
    "load_config",
]

# The spec-decode series a simulated vLLM exposes (older versions lack drafts/per_pos).
SPEC_SERIES = ("drafts", "draft_tokens", "accepted", "per_pos")
# Request fields a simulated server can be told to ignore silently (as llama-cpp-python's
# server drops the fields it does not declare) or to refuse with a 400 naming the field (as
# vLLM V0 refuses a priority without priority scheduling). ``stream_options.include_usage``
# ignores only that member (no usage chunk); ``max_tokens`` covers ``max_completion_tokens``,
# ``repetition_penalty`` llama-cpp-python's ``repeat_penalty`` too (the knob, under either name).
IGNORABLE_FIELDS = ("ignore_eos", "seed", "priority", "min_tokens", "allowed_token_ids", "return_token_ids",
                    "max_tokens", "cache_salt", "stop_token_ids", "stream_options", "stream_options.include_usage",
                    "logit_bias", "stop", "structured_outputs", "guided_json", "response_format",
                    "repetition_penalty", "presence_penalty", "frequency_penalty", "reasoning_effort", "top_k",
                    "min_p")
REFUSABLE_FIELDS = IGNORABLE_FIELDS
# How a simulated server streams: one chunk per engine step (vLLM), or one per token (llama.cpp).
STREAM_MODES = ("step", "token")
# How steps are timed: each request alone (the per-request model), or by the engine's batch (runner/sim/batch.py).
STEP_MODELS = ("request", "batch")
# What its /metrics serves: vLLM's series, the native llama.cpp server's, or nothing (HTTP 404).
METRICS_FORMATS = ("vllm", "llamacpp", "none")
# vLLM's --scheduling-policy values (runner/sim/scheduler.py)
SCHEDULING_POLICIES = ("fcfs", "priority")
FAULT_KINDS = ("http_5xx", "stall", "drop", "slow_ttft", "error_frame", "metrics_down", "action_fail",
               "clock_cap_mismatch", "greedy_diverge", "greedy_lossy", "ignore_schema", "ignore_stop",
               "hang_after_cancel", "ignore_min_tokens", "warmup_unserved")


@dataclass(frozen=True)
class ArmConfig:
    """One server configuration (an arm): its speculative decoding and its timing.

    Each engine step verifies ``k`` draft tokens; draft position ``i`` is accepted with
    probability ``acceptance[i]`` given that every earlier position was (prefix
    acceptance, as vLLM counts it), so one step emits ``1 + accepted`` tokens.
    A step takes ``step_base_ms + step_per_token_ms * (drafts + 1)`` model ms (deeper
    drafts cost more per round); the first token takes
    ``ttft_base_ms + ttft_per_1k_tokens_ms * prompt_tokens / 1000``.
    ``k = 0`` is an arm without speculative decoding (its spec series are absent).
    """

    name: str
    k: int = 5
    acceptance: tuple[float, ...] = (0.8, 0.7, 0.6, 0.5, 0.4)
    step_base_ms: float = 20.0
    step_per_token_ms: float = 0.5
    ttft_base_ms: float = 40.0
    ttft_per_1k_tokens_ms: float = 12.0
    clock_cap_mhz: int = 2300
    method: str = "draft_model"
    verification: str = "standard"
    image: str = "sim/vllm-openai:v0.12.0"
    # What the host reports as this arm's speculative config (e.g. the plan's declared
    # config, so that a simulated start is checked like a real one); None: derived.
    reported_config: Mapping[str, Any] | None = field(default=None, hash=False)
    # What the host reports as this arm's config_digest (e.g. the plan's declared digest);
    # None: the digest of this configuration.
    reported_digest: str | None = None
    # Host identities this arm's starts report (worker_identity, markov_identity, experiment_commit,
    # worker_tree); None: none reported.
    reported_identities: Mapping[str, str] | None = field(default=None, hash=False)
    # The batch-aware step model (``step_model = "batch"``; docs/sim.md): the cost of the KV a step reads,
    # the scheduler's budgets, and acceptance drawn per request (rate ~ Beta(rate, concentration)), per family.
    step_per_kv_token_us: float = 0.0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    kv_cache_blocks: int = 0                     # 0: the KV cache never runs short
    acceptance_rate: float | None = None         # None: the per-position ``acceptance`` list
    acceptance_concentration: float = 0.0        # 0: every request has the rate itself
    families: Mapping[str, Mapping[str, float]] | None = field(default=None, hash=False)
    # The share of decode steps that draft (1: every step, as vLLM's draft models do; llama.cpp's prompt
    # lookup drafts only where the context repeats itself): a step that does not draft schedules one token.
    draft_rate: float = 1.0
    # A reasoning model behind vLLM's reasoning parser: the first ``reasoning_tokens`` generated tokens of a
    # chat completion stream as ``delta.reasoning`` (the answer's as ``delta.content``); 0: none.
    reasoning_tokens: int = 0

    @property
    def speculative(self) -> bool:
        return self.k > 0

    def speculative_config(self) -> dict[str, Any] | None:
        """The arm's speculative config as a host reports it (``None`` without spec decode)."""
        if not self.speculative:
            return None
        if self.reported_config is not None:
            return json.loads(json.dumps(dict(self.reported_config)))
        return {"method": self.method, "num_speculative_tokens": self.k, "verification": self.verification,
                "acceptance": list(self.acceptance)}

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["acceptance"] = list(self.acceptance)
        for name, default in _BATCH_DEFAULTS.items():   # absent when default: old configs keep their digests
            if data.get(name) == default:
                data.pop(name, None)
        if data.get("families") is not None:
            data["families"] = {f: dict(v) for f, v in (self.families or {}).items()}
        if data.get("reported_digest") is None:
            data.pop("reported_digest", None)
        if data.get("reported_identities") is None:
            data.pop("reported_identities", None)
        else:
            data["reported_identities"] = dict(self.reported_identities or {})
        if data.get("reported_config") is None:
            data.pop("reported_config", None)
        else:
            data["reported_config"] = json.loads(json.dumps(dict(self.reported_config or {})))
        return data

    def to_table(self) -> dict[str, Any]:
        """The arm as a config table (``[arms.<name>]``, without the name)."""
        return {k: v for k, v in self.to_dict().items() if k != "name"}

    def digest(self) -> str:
        """sha256 of the arm's configuration (sorted, compact JSON): its config identity."""
        return hashlib.sha256(_compact(self.to_dict())).hexdigest()

    def reported_config_digest(self) -> str:
        """The config_digest the host reports for this arm."""
        return self.reported_digest or self.digest()

    def expected_accepted_per_round(self) -> float:
        """E[accepted] for a full-depth round under prefix acceptance."""
        total, run = 0.0, 1.0
        for p in self.acceptance:
            run *= p
            total += run
        return total


_BATCH_DEFAULTS: dict[str, Any] = {"step_per_kv_token_us": 0.0, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
                                   "kv_cache_blocks": 0, "acceptance_rate": None, "acceptance_concentration": 0.0,
                                   "families": None, "draft_rate": 1.0, "reasoning_tokens": 0}


def _default_arms() -> tuple[ArmConfig, ...]:
    return (
        ArmConfig("production"),
        ArmConfig("A", acceptance=(0.8, 0.7, 0.6, 0.5, 0.4)),
        ArmConfig("B", acceptance=(0.84, 0.74, 0.64, 0.54, 0.44), step_per_token_ms=0.56),
        ArmConfig("P"),
        ArmConfig("off", k=0, acceptance=(), step_base_ms=18.0),
    )


@dataclass(frozen=True)
class SimConfig:
    """The whole simulated host: model, vocabulary, engines, arms, start-up, faults."""

    model: str = "sim/llama-3.1-8b-spec"
    seed: int = 0
    time_scale: float = 1.0
    eos_token_id: int = 1
    vocab_size: int = 32000
    max_model_len: int = 200_000
    engines: int = 1
    production_arm: str = "production"
    hosts: tuple[str, ...] = ("sim-head",)
    spec_metrics: tuple[str, ...] = SPEC_SERIES
    eos_probability: float = 0.002
    start_s: float = 20.0
    cold_ttft_extra_ms: float = 400.0
    start_jitter: float = 0.003
    step_jitter: float = 0.02
    thermal_cap_mhz: int = 2000
    ignore_fields: tuple[str, ...] = ()
    refuse_fields: tuple[str, ...] = ()
    repetition_penalty: float = 1.0    # the server's own default (llama-cpp-python's repeat_penalty: 1.1)
    arms: tuple[ArmConfig, ...] = field(default_factory=_default_arms)
    faults: Mapping[str, Any] = field(default_factory=dict)
    stream_mode: str = "step"          # STREAM_MODES
    token_burst_ms: float = 0.5        # "token" mode: model ms between the tokens of one engine step
    metrics_format: str = "vllm"       # METRICS_FORMATS
    step_model: str = "request"        # STEP_MODELS
    scheduling_policy: str = "priority"  # the waiting queue's order: "fcfs" (vLLM's default) or "priority"
    max_num_batched_tokens: int = 0      # the prefill budget beside which a waiting request must fit (0: none)
    dev_mode: bool = True              # serve vLLM's development-mode /server_info (VLLM_SERVER_DEV_MODE=1)
    enable_prefix_caching: bool = True  # vLLM's --enable-prefix-caching (off: no prompt comes from the cache)

    def arm(self, name: str) -> ArmConfig:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise FormatError(f"unknown arm {name!r}; configured arms: {', '.join(a.name for a in self.arms)}")

    def arm_names(self) -> list[str]:
        return [arm.name for arm in self.arms]

    def with_(self, **changes: Any) -> SimConfig:
        """A copy with fields changed (validated again)."""
        return config_from_dict({**self.to_dict(), **_plain(changes)})

    def with_arm(self, name: str, **changes: Any) -> SimConfig:
        """A copy with one arm's fields changed (the arm is added when absent)."""
        arms = [a for a in self.arms if a.name != name]
        base = next((a for a in self.arms if a.name == name), ArmConfig(name))
        arms.append(replace(base, **changes))
        data = self.to_dict()
        data["arms"] = {a.name: a.to_table() for a in arms}
        return config_from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form that :func:`config_from_dict` reads back unchanged."""
        data = {name: value for name, value in asdict(self).items() if name not in ("arms", "faults")}
        data["hosts"] = list(self.hosts)
        data["spec_metrics"] = list(self.spec_metrics)
        data["ignore_fields"] = list(self.ignore_fields)
        data["refuse_fields"] = list(self.refuse_fields)
        data["arms"] = {arm.name: arm.to_table() for arm in self.arms}
        data["faults"] = json.loads(json.dumps(dict(self.faults)))
        if data.get("step_model") == "request":
            data.pop("step_model")
        return data


def _plain(changes: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if isinstance(value, tuple):
            out[key] = list(value)
        elif key == "arms" and not isinstance(value, Mapping):
            out[key] = {a.name: a.to_table() for a in value}
        else:
            out[key] = value
    return out


def _compact(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def default_config() -> SimConfig:
    """Every default (the same as ``runner/sim/default.toml``)."""
    return SimConfig()


def load_config(path: str | Path) -> SimConfig:
    """Read a TOML (or ``.json``) configuration file; ``FormatError`` names the bad field."""
    return config_from_dict(read_config_table(path), where=str(path))


def read_config_table(path: str | Path) -> dict[str, Any]:
    """A configuration file's table of settings, read as hostile input (bounded in size and
    nesting, duplicate members refused: one ``FormatError`` line otherwise), not yet validated."""
    path = Path(path)
    raw = read_limited(path, "simulator config", MAX_TOML_BYTES)
    what = f"simulator config {path}"
    data = read_json(raw, what, max_bytes=MAX_TOML_BYTES) if path.suffix == ".json" else read_toml(raw, what)
    if not isinstance(data, dict):
        raise FormatError(f"{what}: expected a table of settings")
    return data


# ---------------------------------------------------------------------- validation

_ARM_FIELDS = {f for f in ArmConfig.__dataclass_fields__ if f != "name"}
_SIM_FIELDS = set(SimConfig.__dataclass_fields__)


def config_from_dict(data: Mapping[str, Any], where: str = "config") -> SimConfig:
    """Validate a parsed configuration; unknown or ill-typed fields are refused by name (``FieldError``)."""
    f = Fields(data, "", source=where)
    kw: dict[str, Any] = {}
    for name in ("model", "production_arm"):
        if f.has(name):
            kw[name] = f.string(name, nonempty=True)
    for name, low in (("seed", 0), ("eos_token_id", 0), ("vocab_size", 4), ("max_model_len", 16),
                      ("engines", 1), ("thermal_cap_mhz", 1)):
        if f.has(name):
            kw[name] = f.integer(name, low=low)
    if f.has("time_scale"):
        kw["time_scale"] = f.number("time_scale", low=0, low_open=True)
    for name in ("eos_probability", "start_s", "cold_ttft_extra_ms", "start_jitter", "step_jitter"):
        if f.has(name):
            kw[name] = f.number(name, low=0, high=1 if name == "eos_probability" else None)
    if f.has("hosts"):
        kw["hosts"] = f.strings("hosts", nonempty=True)
        if not kw["hosts"]:
            raise f.fail("hosts", "must not be empty")
    if f.has("spec_metrics"):
        kw["spec_metrics"] = f.strings("spec_metrics", choices=SPEC_SERIES)
    if f.has("repetition_penalty"):
        kw["repetition_penalty"] = f.number("repetition_penalty", low=0, low_open=True)
    if f.has("ignore_fields"):
        kw["ignore_fields"] = f.strings("ignore_fields", choices=IGNORABLE_FIELDS)
    if f.has("refuse_fields"):
        kw["refuse_fields"] = f.strings("refuse_fields", choices=REFUSABLE_FIELDS)
    kw["arms"] = SimConfig().arms
    if f.has("arms"):
        table = f.table("arms")
        if not table.data:
            raise f.fail("arms", "must be a non-empty table of arms")
        kw["arms"] = tuple(_arm(str(name), table.table(name)) for name in table.data)
        table.done()
    if f.has("stream_mode"):
        kw["stream_mode"] = f.string("stream_mode", choices=STREAM_MODES)
    if f.has("token_burst_ms"):
        kw["token_burst_ms"] = f.number("token_burst_ms", low=0)
    if f.has("metrics_format"):
        kw["metrics_format"] = f.string("metrics_format", choices=METRICS_FORMATS)
    if f.has("step_model"):
        kw["step_model"] = f.string("step_model", choices=STEP_MODELS)
    if f.has("scheduling_policy"):
        kw["scheduling_policy"] = f.string("scheduling_policy", choices=SCHEDULING_POLICIES)
    if f.has("max_num_batched_tokens"):
        kw["max_num_batched_tokens"] = f.integer("max_num_batched_tokens", low=0)
    if f.has("dev_mode"):
        kw["dev_mode"] = f.boolean("dev_mode")
    if f.has("enable_prefix_caching"):
        kw["enable_prefix_caching"] = f.boolean("enable_prefix_caching")
    if f.has("faults"):
        from .faults import validate_faults

        kw["faults"] = validate_faults(f.raw("faults"), "faults", source=where)
    f.done(also=_SIM_FIELDS)
    config = SimConfig(**kw)
    if config.eos_token_id >= config.vocab_size:
        raise f.fail("eos_token_id", f"must be below vocab_size {config.vocab_size}")
    if config.production_arm not in config.arm_names():
        raise f.fail("production_arm", f"{config.production_arm!r} is not a configured arm")
    return config


def _arm(name: str, f: Fields) -> ArmConfig:
    if not name:
        raise f.fail_here("an arm needs a non-empty name")
    base = ArmConfig(name)
    kw: dict[str, Any] = {}
    if f.has("k"):
        kw["k"] = f.integer("k", low=0, high=32)
    if f.has("acceptance"):
        kw["acceptance"] = f.numbers("acceptance", low=0)
        if any(p > 1 for p in kw["acceptance"]):
            raise f.fail("acceptance", "probabilities must be within [0, 1]")
    k = kw.get("k", base.k)
    acceptance = kw.get("acceptance", base.acceptance if k == base.k else None)
    if acceptance is None:
        raise f.fail("acceptance", f"give {k} acceptance probabilities for k = {k}")
    if len(acceptance) != k:
        raise f.fail("acceptance", f"has {len(acceptance)} probabilities, k is {k}")
    kw["acceptance"] = acceptance
    for fname in ("step_base_ms", "step_per_token_ms", "ttft_base_ms", "ttft_per_1k_tokens_ms"):
        if f.has(fname):
            kw[fname] = f.number(fname, low=0)
    if f.has("clock_cap_mhz"):
        kw["clock_cap_mhz"] = f.integer("clock_cap_mhz", low=1)
    if f.has("step_per_kv_token_us"):
        kw["step_per_kv_token_us"] = f.number("step_per_kv_token_us", low=0)
    for fname, low in (("max_num_batched_tokens", 1), ("max_num_seqs", 1), ("kv_cache_blocks", 0)):
        if f.has(fname):
            kw[fname] = f.integer(fname, low=low)
    if f.has("acceptance_rate"):
        kw["acceptance_rate"] = f.number("acceptance_rate", low=0, high=1)
    if f.has("acceptance_concentration"):
        kw["acceptance_concentration"] = f.number("acceptance_concentration", low=0)
    if f.has("draft_rate"):
        kw["draft_rate"] = f.number("draft_rate", low=0, high=1)
    if f.has("reasoning_tokens"):
        kw["reasoning_tokens"] = f.integer("reasoning_tokens", low=0)
    if f.has("families"):
        table = f.table("families")
        families: dict[str, dict[str, float]] = {}
        for family in table.data:
            entry = table.table(family)
            families[str(family)] = {"rate": entry.number("rate", low=0, high=1),
                                     "concentration": entry.number("concentration", low=0)
                                     if entry.has("concentration") else 0.0}
            entry.done()
        table.done()
        kw["families"] = families
    for fname in ("method", "verification", "image"):
        if f.has(fname):
            kw[fname] = f.string(fname, nonempty=True)
    if f.has("reported_config"):
        kw["reported_config"] = dict(f.table("reported_config").data)
    if f.has("reported_digest"):
        kw["reported_digest"] = f.string("reported_digest", pattern=re.compile(r"[0-9a-f]{64}"),
                                         what="a sha256 (64 lowercase hex)")
    if f.has("reported_identities"):
        table = f.table("reported_identities")
        kw["reported_identities"] = {key: table.string(key, nonempty=True) for key in table.data}
    f.done(also=_ARM_FIELDS)
    return ArmConfig(name, **kw)
