"""The simulated pair ``tally demo --plan`` runs an operator's own plan on, built from the plan's arms.

Each arm becomes a simulated engine named as the plan names it: from the arm's ``sim``
table when the plan gives one, else derived from what the arm declares (its speculative
method and number of draft tokens, or no speculative decoding), and said so. A
``--sim SIM.toml`` file (the simulator's own settings, ``docs/sim.md``) overrides: its
top-level settings replace the derived ones, and each of its ``[arms.NAME]`` tables is laid
over the arm of that name. Everything is validated before anything is made: a bad plan or
a bad simulator file is one line (exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

if TYPE_CHECKING:
    from ..plan.model import Arm, Plan
    from ..plan.parse import LoadedPlan
    from ..vocabulary import CounterSourceName

__all__ = ["HOSTS", "PlanDemo", "derived_arm", "prepare_plan_demo", "sim_config_for"]

ARM_IMAGE = "sim/vllm-openai:v0.12.0"   # the image every experiment arm runs (production: its own)

HOSTS = ("sim-head", "sim-worker")

SPEC_OFF_STEP_MS = 18.0  # a step without drafting to verify is cheaper (the simulator's "off" arm)
# Where a declared speculative config gives its number of draft tokens, by the names servers use.
_DEPTH_KEYS = ("num_speculative_tokens", "k", "draft_depth", "num_draft_tokens", "draft_max")
# What the simulator's metrics format makes the counter source (``docs/measure.md``).
_SOURCES: Mapping[str, CounterSourceName] = {"vllm": "vllm", "llamacpp": "llamacpp", "none": "none"}


def derived_arm(arm: Arm) -> tuple[dict[str, Any], str]:
    """A simulated engine from what ``arm`` declares, and a sentence saying what was assumed."""
    spec = arm.speculative
    if spec is None:
        return ({"k": 0, "acceptance": [], "step_base_ms": SPEC_OFF_STEP_MS},
                f"no speculative decoding (k = 0), step {SPEC_OFF_STEP_MS:g} ms")
    depth = next((spec[key] for key in _DEPTH_KEYS if isinstance(spec.get(key), int)
                  and not isinstance(spec.get(key), bool)), 5)
    depth = min(max(int(depth), 1), 32)
    method = str(spec.get("method") or "draft_model")
    # Lookup drafts (prompt n-grams) are accepted less often than a trained drafter's.
    first = 0.55 if any(word in method for word in ("lookup", "ngram")) else 0.8
    acceptance = [round(first * 0.85 ** i, 3) for i in range(depth)]
    table = {"k": depth, "acceptance": acceptance, "method": method,
             "verification": str(spec.get("verification") or "standard")}
    return table, (f"{method}, {depth} draft tokens, acceptance {acceptance[0]:g} falling to {acceptance[-1]:g} "
                   "per position (assumed), default step times")


# Plan arm `sim` tables use the plan's names; the simulator's config uses its own.
_SIM_NAMES = {"draft_depth": "k", "accept_per_pos": "acceptance", "step_base_ms": "step_base_ms",
              "step_per_token_ms": "step_per_token_ms", "ttft_base_ms": "ttft_base_ms",
              "ttft_per_1k_prompt_ms": "ttft_per_1k_tokens_ms", "clock_cap_mhz": "clock_cap_mhz",
              "image": "image"}


def sim_config_for(plans: Sequence[Any], *, time_scale: float, seed: int = 7,
                   derived: list[str] | None = None) -> dict[str, Any]:
    """A simulator config whose arms are the plans' arms (named as the plans name them).

    An arm without a ``sim`` table is simulated from what it declares (``derived_arm``);
    ``derived`` (when given) gets one line per arm saying where its engine came from.
    """
    arms: dict[str, dict[str, Any]] = {}
    production: dict[str, Any] | None = None
    fallback: dict[str, Any] | None = None
    for plan in plans:
        for arm in plan.arms:
            table = {_SIM_NAMES[k]: v for k, v in arm.sim.items() if k in _SIM_NAMES}
            if arm.sim:
                how = "the plan's sim table"
            else:
                table, assumed = derived_arm(arm)
                how = f"the plan gives no sim table; derived from what the arm declares: {assumed}"
            if derived is not None:
                derived.append(how)
            if plan.production_clock_cap_mhz is not None:
                table.setdefault("clock_cap_mhz", plan.production_clock_cap_mhz)
            if arm.speculative is not None:
                table["reported_config"] = dict(arm.speculative)
            table["reported_digest"] = arm.config_digest
            if arm.identities:
                table["reported_identities"] = dict(arm.identities)
            table.setdefault("image", ARM_IMAGE)   # one build for every arm: they differ in their switches only
            arms[arm.name] = table
            # Production serves with speculative decoding: the plan's P arm, else a speculative A.
            if production is None and arm.role in ("P", "A") and arm.speculates:
                production = dict(table, image=f"sim/production@{arm.config_digest[:12]}")
            elif fallback is None and arm.speculates:
                fallback = dict(table, image=f"sim/production@{arm.config_digest[:12]}")
    arms["production"] = production or fallback or next(iter(arms.values()))
    return {"model": "sim/deepseek-spec-demo", "seed": seed, "time_scale": time_scale, "hosts": list(HOSTS),
            "production_arm": "production", "start_s": 5.0, "eos_token_id": 1, "arms": arms}


@dataclass(frozen=True)
class PlanDemo:
    """An operator's plan, checked, and the simulated pair it runs on."""

    path: Path
    window_id: str
    config: dict[str, Any]      # the simulator's config (``runner.sim.config.config_from_dict`` accepts it)
    notes: tuple[str, ...]      # how each arm was simulated, and what the demo changes
    time_scale: float
    clocks: bool
    counter_source: CounterSourceName


