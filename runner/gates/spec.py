"""The standard_spec gate (``docs/gates.md``): a start's speculative config is standard verification.

Standard verification means lossless rejection sampling against the target: the config
names a ``method`` and a positive ``num_speculative_tokens``; an acceptance method, when
given, is ``rejection_sampler``; ``verification``, when given, is ``standard``; and no
lossy/typical-acceptance knob (posterior thresholds, relaxed acceptance) is present.
When the plan declares the start's arm config, the observed config must also equal it
(same JCS SHA-256).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.canonical import canonical
from ledger.errors import FormatError

from ..vocabulary import GateVerdict
from .gate import Finding

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..plan.model import Plan

__all__ = ["LOSSY_KEYS", "SpecResult", "check_standard_spec", "spec_sha256"]

ACCEPTANCE_KEYS = ("acceptance_method", "spec_decoding_acceptance_method")
LOSSY_KEYS = (
    "posterior_threshold", "posterior_alpha", "typical_acceptance_sampler_posterior_threshold",
    "typical_acceptance_sampler_posterior_alpha", "relaxed_acceptance", "acceptance_threshold", "lossy",
)


def spec_sha256(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(dict(config), "config")).hexdigest()


@dataclass(frozen=True)
class SpecResult:
    verdict: GateVerdict
    evidence: dict[str, Any]
    failures: tuple[str, ...]

    @property
    def summary(self) -> str:
        start = self.evidence["start"]
        return f"{self.verdict}: start {start}" + (f"; {'; '.join(self.failures)}" if self.failures else
                                                   " uses standard verification")


def check_standard_spec(start: str, role: str, config: Mapping[str, Any],
                        declared: Mapping[str, Any] | None) -> SpecResult:
    failures: list[str] = []
    method = config.get("method")
    if not isinstance(method, str) or not method:
        failures.append("no speculative method")
    k = config.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        failures.append("num_speculative_tokens must be a positive integer")
    for key in ACCEPTANCE_KEYS:
        if key in config and config[key] != "rejection_sampler":
            failures.append(f"{key} = {config[key]!r} is not standard rejection sampling")
    if "verification" in config and config["verification"] != "standard":
        failures.append(f"verification = {config['verification']!r} is not standard")
    for key in LOSSY_KEYS:
        if key in config:
            failures.append(f"{key} is a non-standard (lossy) acceptance setting")
    observed = spec_sha256(config)
    declared_sha = None if declared is None else spec_sha256(declared)
    if declared_sha is not None and declared_sha != observed:
        failures.append(f"config differs from the plan's declared arm {role} config "
                        f"({observed[:12]} != {declared_sha[:12]})")
    evidence = {"start": start, "role": role, "config": dict(config), "config_sha256": observed,
                "declared_sha256": declared_sha, "failures": failures}
    return SpecResult("FAIL" if failures else "PASS", evidence, tuple(failures))


@dataclass(frozen=True)
class StandardSpecGate:
    """The gate for one start: ``config`` (the speculative config it runs) against its arm's declared one."""

    start: str
    config: Mapping[str, Any]

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        try:
            planned = plan.start(self.start)
        except KeyError:
            raise FormatError(f"start {self.start} is not in the plan (starts: {', '.join(plan.start_ids)})") from None
        arm = plan.arm(planned.role)
        if arm.speculative is None:
            raise FormatError(f"start {self.start} runs arm {arm.role}, which declares no speculative decoding: "
                              "standard_spec does not apply (its start_config gate checks it runs none)")
        result = check_standard_spec(self.start, planned.role, self.config, arm.speculative)
        return Finding("standard_spec", result.verdict, result.summary, result.evidence, commit=plan.commit,
                       start=self.start)
