"""A start's effective parameters and warm-up, as its server reports them, against the plan (``docs/gates.md``).

Seed 003: a block begins only after its "real warmup rounds and effective target parameters
are attested". What the server reports (:func:`runner.measure.read_served`: ``/v1/models``,
``/metrics``' ``vllm:cache_config_info``, vLLM's development-mode ``/server_info``) is
compared, parameter by parameter, where it is reported:

- ``max_model_len`` (``/v1/models``, else ``/server_info``): ``max_tokens`` (the sampling's, or
  the priming's when larger) must fit under it, and, where priming verifies a cell's prompt
  size, the cell's context plus ``max_tokens`` (:func:`context_problems`, the rule the fit check
  applies to production before the drain);
- ``speculative_config`` (``/server_info``): on or off as the arm declares, and every scalar
  member the arm declares that the server reports equal to it;
- ``enable_prefix_caching`` (``cache_config_info``, else ``/server_info``), when the plan primes
  prefixes: on.

A parameter the server does not report is not compared. A server that reports none of them is
recorded as such (``none_reported``): the start goes on, unless the plan registers
``attest = "required"``. The warm-up (:func:`check_warmup_served`): the server's own
served-requests counter must rise across the site's warm-up action by at least the requests
the site says it sent. Pure: facts in, verdict out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..plan.model import Arm, Plan

__all__ = ["EffectiveResult", "WarmupCheck", "check_effective", "check_warmup_served", "context_problems"]


@dataclass(frozen=True)
class EffectiveResult:
    ok: bool
    checks: tuple[dict[str, Any], ...]
    failures: tuple[str, ...]
    none_reported: bool


@dataclass(frozen=True)
class WarmupCheck:
    attested: bool
    ok: bool
    detail: str


def context_problems(plan: Plan, model: str, max_model_len: int | None) -> list[str]:
    """What would not fit a ``max_model_len``-token context (nothing when the server does not say).

    ``max_tokens`` (the sampling's, or the priming's when larger) at or over ``max_model_len``
    fails whatever the prompts (vLLM refuses every request, HTTP 400). A cell's declared
    context counts only where priming verifies it (the prompts then occupy exactly that many
    tokens); elsewhere a label such as "short" names a condition, not the prompts' length.
    """
    if max_model_len is None:
        return []
    asked = max(plan.sampling.max_tokens, plan.priming.max_tokens if plan.priming is not None else 0)
    if asked >= max_model_len:
        return [f"max_tokens {asked} alone fills the {max_model_len}-token context {model} serves (max_model_len): "
                "every request would be refused"]
    if plan.priming is None:
        return []
    return [f"cell {cell.name}: its {cell.tokens}-token context (verified by priming) plus max_tokens {asked} is "
            f"{cell.tokens + asked} tokens, over the {max_model_len} {model} serves (max_model_len): every request "
            "would be refused"
            for cell in plan.cells if cell.tokens + asked > max_model_len]


def _table(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _flag(value: Any) -> bool | None:
    """A reported on/off (vLLM's info labels are Python's ``str(bool)``); ``None``: not a flag."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def check_effective(plan: Plan, arm: Arm, reported: Mapping[str, Any]) -> EffectiveResult:
    """Compare what the server reports (``read_served``'s answer) with the plan and the start's arm."""
    models, cache, info = (_table(reported.get(key)) for key in ("models", "cache_config", "server_info"))
    checks: list[dict[str, Any]] = []
    failures: list[str] = []

    def check(param: str, planned: Any, seen: Any, source: str, problems: list[str]) -> None:
        checks.append({"param": param, "plan": planned, "reported": seen, "source": source, "ok": not problems})
        failures.extend(problems)

    length, where = models.get("max_model_len"), "/v1/models"
    if length is None:
        length, where = info.get("max_model_len"), "/server_info"
    if isinstance(length, int) and not isinstance(length, bool):
        asked = max(plan.sampling.max_tokens, plan.priming.max_tokens if plan.priming is not None else 0)
        need = max([asked + 1] + ([cell.tokens + asked for cell in plan.cells] if plan.priming is not None else []))
        check("max_model_len", f">= {need}", length, where,
              context_problems(plan, str(models.get("id") or "the server"), length))
    if "speculative_config" in info:
        spec = info["speculative_config"]
        on = isinstance(spec, Mapping) and bool(spec)
        problems = []
        if on != arm.speculates:
            problems.append(f"arm {arm.role} declares " + ("speculative decoding" if arm.speculates else
                                                           'speculative = "none"')
                            + ", and the server reports " + (f"speculative_config {dict(spec)!r}"[:200] if on
                                                             else "none"))
        elif on and arm.speculative is not None and isinstance(spec, Mapping):
            for key, declared in sorted(arm.speculative.items()):
                if key in spec and not isinstance(declared, Mapping | list) and spec[key] != declared:
                    problems.append(f"speculative_config.{key}: the server reports {spec[key]!r}, arm {arm.role} "
                                    f"declares {declared!r}")
        check("speculative_config", "none" if arm.speculative is None else dict(arm.speculative),
              dict(spec) if isinstance(spec, Mapping) else spec, "/server_info", problems)
    if plan.priming is not None:
        caching, where = _flag(cache.get("enable_prefix_caching")), f"/metrics {'vllm:cache_config_info'}"
        if caching is None:
            caching, where = _flag(info.get("enable_prefix_caching")), "/server_info"
        if caching is not None:
            check("enable_prefix_caching", True, caching, where,
                  [] if caching else ["the plan primes prefixes, and the server reports enable_prefix_caching "
                                      "False: the waves' prompts would not come from the prefix cache"])
    none = not checks
    if none and plan.attest_required:
        failures.append("the server reports none of its effective parameters (max_model_len, speculative_config, "
                        'enable_prefix_caching), and the plan registers attest = "required"')
    return EffectiveResult(not failures, tuple(checks), tuple(failures), none)


def check_warmup_served(requests: int, before: float | None, after: float | None, counts: str, series: str | None,
                        problem: str, *, required: bool) -> WarmupCheck:
    """Did the server's own counter rise by the warm-up's ``requests`` (the site's count) across it?"""
    if requests < 1:
        why = "the site's warm-up reported no request count (facts.requests)"
    elif before is None or after is None:
        why = problem or "the served-requests counter was not read"
    else:
        rose = after - before
        word = "requests served" if counts == "requests" else "tokens generated (one a request at least)"
        if rose >= requests:
            return WarmupCheck(True, True, f"{series} rose by {rose:g} across the warm-up ({word}), for its "
                                           f"{requests} request{'s' if requests != 1 else ''}")
        return WarmupCheck(True, False, f"{series} rose by {rose:g} across the warm-up ({word}), fewer than its "
                                        f"{requests} request{'s' if requests != 1 else ''}: the start's engine did "
                                        "not serve the warm-up")
    detail = f"warm-up not attested: {why}"
    if required:
        return WarmupCheck(False, False, detail + ' (the plan registers attest = "required")')
    return WarmupCheck(False, True, detail)
