"""The start_config gate (``docs/gates.md``): the engine a start started is the arm the plan declares.

At every start the host reports what it started (``start_arm`` facts): its
``config_digest``, its effective ``speculative_config`` and its ``identity``. The gate
compares them with the plan's arm:

- the reported ``config_digest`` equals the arm's declared one;
- an arm that declares ``speculative = "none"`` reports no speculative decoding (a null
  or empty config); a speculative arm reports one (``standard_spec`` then checks it);
- arm P reports an identity equal to production's recorded identity except in the
  members the arm lists as ``allowed_differences``;
- each host identity the arm declares (``worker_identity``, ``markov_identity``,
  ``experiment_commit``, ``worker_tree``) is reported, and equal;
- the hosts agree on the start's clock cap (``clock_problems``, :mod:`.clocks`);
- the arms are equal where they must be (``reference``: the identity the plan's first start
  reported; every later start is compared with it): the plan's ``equal_identity`` paths, by default
  every identity member but the ones an arm's switches live in (:data:`ARM_SWITCHES`).

What the host did not report cannot be checked: the gate fails closed. Pure: facts in,
verdict out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..vocabulary import GateVerdict

if TYPE_CHECKING:
    from ..plan.model import Arm

__all__ = ["ARM_SWITCHES", "ConfigResult", "arm_differences", "check_start_config", "identity_differences"]

MAX_DIFFERENCES = 50  # listed in the evidence; the count is always exact
# Identity members in which two arms may differ by default: the arm's name, its config digest (which
# covers its switches), its speculative config, and the launch members a speculative switch is set in.
# A path with any of these as one of its parts is not compared (``command.args``, ``env.VLLM_X``).
# ``clock_cap_mhz`` is judged by the clock rules (a start at another cap: INCONCLUSIVE / NO_PROMOTION).
ARM_SWITCHES = frozenset({"arm", "config_digest", "speculative_config", "args", "argv", "env", "port",
                          "clock_cap_mhz"})


@dataclass(frozen=True)
class ConfigResult:
    verdict: GateVerdict
    evidence: dict[str, Any]
    failures: tuple[str, ...]

    @property
    def summary(self) -> str:
        return "; ".join(self.failures) or "the engine is the declared arm"


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for key in sorted(value):
            yield from _leaves(value[key], f"{path}.{key}" if path else str(key))
    else:
        yield path, value


def identity_differences(reported: Mapping[str, Any], production: Mapping[str, Any]) -> list[str]:
    """The dotted paths where two identities differ (a member only one has counts as a difference)."""
    ours, theirs = dict(_leaves(reported, "")), dict(_leaves(production, ""))
    return sorted(path for path in ours.keys() | theirs.keys()
                  if path not in ours or path not in theirs or ours[path] != theirs[path])


def arm_differences(identity: Mapping[str, Any], reference: Mapping[str, Any],
                    equal: Sequence[str] | None) -> list[str]:
    """The identity paths in which two arms differ but must not: ``equal`` (the plan's ``equal_identity``;
    a path covers everything under it; one that neither reports counts, as what is not reported cannot
    be shown equal), else every path but the :data:`ARM_SWITCHES` ones."""
    if equal is not None:
        ours, theirs = dict(_leaves(identity, "")), dict(_leaves(reference, ""))
        out = []
        for entry in equal:
            mine = {k: v for k, v in ours.items() if _allowed(k, (entry,))}
            other = {k: v for k, v in theirs.items() if _allowed(k, (entry,))}
            if not mine or mine != other:
                out.append(entry)
        return out
    return [path for path in identity_differences(identity, reference)
            if not ARM_SWITCHES & set(path.split("."))]


def _allowed(path: str, allowed: Sequence[str]) -> bool:
    return any(path == entry or path.startswith(entry + ".") for entry in allowed)


def spec_reported(config: Any) -> bool:
    """Does a reported ``speculative_config`` mean speculative decoding is on? (A non-empty mapping.)"""
    return isinstance(config, Mapping) and bool(config)


def check_start_config(start: str, arm: Arm, reported: Mapping[str, Any],
                       production_identity: Mapping[str, Any] | None, *,
                       clock_problems: Sequence[str] = (),
                       reference: tuple[str, str, Any] | None = None,
                       equal_identity: Sequence[str] | None = None) -> ConfigResult:
    """Compare what the host reported for ``start`` (its ``start_arm`` facts) with ``arm``.

    ``clock_problems`` are what the start's clock reading found (hosts disagreeing on the
    cap, a log line contradicting its number: :mod:`.clocks`); each fails the start.
    ``reference`` (start, role, identity): the first start of another role, as its host reported
    it; given at the first start of each other role, whose identity must equal it (:func:`arm_differences`).
    """
    failures: list[str] = [f"clock: {problem}" for problem in clock_problems]
    digest = reported.get("config_digest")
    if not isinstance(digest, str) or not digest:
        failures.append("the host reported no config_digest for this start")
    elif digest != arm.config_digest:
        failures.append(f"config_digest {digest[:12]} is not arm {arm.role}'s declared {arm.config_digest[:12]}")
    spec = reported.get("speculative_config")
    if "speculative_config" not in reported:
        failures.append("the host did not report the start's speculative config")
    elif arm.speculative is None and spec_reported(spec):
        failures.append(f"arm {arm.role} declares no speculative decoding, but the engine reports "
                        f"{_short(spec)}")
    elif arm.speculative is not None and not spec_reported(spec):
        failures.append(f"arm {arm.role} declares speculative decoding, but the engine reports none")
    evidence: dict[str, Any] = {
        "start": start, "role": arm.role, "arm": arm.name,
        "declared": {"config_digest": arm.config_digest,
                     "speculative": "none" if arm.speculative is None else "declared",
                     "speculative_sha256": arm.speculative_sha256},
        "reported": {"config_digest": digest, "speculative_config": spec, "identity": reported.get("identity")},
    }
    if arm.role == "P":
        identity = reported.get("identity")
        if not isinstance(identity, Mapping) or not identity:
            failures.append("the host reported no identity for this start (arm P is compared with production's)")
        elif not isinstance(production_identity, Mapping) or not production_identity:
            failures.append("production's identity was not recorded (arm P is compared with it)")
        else:
            differences = identity_differences(identity, production_identity)
            unexpected = [d for d in differences if not _allowed(d, arm.allowed_differences)]
            evidence["identity"] = {"allowed": list(arm.allowed_differences), "differences": len(differences),
                                    "listed": differences[:MAX_DIFFERENCES], "unexpected": unexpected[:MAX_DIFFERENCES]}
            if unexpected:
                failures.append(f"arm P differs from production's identity outside its allowed differences: "
                                f"{', '.join(unexpected[:5])}" + (" ..." if len(unexpected) > 5 else ""))
    if arm.identities:
        seen: dict[str, Any] = {}
        for key, declared in arm.identities:
            value = reported.get(key)
            seen[key] = value if value is None or (isinstance(value, str) and len(value) <= 1100) else _short(value)
            if key not in reported or value is None:
                failures.append(f"the host did not report its {key} (arm {arm.role} declares {_short(declared)})")
            elif value != declared:
                failures.append(f"{key} {_short(value)} is not arm {arm.role}'s declared {_short(declared)}")
        evidence["identities"] = {"declared": dict(arm.identities), "reported": seen}
    if reference is not None:
        failures += _equivalence(start, arm.role, reported.get("identity"), reference, equal_identity, evidence)
    evidence["failures"] = failures
    return ConfigResult("FAIL" if failures else "PASS", evidence, tuple(failures))


def _equivalence(start: str, role: str, identity: Any, reference: tuple[str, str, Any],
                 equal: Sequence[str] | None, evidence: dict[str, Any]) -> list[str]:
    """Arm equivalence: this start's identity against the reference start's, recorded in ``evidence``."""
    ref_start, ref_role, ref_identity = reference
    if not isinstance(identity, Mapping) or not identity or not isinstance(ref_identity, Mapping) or not ref_identity:
        missing = start if not isinstance(identity, Mapping) or not identity else ref_start
        evidence["equivalence"] = {"reference": ref_start, "compared": None}
        return [f"arms not shown equal: the host reported no identity for {missing}"]
    differing = arm_differences(identity, ref_identity, equal)
    evidence["equivalence"] = {"reference": ref_start, "equal": "registered" if equal is not None else "default",
                               "paths": list(equal) if equal is not None else None,
                               "differing": differing[:MAX_DIFFERENCES]}
    if not differing:
        return []
    ours, theirs = dict(_leaves(identity, "")), dict(_leaves(ref_identity, ""))
    first = differing[0]
    shown = (f": {start} ({role}) reports {_short(ours.get(first))}, {ref_start} ({ref_role}) "
             f"{_short(theirs.get(first))}") if first in ours or first in theirs else ""
    return [f"arms differ in {', '.join(differing[:5])}{' ...' if len(differing) > 5 else ''}{shown} "
            "(the arms must be equal but for their switches)"]


def _short(value: Any) -> str:
    text = repr(dict(value)) if isinstance(value, Mapping) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
