"""Simulator configuration: arms (speculative-decoding behaviour), server facts, faults.

A configuration is a TOML (or JSON) file; every field has a default, so an empty file
is a valid configuration (``runner/sim/default.toml`` shows them all). Loading validates
every field and names the one in error (``FormatError``).

Times in an arm are *model* milliseconds; the server multiplies them by ``time_scale``
(0.01 makes a 512-token request take tens of milliseconds). Fault times are real
seconds (tests set real deadlines).
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ledger.errors import FormatError

__all__ = [
    "FAULT_KINDS",
    "SPEC_SERIES",
    "ArmConfig",
    "SimConfig",
    "config_from_dict",
    "default_config",
    "load_config",
]

# The spec-decode series a simulated vLLM exposes (older versions lack drafts/per_pos).
SPEC_SERIES = ("drafts", "draft_tokens", "accepted", "per_pos")
# Fields a simulated server can be told to ignore (a server that is not vLLM, or an old one).
IGNORABLE_FIELDS = ("ignore_eos", "seed", "priority", "min_tokens", "allowed_token_ids", "return_token_ids")
FAULT_KINDS = ("http_5xx", "stall", "drop", "slow_ttft", "error_frame", "metrics_down", "action_fail",
               "clock_cap_mismatch")


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

    def expected_accepted_per_round(self) -> float:
        """E[accepted] for a full-depth round under prefix acceptance."""
        total, run = 0.0, 1.0
        for p in self.acceptance:
            run *= p
            total += run
        return total


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
    arms: tuple[ArmConfig, ...] = field(default_factory=_default_arms)
    faults: Mapping[str, Any] = field(default_factory=dict)

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
        data["arms"] = {arm.name: arm.to_table() for arm in self.arms}
        data["faults"] = json.loads(json.dumps(dict(self.faults)))
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
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read simulator config {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"simulator config {path}: {exc}") from None
    return config_from_dict(data, where=str(path))


# ---------------------------------------------------------------------- validation

_ARM_FIELDS = {f for f in ArmConfig.__dataclass_fields__ if f != "name"}
_SIM_FIELDS = set(SimConfig.__dataclass_fields__)


def config_from_dict(data: Mapping[str, Any], where: str = "config") -> SimConfig:
    """Validate a parsed configuration; unknown or ill-typed fields are refused by name."""
    if not isinstance(data, Mapping):
        raise FormatError(f"{where}: must be a table")
    unknown = sorted(set(data) - _SIM_FIELDS)
    if unknown:
        raise FormatError(f"{where}: unknown field {unknown[0]!r}")
    base = SimConfig()
    kw: dict[str, Any] = {}
    for name in ("model", "production_arm"):
        if name in data:
            kw[name] = _string(data[name], f"{where}: {name}")
    for name, low in (("seed", 0), ("eos_token_id", 0), ("vocab_size", 4), ("max_model_len", 16),
                      ("engines", 1), ("thermal_cap_mhz", 1)):
        if name in data:
            kw[name] = _integer(data[name], f"{where}: {name}", low)
    for name in ("time_scale",):
        if name in data:
            kw[name] = _number(data[name], f"{where}: {name}", positive=True)
    for name in ("eos_probability", "start_s", "cold_ttft_extra_ms", "start_jitter", "step_jitter"):
        if name in data:
            kw[name] = _number(data[name], f"{where}: {name}")
    if "eos_probability" in kw and kw["eos_probability"] > 1:
        raise FormatError(f"{where}: eos_probability: must be at most 1")
    if "hosts" in data:
        kw["hosts"] = _strings(data["hosts"], f"{where}: hosts", allowed=None, non_empty=True)
    if "spec_metrics" in data:
        kw["spec_metrics"] = _strings(data["spec_metrics"], f"{where}: spec_metrics", allowed=SPEC_SERIES)
    if "ignore_fields" in data:
        kw["ignore_fields"] = _strings(data["ignore_fields"], f"{where}: ignore_fields", allowed=IGNORABLE_FIELDS)
    arms = base.arms
    if "arms" in data:
        table = data["arms"]
        if not isinstance(table, Mapping) or not table:
            raise FormatError(f"{where}: arms: must be a non-empty table of arms")
        arms = tuple(_arm(name, spec, f"{where}: arms.{name}") for name, spec in table.items())
    kw["arms"] = arms
    if "faults" in data:
        from .faults import validate_faults

        kw["faults"] = validate_faults(data["faults"], f"{where}: faults")
    config = SimConfig(**kw)
    if config.eos_token_id >= config.vocab_size:
        raise FormatError(f"{where}: eos_token_id: must be below vocab_size {config.vocab_size}")
    if config.production_arm not in config.arm_names():
        raise FormatError(f"{where}: production_arm: {config.production_arm!r} is not a configured arm")
    return config


def _arm(name: Any, spec: Any, where: str) -> ArmConfig:
    name = _string(name, where)
    if not isinstance(spec, Mapping):
        raise FormatError(f"{where}: must be a table")
    unknown = sorted(set(spec) - _ARM_FIELDS)
    if unknown:
        raise FormatError(f"{where}: unknown field {unknown[0]!r}")
    base = ArmConfig(name)
    kw: dict[str, Any] = {}
    if "k" in spec:
        kw["k"] = _integer(spec["k"], f"{where}.k", 0)
        if kw["k"] > 32:
            raise FormatError(f"{where}.k: at most 32 draft tokens")
    if "acceptance" in spec:
        values = spec["acceptance"]
        if not isinstance(values, list):
            raise FormatError(f"{where}.acceptance: must be a list of probabilities")
        probs = tuple(_number(v, f"{where}.acceptance[{i}]") for i, v in enumerate(values))
        if any(p > 1 for p in probs):
            raise FormatError(f"{where}.acceptance: probabilities must be within [0, 1]")
        kw["acceptance"] = probs
    k = kw.get("k", base.k)
    acceptance = kw.get("acceptance", base.acceptance if k == base.k else None)
    if acceptance is None:
        raise FormatError(f"{where}.acceptance: give {k} acceptance probabilities for k = {k}")
    if len(acceptance) != k:
        raise FormatError(f"{where}.acceptance: has {len(acceptance)} probabilities, k is {k}")
    kw["acceptance"] = acceptance
    for fname in ("step_base_ms", "step_per_token_ms", "ttft_base_ms", "ttft_per_1k_tokens_ms"):
        if fname in spec:
            kw[fname] = _number(spec[fname], f"{where}.{fname}")
    if "clock_cap_mhz" in spec:
        kw["clock_cap_mhz"] = _integer(spec["clock_cap_mhz"], f"{where}.clock_cap_mhz", 1)
    for fname in ("method", "verification", "image"):
        if fname in spec:
            kw[fname] = _string(spec[fname], f"{where}.{fname}")
    if "reported_config" in spec:
        if not isinstance(spec["reported_config"], Mapping):
            raise FormatError(f"{where}.reported_config: must be a table")
        kw["reported_config"] = dict(spec["reported_config"])
    return ArmConfig(name, **kw)


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise FormatError(f"{where}: must be a non-empty string")
    return value


def _integer(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"{where}: must be an integer")
    if value < low:
        raise FormatError(f"{where}: must be at least {low}")
    return value


def _number(value: Any, where: str, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FormatError(f"{where}: must be a finite number")
    if value < 0 or (positive and value == 0):
        raise FormatError(f"{where}: must be {'positive' if positive else 'non-negative'}")
    return float(value)


def _strings(value: Any, where: str, allowed: tuple[str, ...] | None, non_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FormatError(f"{where}: must be a list of strings")
    if non_empty and not value:
        raise FormatError(f"{where}: must not be empty")
    if allowed is not None:
        for v in value:
            if v not in allowed:
                raise FormatError(f"{where}: {v!r} is not one of {', '.join(allowed)}")
    return tuple(value)