def _read_sim(path: Path) -> dict[str, Any]:
    """A simulator file read as hostile input (bounded, duplicates refused); checked once laid over the pair."""
    from ..sim.config import read_config_table

    return read_config_table(path)


def _overlay(base: dict[str, Any], override: Mapping[str, Any], where: str) -> dict[str, Any]:
    merged = {**base, **{k: v for k, v in override.items() if k != "arms"}}
    arms = {name: dict(table) for name, table in base["arms"].items()}
    overrides = override.get("arms", {})
    if not isinstance(overrides, dict):
        raise FormatError(f"{where}: arms: expected a table of arms")
    for name, table in overrides.items():
        if not isinstance(table, dict):
            raise FormatError(f"{where}: arms.{name}: expected a table")
        arms[name] = {**arms.get(name, {}), **table}
    merged["arms"] = arms
    return merged


def _same_engines(plan: Plan, config: Mapping[str, Any]) -> bool:
    keys = ("k", "acceptance", "step_base_ms", "step_per_token_ms", "ttft_base_ms", "ttft_per_1k_tokens_ms")
    engines = {tuple(repr(config["arms"][arm.name].get(k)) for k in keys) for arm in plan.arms}
    return len(engines) == 1


def prepare_plan_demo(plan_path: Path, sim_path: Path | None, *, time_scale: float) -> PlanDemo:
    """Read and check ``plan_path`` (and ``sim_path``); build the simulated pair. ``FormatError``: one line."""
    from ..plan.parse import read_plan_file
    from ..sim.config import config_from_dict

    loaded: LoadedPlan = read_plan_file(plan_path)
    plan = loaded.plan
    override = _read_sim(sim_path) if sim_path is not None else {}
    derived: list[str] = []
    where = str(sim_path or plan_path)
    config = _overlay(sim_config_for([plan], time_scale=time_scale, derived=derived), override, where)
    scale = config_from_dict(config, where=where).time_scale
    named = set(override.get("arms") or {})
    notes = []
    for arm, how in zip(plan.arms, derived, strict=True):
        origin = (f"{sim_path}'s [arms.{arm.name}] over " if arm.name in named else "") + how
        notes.append(f"arm {arm.role} ({arm.name}): {origin}")
    if override.get("step_model") == "batch":
        twin = [a.name for a in plan.arms if a.name in named]
        notes.append(f"the pair is a twin: {sim_path} times steps by the engine's batch (step_model batch: "
                     f"calibrated costs, budgets and acceptance{' for ' + ', '.join(twin) if twin else ''}; "
                     "docs/sim.md)")
    if _same_engines(plan, config):
        notes.append("the arms are simulated as the same engine: expect no difference between them (give the "
                     "arms sim tables, or --sim, to rehearse one)")
    notes.append(f"commit: the plan's {plan.commit[:12]} is replaced by the demo repository's HEAD (the "
                 "qualification and RNG gates read that repository)")
    clocks = plan.production_clock_cap_mhz is not None
    source = _SOURCES.get(str(config.get("metrics_format", "vllm")), "vllm")
    return PlanDemo(plan_path, plan.window_id, config, tuple(notes), scale, clocks, source)
