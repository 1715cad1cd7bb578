"""Validation of a plan document (TOML file or registered JSON) into a frozen ``Plan``.

Every refusal is a ``FieldError`` naming the member (``plan.cells[1].context: expected
one of short, 8k, 32k, 64k, 128k, 150k, got '33k'``); array indexes are 0-based. The
rules are listed in ``docs/plan.md``; each has a test in ``tests/runner/test_plan.py``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, cast

from ledger.errors import FormatError
from ledger.strictfile import read_limited

from ..fields import FieldError, Fields
from ..vocabulary import CORRECTIONS, DECIDE_MODES, WIN2_METRICS, multiplicity_problem
from .model import (
    ATTEST_MODES,
    BLOCK_OVERRUNS,
    CHAIN_MODES,
    CONTEXTS,
    CONTROL_ROLE,
    GATES,
    HOST_IDENTITIES,
    MODES,
    PP3_DEFAULTS,
    PROTOCOLS,
    REASONING_EFFORTS,
    ROLES,
    SMOKE_PROBES,
    SMOKE_PROMPT,
    SPEC_OFF,
    STAGE_KINDS,
    STRUCTURED_FIELDS,
    WAVE_ENDPOINTS,
    WAVE_ORDERS,
    WIN2_DEFAULTS,
    WINDOW_KINDS,
    Arm,
    Budget,
    Carry,
    Cell,
    DecisionParam,
    Family,
    Measurement,
    Plan,
    Power,
    Pressure,
    Priming,
    Sampling,
    Smoke,
    Stage,
    Start,
    stage_start_id,
)

__all__ = ["LoadedPlan", "check_family_files", "check_pp3_arms", "load_plan", "parse_plan", "read_family_file",
           "read_plan_file"]

WINDOW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# A git tag name (``git check-ref-format`` rules, in a conservative alphabet): no "..", "//",
# "@{", no component starting with "." or ending ".lock", not ending "/" or "."; at most 200.
GIT_TAG = re.compile(r"(?!.*\.\.)(?!.*//)(?!.*/\.)(?!.*\.lock(?:/|$))[A-Za-z0-9_][A-Za-z0-9._+/-]{0,199}(?<![./])")
SHA256 = re.compile(r"[0-9a-f]{64}")
IDENTITY_PATH = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")
WORKER_TREE = re.compile(r"/?[A-Za-z0-9._@+=:,-]+(/[A-Za-z0-9._@+=:,-]+)*/?")
# HOST_IDENTITIES: each one's shape, and what it is for a refusal
_IDENTITY_SHAPES = {"worker_identity": (SHA256, "a sha256 (64 lowercase hex)"),
                    "markov_identity": (SHA256, "a sha256 (64 lowercase hex)"),
                    "experiment_commit": (COMMIT, "a commit (40 or 64 lowercase hex)"),
                    "worker_tree": (WORKER_TREE, "a path on the worker (letters, digits, / . _ - @ + = : ,)")}
UNIT = re.compile(r"[^:\s]+\.py:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
TEST_ID = re.compile(r"[!-~]{1,300}")  # a pytest node id or any printable ASCII name without spaces
PP3_BLOCKS = (("A1", "A"), ("B1", "B"), ("B2", "B"), ("A2", "A"))


def _relative_path(fields: Fields, key: str, value: str, index: int | None = None) -> None:
    where = fields.at(key) + ("" if index is None else f"[{index}]")
    parts = PurePosixPath(value).parts
    if not value or value.startswith("/") or ".." in parts or "\\" in value:
        raise FieldError(where, f"{value!r} must be a relative path inside the repository (no '..')")


def _sampling(f: Fields, protocol: str) -> Sampling:
    temperature = f.number("temperature", 1.0)
    if temperature != 1.0:
        raise f.fail("temperature", f"{protocol} measures at T=1 (got {temperature:g})")
    top_p = f.number("top_p", 1.0)
    if top_p != 1.0:
        raise f.fail("top_p", f"{protocol} measures at top_p=1 (got {top_p:g})")
    max_tokens = f.integer("max_tokens", 512, low=1, high=1 << 20)
    ignore_eos = f.boolean("ignore_eos", True)
    if protocol == "win2-v1" and not ignore_eos:
        raise f.fail("ignore_eos", "win2-v1 forces the length (max_tokens with ignore_eos = true)")
    seed_base = f.integer("seed_base", 42, low=0, high=2**31)
    priority = f.integer("priority", 0, low=-(2**31), high=2**31 - 1)
    reasoning_effort = f.string("reasoning_effort", None, choices=REASONING_EFFORTS)
    top_k = f.integer("top_k", None, low=-1, high=1 << 20)
    if top_k == 0:
        raise f.fail("top_k", "register -1 for no cut (older vLLM refuses 0), or a k >= 1")
    min_p = f.number("min_p", None, low=0.0, high=1.0)
    repetition_penalty = f.number("repetition_penalty", None, low=0.0, high=10.0, low_open=True)
    f.done()
    return Sampling(temperature, top_p, max_tokens, ignore_eos, seed_base, priority, reasoning_effort, top_k, min_p,
                    repetition_penalty)


def _arms(f: Fields, protocol: str, mode: str) -> tuple[Arm, ...]:
    needed = {CONTROL_ROLE[mode], "B"}
    arms: list[Arm] = []
    for t in f.tables("arms"):
        role = t.string("role", choices=ROLES)
        if role in {a.role for a in arms}:
            raise t.fail("role", f"arm {role} is declared twice")
        if role not in needed:
            expected = ", ".join(sorted(needed))
            raise t.fail("role", f"{role} is not an arm of {protocol} mode {mode} (expected {expected})")
        name = t.string("name", role, pattern=NAME, what="a name (letters, digits, . _ -)")
        config_digest = t.string("config_digest", pattern=SHA256, what="a sha256 (64 lowercase hex)")
        speculative = t.json("speculative")
        if speculative == SPEC_OFF:
            speculative = None
        elif not isinstance(speculative, dict) or not speculative:
            raise t.fail("speculative", f"expected a non-empty table (the arm's declared speculative config) or "
                                        f"{SPEC_OFF!r} (the arm runs no speculative decoding)")
        sim = t.json("sim", {})
        if not isinstance(sim, dict):
            raise t.fail("sim", "expected a table")
        allowed: tuple[str, ...] = ()
        if "allowed_differences" in t.data:
            if role != "P":
                raise t.fail("allowed_differences", "only arm P is compared with production's identity")
            allowed = t.strings("allowed_differences", pattern=IDENTITY_PATH,
                                what="an identity member (dotted path, e.g. env.VLLM_WORKER)")
        description = t.string("description", "")
        identities = tuple((key, t.string(key, pattern=_IDENTITY_SHAPES[key][0], what=_IDENTITY_SHAPES[key][1]))
                           for key in HOST_IDENTITIES if key in t.data)
        if any(key == "worker_tree" and len(value) > 1024 for key, value in identities):
            raise t.fail("worker_tree", "longer than 1024 characters")
        t.done()
        arms.append(Arm(role=role, name=name, config_digest=config_digest, speculative=speculative, sim=sim,
                        description=description, allowed_differences=allowed, identities=identities))
    missing = needed - {a.role for a in arms}
    if missing:
        raise f.fail("arms", f"{protocol} mode {mode} needs arm(s) {', '.join(sorted(missing))}")
    return tuple(arms)


def _starts(f: Fields, protocol: str, mode: str, roles: set[str]) -> tuple[Start, ...]:
    starts: list[Start] = []
    ids: set[str] = set()
    for t in f.tables("starts"):
        start_id = t.string("id", pattern=NAME, what="a start id (letters, digits, . _ -)")
        if start_id in ids:
            raise t.fail("id", f"start {start_id} appears twice")
        ids.add(start_id)
        role = t.string("arm", choices=sorted(roles))
        starts.append(Start(start_id, cast(Any, role), t.boolean("greedy_check", False)))
        t.done()
    got = ", ".join(f"{s.id}:{s.role}" for s in starts) or "none"
    if protocol == "win2-v1":
        control = CONTROL_ROLE[mode]
        if [s.role for s in starts] != [control, "B", control]:
            raise f.fail("starts", f"win2-v1 mode {mode} expects three starts {control}, B, {control} "
                                   f"(control, candidate, control); got {got}")
    else:
        if [(s.id, s.role) for s in starts] != list(PP3_BLOCKS):
            raise f.fail("starts", f"pp3-v1 expects blocks A1:A, B1:B, B2:B, A2:A in this order; got {got}")
    return tuple(starts)


def _cells(f: Fields) -> tuple[Cell, ...]:
    cells: list[Cell] = []
    names: set[str] = set()   # one set for every cell: a lookup each, not a new set each (linear in cells)
    for t in f.tables("cells"):
        name = t.string("name", pattern=NAME, what="a cell name (letters, digits, . _ -)")
        if name in names:
            raise t.fail("name", f"cell {name} appears twice")
        names.add(name)
        context = t.string("context", pattern=NAME, what="a context label (letters, digits, . _ -)")
        tokens = t.integer("context_tokens", None, low=1, high=100_000_000)
        if tokens is None and context not in CONTEXTS:
            raise t.fail("context_tokens", f"required for context {context!r} (the standard labels "
                                           f"{', '.join(CONTEXTS)} have known sizes): its size in tokens")
        cells.append(Cell(name, context, t.integer("concurrency", 1, low=1, high=1024), t.boolean("decision", True),
                          tokens))
        t.done()
    if not cells:
        raise f.fail("cells", "at least one cell is needed")
    if not any(c.decision for c in cells):
        raise f.fail("cells", "no decision cell (set decision = true on at least one)")
    return tuple(cells)


def _families(f: Fields, cells: tuple[Cell, ...]) -> tuple[Family, ...]:
    families: list[Family] = []
    names: set[str] = set()
    for t in f.tables("families"):
        name = t.string("name", pattern=NAME, what="a family name (letters, digits, . _ -)")
        if name in names:
            raise t.fail("name", f"family {name} appears twice")
        names.add(name)
        prompts = t.string("prompts")
        _relative_path(t, "prompts", prompts)
        sha = t.string("sha256", pattern=SHA256, what="a sha256 (64 lowercase hex)")
        orders_t = t.table("orders", required=True)
        orders: dict[str, tuple[str, ...]] = {}
        for context in orders_t.data:
            if not NAME.fullmatch(context):
                raise orders_t.fail(context, "expected a context label (letters, digits, . _ -)")
            ids = orders_t.strings(context, pattern=NAME, what="a prompt id")
            if not ids:
                raise orders_t.fail(context, "a frozen order needs at least one prompt id")
            orders[context] = ids
        for cell in cells:
            if cell.context not in orders:
                raise t.fail("orders", f"no frozen order for context {cell.context} (cell {cell.name})")
        t.done()
        families.append(Family(name, prompts, sha, orders))
    if not families:
        raise f.fail("families", "at least one source family is needed")
    return tuple(families)


def _measurement(f: Fields, protocol: str) -> Measurement:
    repeats = f.integer("repeats", low=1, high=100)
    if protocol == "win2-v1" and repeats < 2:
        raise f.fail("repeats", "win2-v1 needs at least 2 repeats (the paired-t interval needs n-1 >= 1)")
    if protocol == "pp3-v1" and repeats != 1:
        raise f.fail("repeats", "pp3-v1 runs each block once (repeats = 1)")
    m = Measurement(
        repeats=repeats,
        order=f.string("order", "cell-major", choices=WAVE_ORDERS),
        rotate_families=f.boolean("rotate_families", False),
        request_deadline_s=f.number("request_deadline_s", 120.0, low=0.0, low_open=True),
        wave_deadline_s=f.number("wave_deadline_s", 600.0, low=0.0, low_open=True),
        decode_bound_s=f.number("decode_bound_s", None, low=0.0, low_open=True),
        keep_token_ids=f.boolean("keep_token_ids", False),
        endpoint=f.string("endpoint", "completions", choices=WAVE_ENDPOINTS),
    )
    if m.wave_deadline_s < m.request_deadline_s:
        raise f.fail("wave_deadline_s", f"shorter than request_deadline_s ({m.request_deadline_s:g} s)")
    if m.decode_bound_s is not None:
        if protocol == "win2-v1":
            raise f.fail("decode_bound_s", "win2-v1 forces the length (max_tokens with ignore_eos = true): "
                                           "its runs are not bounded in time")
        if m.wave_deadline_s < m.decode_bound_s:
            raise f.fail("wave_deadline_s", f"shorter than decode_bound_s ({m.decode_bound_s:g} s)")
    f.done()
    return m


def _clock_cap(f: Fields) -> int | None:
    """Production's GPU clock cap; ``"none"`` (TOML) or null (the registered JSON): no GPU clocks apply."""
    if "production_clock_cap_mhz" not in f.data:
        raise f.fail("production_clock_cap_mhz", 'required: production\'s GPU clock cap in MHz, or "none" on '
                                                 "hosts without GPU clocks")
    value = f.raw("production_clock_cap_mhz")
    if value is None or value == "none":
        return None
    return int(f.integer("production_clock_cap_mhz", low=1, high=100_000))


def _decision(f: Fields, protocol: str, repeats: int) -> dict[str, DecisionParam]:
    params: dict[str, DecisionParam] = {}
    if protocol == "win2-v1":
        params["bar"] = f.number("bar", WIN2_DEFAULTS["bar"], low=0.0, high=1.0, high_open=True)
        params["confidence"] = f.number("confidence", WIN2_DEFAULTS["confidence"], low=0.0, high=1.0,
                                        low_open=True, high_open=True)
        guard_min = int(f.integer("guard_min_repeats", WIN2_DEFAULTS["guard_min_repeats"], low=1))
        params["guard_min_repeats"] = guard_min
        if guard_min > repeats:
            raise f.fail("guard_min_repeats", f"more than the {repeats} registered repeats")
        params.update(_win2_primaries(f))
    else:
        params["min_gain"] = f.number("min_gain", PP3_DEFAULTS["min_gain"], low=0.0)
        params["bootstrap"] = f.integer("bootstrap", PP3_DEFAULTS["bootstrap"], low=100, high=1_000_000)
        params["seed"] = f.integer("seed", PP3_DEFAULTS["seed"], low=0, high=2**53 - 1)
        params["interval"] = f.number("interval", PP3_DEFAULTS["interval"], low=0.0, high=1.0,
                                      low_open=True, high_open=True)
        params["max_regression"] = f.number("max_regression", PP3_DEFAULTS["max_regression"], low=0.0)
        if "guard" in f.data:  # registered only when given, so plans without it keep their digest
            params["guard"] = f.string("guard", choices=("round_ms_p95", "tpot_ms"))
    f.done()
    return params


def _win2_primaries(f: Fields) -> dict[str, DecisionParam]:
    """win2-v1's optional ``primaries``, ``correction``, ``decide`` (``docs/rules.md`` 2.7).

    Registered only when given, so a plan without them keeps its digest.
    """
    out: dict[str, DecisionParam] = {}
    count = 1
    if f.has("primaries"):
        primaries = f.strings("primaries", choices=WIN2_METRICS)
        if not primaries:
            raise f.fail("primaries", "expected at least one metric")
        out["primaries"] = list(primaries)
        count = len(primaries)
    if f.has("correction"):
        out["correction"] = f.string("correction", choices=CORRECTIONS)
    if f.has("decide"):
        out["decide"] = f.string("decide", choices=DECIDE_MODES)
    problem = multiplicity_problem(count, str(out.get("correction", "none")), str(out.get("decide", "all")))
    if problem is not None:
        raise f.fail(*problem)
    return out


def _budget(f: Fields, starts: tuple[Start, ...]) -> Budget:
    hard = f.number("hard_ceiling_min", low=0.0, low_open=True)
    reserve = f.number("restore_reserve_min", low=0.0)
    if reserve >= hard:
        raise f.fail("restore_reserve_min", f"must be below the hard ceiling ({hard:g} min)")
    mend = f.number("measurement_end_limit_min", hard - reserve, low=0.0, low_open=True)
    if mend > hard:
        raise f.fail("measurement_end_limit_min", f"after the hard ceiling ({hard:g} min)")
    stop = f.number("stop_admitting_min", mend, low=0.0, low_open=True)
    if stop > mend:
        raise f.fail("stop_admitting_min", f"after the measurement-end limit ({mend:g} min)")
    per_block = f.number("per_block_limit_min", None, low=0.0, low_open=True)
    conditional = f.boolean("stop_admitting_if_overrun", False)
    block_overrun = f.string("block_overrun", "next_block", choices=BLOCK_OVERRUNS)
    if block_overrun != "next_block" and per_block is None:
        raise f.fail("block_overrun", "needs per_block_limit_min (the limit a block overruns)")
    pair = f.number("pair_reserve_s", None, low=0.0)
    dry = f.number("dry_bound_s", None, low=0.0)
    if dry is not None and pair is None:
        raise f.fail("dry_bound_s", "a dry bound needs pair_reserve_s (the estimated reserve it bounds)")
    if dry is not None and pair is not None and dry < pair:
        raise f.fail("dry_bound_s", f"below the estimated pair reserve ({pair:g} s)")
    stages: list[Stage] = []
    start_ids = [s.id for s in starts]
    last_kind = 0
    for t in f.tables("stages"):
        name = t.string("name")
        kind = t.string("kind", choices=STAGE_KINDS)
        rank = STAGE_KINDS.index(kind)
        if rank < last_kind:
            raise t.fail("kind", f"a {kind} stage cannot follow a {STAGE_KINDS[last_kind]} stage "
                                 f"(order: {', '.join(STAGE_KINDS)})")
        last_kind = rank
        is_reserve = t.boolean("reserve", False)
        if is_reserve:
            if t.has("minutes"):
                raise t.fail("minutes", "a reserve stage takes its length from budget.pair_reserve_s")
            if pair is None:
                raise t.fail("reserve", "a reserve stage needs budget.pair_reserve_s")
            if any(s.reserve for s in stages):
                raise t.fail("reserve", "only one reserve stage is allowed")
            minutes = None
        else:
            minutes = t.number("minutes", low=0.0, low_open=True)
        start = t.string("start", None, choices=start_ids)
        t.done()
        stages.append(Stage(name, cast(Any, kind), minutes, start, is_reserve))
    if not stages:
        raise f.fail("stages", "at least one stage is needed")
    if not any(s.kind == "measure" for s in stages):
        raise f.fail("stages", "no measure stage")
    if pair is not None and not any(s.reserve for s in stages):
        raise f.fail("pair_reserve_s", "declared but no stage has reserve = true")
    f.done()
    return Budget(tuple(stages), hard, mend, stop, reserve, per_block, pair, dry, conditional,
                  cast(Any, block_overrun))


def _priming(f: Fields, protocol: str) -> Priming:
    if protocol != "pp3-v1":
        raise FieldError(f.path, "prefix priming is registered for pp3-v1 blocks (win2-v1's waves run with "
                                 "a fresh cache_salt per request)")
    priming = Priming(requests=f.integer("requests", 1, low=1, high=16),
                      max_tokens=f.integer("max_tokens", 1, low=1, high=1 << 20),
                      tolerance_tokens=f.integer("tolerance_tokens", 0, low=0, high=100_000_000))
    f.done()
    return priming


def _pressure(f: Fields) -> Pressure:
    pressure = Pressure(max_waiting=f.integer("max_waiting", None, low=0, high=1_000_000),
                        max_kv_cache_usage=f.number("max_kv_cache_usage", None, low=0, high=1, low_open=True),
                        max_failed_share=f.number("max_failed_share", None, low=0, high=1, high_open=True))
    f.done()
    if pressure.to_json() == {}:
        raise f.fail_here("registers no limit: give max_waiting, max_kv_cache_usage or max_failed_share")
    return pressure


def _smoke(f: Fields, present: bool, mode: str, starts: tuple[Start, ...], protocol: str) -> Smoke | None:
    """The smoke stage: the ``[smoke]`` table, or the greedy identity check ``greedy_check`` starts imply."""
    control = CONTROL_ROLE[mode]
    flagged = [s.id for s in starts if s.greedy_check]
    if not present:
        if not flagged:
            return None
        if starts[[s.id for s in starts].index(flagged[0])].role != control:  # the reference: the first control start
            flagged.insert(0, next(s.id for s in starts if s.role == control))
        return Smoke(starts=tuple(flagged), declared=False)
    arms: tuple[str, ...] = ()
    if f.has("arms"):
        arms, chosen = _smoke_arms(f, control, starts, flagged)
    else:
        chosen = _smoke_starts(f, control, starts, flagged)
    probes = f.strings("probes", ("greedy_identity",), choices=SMOKE_PROBES, nonempty=True)
    if not probes:
        raise f.fail("probes", "an empty list of probes is refused (fail closed)")
    compare = f.string("compare", "token_ids", choices=("token_ids", "text"))
    temperature = f.number("temperature", 0.0, low=0.0)
    if temperature != 0.0 and "greedy_identity" in probes:
        raise f.fail("temperature", f"greedy identity is a T=0 check (got {temperature:g})")
    margin = f.number("near_tie_margin", None, low=0.0)
    logprobs = f.integer("logprobs", 2 if margin is not None else 0, low=0, high=20)
    if margin is not None and logprobs < 2:
        raise f.fail("logprobs", "a near-tie margin needs the top-2 logprobs (logprobs >= 2)")
    eos = f.integer("eos_token_id", None, low=0, high=10_000_000)
    if eos is None and "eos" in probes:
        raise f.fail("eos_token_id", "required by the eos probe (the model's EOS token id)")
    effect = f.string("win2_effect", "report", choices=("report", "inconclusive"))
    if protocol != "win2-v1" and effect != "report":
        raise f.fail("win2_effect", "pp3-v1 rejects on any smoke failure (a win2-v1 setting)")
    smoke = Smoke(
        starts=tuple(chosen), arms=cast(Any, arms), probes=probes, compare=compare,
        max_tokens=f.integer("max_tokens", 16, low=2, high=256), seed=f.integer("seed", 7, low=0, high=2**31),
        temperature=temperature, prompt=f.string("prompt", SMOKE_PROMPT, nonempty=True), logprobs=logprobs,
        near_tie_margin=margin, near_tie_rejects=f.boolean("near_tie_rejects", False),
        near_tie_follow=f.integer("near_tie_follow", None, low=0, high=64),
        structured_field=f.string("structured_field", "structured_outputs", choices=STRUCTURED_FIELDS),
        eos_token_id=eos, win2_effect=effect,
        timeout_s=f.number("timeout_s", 30.0, low=0.0, low_open=True, high=600.0),
    )
    f.done()
    return smoke


def _smoke_starts(f: Fields, control: str, starts: tuple[Start, ...], flagged: list[str]) -> tuple[str, ...]:
    """The measurement starts whose ends run the probes (``[smoke] starts``)."""
    ids = [s.id for s in starts]
    chosen: tuple[str, ...] = f.strings("starts", tuple(flagged), choices=ids) or ()
    if len(chosen) < 2 and "greedy_identity" in f.data.get("probes", ("greedy_identity",)):
        raise f.fail("starts", "greedy identity compares starts: name at least two (the first a control start), "
                               "or set greedy_check = true on them")
    if not chosen:
        raise f.fail("starts", "the smoke stage runs on named starts: list them (or set greedy_check = true)")
    ordered = tuple(sorted(chosen, key=ids.index))
    if chosen != ordered:
        raise f.fail("starts", f"list the starts in registered order ({', '.join(ordered)})")
    if starts[ids.index(chosen[0])].role != control:
        raise f.fail("starts", f"the first smoke start is the greedy reference and must be a control ({control}) "
                               f"start, got {chosen[0]}")
    return chosen


def _smoke_arms(f: Fields, control: str, starts: tuple[Start, ...],
                flagged: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The smoke stage of its own (``[smoke] arms``): its arms, and the ids of its starts (one per arm)."""
    if f.has("starts"):
        raise f.fail("starts", "a smoke stage of its own runs one start per arm after the blocks: give arms "
                               "or starts, not both")
    if flagged:
        raise f.fail("arms", f"greedy_check on {', '.join(flagged)} runs the probes inside those starts; with "
                             "arms they run in the stage of their own: leave greedy_check out")
    roles = sorted({s.role for s in starts})
    arms: tuple[str, ...] = f.strings("arms", choices=roles)
    if not arms:
        raise f.fail("arms", "an empty list of arms runs no probe (fail closed)")
    if len(arms) < 2 and "greedy_identity" in f.data.get("probes", ("greedy_identity",)):
        raise f.fail("arms", "greedy identity compares arms: name at least two (the first the control)")
    if arms[0] != control:
        raise f.fail("arms", f"the first smoke arm is the greedy reference and must be the control ({control}), "
                             f"got {arms[0]}")
    chosen = tuple(stage_start_id(role) for role in arms)
    taken = sorted(set(chosen) & {s.id for s in starts})
    if taken:
        raise f.fail("arms", f"the smoke stage's starts are named {', '.join(chosen)}; a measurement start "
                             f"already is: {', '.join(taken)}")
    return arms, chosen


def _check_smoke_stage(plan: Plan, path: str) -> None:
    """A smoke stage of its own has its minutes in the budget (a ``smoke`` stage), and only it has one."""
    own = plan.smoke is not None and plan.smoke.own_stage
    staged = [s for s in plan.budget.stages if s.kind == "smoke"]
    if own and not staged:
        raise FieldError(f"{path}.budget.stages", "the smoke stage of its own ([smoke] arms) needs its minutes "
                                                  "in the budget: a stage of kind \"smoke\" after the blocks")
    if staged and not own:
        raise FieldError(f"{path}.budget.stages", "a budget stage of kind \"smoke\" times the smoke stage of "
                                                  "its own: register it with [smoke] arms (or use kind "
                                                  "\"measure\")")
    if len(staged) > 1:
        raise FieldError(f"{path}.budget.stages", "one stage of kind \"smoke\" at most (the smoke stage)")
    if staged and staged[0].start is not None:
        raise FieldError(f"{path}.budget.stages", "the smoke stage runs after the blocks: it names no start")


def _carry(f: Fields, required: tuple[str, ...]) -> Carry:
    files = f.strings("files", ())
    for i, value in enumerate(files):
        _relative_path(f, "files", value, i)
    prefixes = f.strings("prefixes", ())
    for i, value in enumerate(prefixes):
        _relative_path(f, "prefixes", value, i)
    units = f.strings("units", (), pattern=UNIT, what="a unit path.py:Qualified.name")
    f.done()
    if "qualification" in required and not (files or prefixes or units):
        raise FieldError(f.path, "the qualification gate is required but nothing is carried "
                                 "(list files, prefixes or units)")
    return Carry(files, prefixes, units)


def _power(f: Fields, required: tuple[str, ...]) -> Power | None:
    """``[power]``: required with the power gate, refused without it (a requirement nobody checks)."""
    if "power" not in f.data:
        if "power" in required:
            raise f.fail("power", "the power gate is required: declare [power] effect (and min_power)")
        return None
    t = f.table("power")
    if "power" not in required:
        raise f.fail("power", "declared but the power gate is not in gates.required")
    power = Power(effect=float(t.number("effect", low=0.0, low_open=True, high=1.0)),
                  min_power=float(t.number("min_power", 0.8, low=0.0, high=1.0, low_open=True, high_open=True)),
                  windows=int(t.integer("windows", 10_000, low=100, high=1_000_000)),
                  seed=int(t.integer("seed", 1, low=0, high=2**53 - 1)),
                  min_windows=int(t.integer("min_windows", 2, low=1, high=10_000)))
    t.done()
    return power


def parse_plan(data: Any, *, path: str = "plan") -> Plan:
    """Validate a plan document (parsed TOML or the registered JSON) into a ``Plan``."""
    f = Fields(data, path)
    window_id = f.string("window_id", pattern=WINDOW_ID, what="a window id (letters, digits, . _ -; at most 100)")
    protocol = f.string("protocol", choices=PROTOCOLS)
    mode = f.string("mode", choices=MODES[protocol])
    commit = f.string("commit", pattern=COMMIT, what="a full commit id (40 or 64 lowercase hex)")
    tag = f.string("tag", None, pattern=GIT_TAG, what="a git tag name (letters, digits, . _ + / -; at most 200)")
    chain = f.string("chain", "none", choices=CHAIN_MODES)
    kind = f.string("kind", None, choices=WINDOW_KINDS)
    if kind in ("admission", "pair-only") and chain != "none":
        article = "an" if kind == "admission" else "a"
        raise FieldError(f"{path}.chain", f"{article} {kind} window never chains (its receipts need the restore "
                                          f"and the watch): chain must be \"none\", got {chain!r}")
    description = f.string("description", "")
    cap = _clock_cap(f)
    sampling = _sampling(f.table("sampling"), protocol)
    arms = _arms(f, protocol, mode)
    starts = _starts(f, protocol, mode, {a.role for a in arms})
    cells = _cells(f)
    families = _families(f, cells)
    measurement = _measurement(f.table("measurement", required=True), protocol)
    if sampling.reasoning_effort is not None and not measurement.chat:
        raise FieldError(f"{path}.sampling.reasoning_effort", "vLLM reads reasoning_effort on chat completions "
                                                               "only (on /v1/completions it is dropped): set "
                                                               "measurement.endpoint = \"chat\"")
    decision = _decision(f.table("decision"), protocol, measurement.repeats)
    budget = _budget(f.table("budget", required=True), starts)
    gates = f.table("gates", required=True)
    required = gates.strings("required", choices=GATES)
    if not required:
        raise gates.fail("required", "an empty list of required gates is refused (fail closed)")
    rng_tests = gates.strings("rng_tests", (), pattern=TEST_ID, what="a test id (printable, no spaces; at most 300)")
    if rng_tests and "rng" not in required:
        raise gates.fail("rng_tests", "registers RNG tests but the rng gate is not required")
    gates.done()
    carry = _carry(f.table("qualification"), required)
    power = _power(f, required)
    priming = _priming(f.table("priming"), protocol) if "priming" in f.data else None
    smoke = _smoke(f.table("smoke"), f.has("smoke"), mode, starts, protocol)
    pressure = _pressure(f.table("pressure")) if "pressure" in f.data else None
    equal_identity = f.strings("equal_identity", None, pattern=IDENTITY_PATH, nonempty=True,
                               what="an identity path (dotted member names: model, command.module)")
    if equal_identity is not None and not equal_identity:
        raise f.fail("equal_identity", "an empty list compares nothing: leave it out for the default (every "
                                       "identity member but the arms' switches)")
    attest = f.string("attest", None, choices=ATTEST_MODES)
    f.done()
    plan = Plan(
        window_id=window_id, protocol=cast(Any, protocol), mode=mode, commit=commit, chain=cast(Any, chain),
        production_clock_cap_mhz=cap, sampling=sampling, arms=arms, starts=starts, cells=cells,
        families=families, measurement=measurement, decision=decision, budget=budget,
        required_gates=cast(Any, required), qualification=carry, description=description, rng_tests=rng_tests,
        power=power, priming=priming, smoke=smoke, tag=tag, kind=cast(Any, kind), pressure=pressure,
        equal_identity=equal_identity, attest=attest,
    )
    _check_bounded_blocks(plan, path)
    _check_smoke_stage(plan, path)
    return plan


def _check_bounded_blocks(plan: Plan, path: str) -> None:
    """A block's bounded decode runs alone must fit its limit (knowable now, so refused now)."""
    bound, limit = plan.measurement.decode_bound_s, plan.budget.per_block_limit_min
    if bound is None or limit is None:
        return
    for start in plan.starts:
        runs_s = sum(-(-len(w.prompt_ids) // w.concurrency) * bound for w in plan.waves_of(start.id))
        if runs_s > limit * 60:
            raise FieldError(f"{path}.measurement.decode_bound_s",
                             f"block {start.id}'s bounded decode runs alone take {runs_s / 60:g} min, over the "
                             f"{limit:g}-minute block limit")


# ---------------------------------------------------------------------- files


def read_family_file(data: bytes, name: str, where: str) -> dict[str, Any]:
    """Parse a family file with the measurement client's parser (``runner.measure.family``).

    One JSON object per line with ``id`` and ``prompt`` (or ``messages``); a ``kind`` that
    names a context (``short``, ``32k``, ...) is checked against the frozen orders.
    Returns prompt id -> prompt.
    """
    from ..measure.family import parse_family

    return {prompt.id: prompt for prompt in parse_family(data, name, where).prompts}


def check_family_files(plan: Plan, base: Path, path: str = "plan") -> dict[str, bytes]:
    """Check every family file against the plan (sha256, ids, contexts); return their bytes."""
    from ..measure.family import MAX_FAMILY_BYTES

    out: dict[str, bytes] = {}
    for index, family in enumerate(plan.families):
        where = f"{path}.families[{index}]"
        file = base / family.prompts
        try:
            data = read_limited(file, "family file", MAX_FAMILY_BYTES)
        except FormatError as exc:
            raise FieldError(f"{where}.prompts", str(exc)) from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != family.sha256:
            raise FieldError(f"{where}.sha256", f"does not match {family.prompts} (the file has {digest})")
        prompts = read_family_file(data, family.name, f"{where}.prompts")
        for context, ids in family.orders.items():
            for i, pid in enumerate(ids):
                prompt = prompts.get(pid)
                if prompt is None:
                    raise FieldError(f"{where}.orders.{context}[{i}]", f"prompt {pid!r} is not in {family.prompts}")
                kind = getattr(prompt, "kind", "")
                # a prompt whose kind names another of the family's contexts, or (in a standard
                # context) another standard context, is in the wrong order
                if kind and kind != context and (kind in family.orders or (context in CONTEXTS and kind in CONTEXTS)):
                    raise FieldError(f"{where}.orders.{context}[{i}]",
                                     f"prompt {pid!r} has kind {kind}, not context {context}")
        out[family.name] = data
    return out


@dataclass(frozen=True)
class LoadedPlan:
    """A plan read from a file: the plan, the file's bytes and its family files' bytes."""

    plan: Plan
    path: Path
    source: bytes
    family_files: Mapping[str, bytes]


def read_plan_file(path: Path, *, overrides: Mapping[str, Any] | None = None) -> LoadedPlan:
    """Read a TOML plan, apply top-level ``overrides``, validate it and check its family files."""
    from ledger.stricttoml import MAX_TOML_BYTES, read_toml

    source = read_limited(path, "plan", MAX_TOML_BYTES)  # a regular file, not through a symlink
    data = read_toml(source, str(path))  # bounded in size and nesting; one line otherwise
    for key, value in (overrides or {}).items():
        data[key] = value
    plan = parse_plan(data)
    check_pp3_arms(plan)
    family_files = check_family_files(plan, path.parent)
    return LoadedPlan(plan, path, source, family_files)


def check_pp3_arms(plan: Plan, path: str = "plan") -> None:
    """A pp3-v1 plan compares two drafting configurations at one fixed depth (seed 003: "never adaptive A
    against fixed5 B"; "B has the same ... only the sampled switches differ").

    Refused when it is registered (a plan read from its file; registered plans replay as recorded):
    an arm whose speculative config is adaptive (``adaptive_k = true`` or a ``schedule``), and two
    speculative arms whose ``num_speculative_tokens`` differ (or one of which does not say). An arm
    that runs no speculative decoding (``speculative = "none"``) against a speculative one is a
    measurement of speculation itself, and allowed.
    """
    if plan.protocol != "pp3-v1":
        return
    depths: dict[str, Any] = {}
    for index, arm in enumerate(plan.arms):
        spec = arm.speculative
        if spec is None:
            continue
        if spec.get("adaptive_k") is True or "schedule" in spec:
            raise FieldError(f"{path}.arms[{index}].speculative",
                             f"arm {arm.role} is adaptive (adaptive_k = true or a schedule): pp3-v1 compares fixed "
                             f"depths (never adaptive against fixed)")
        depths[arm.role] = spec.get("num_speculative_tokens")
    if len(depths) > 1 and len(set(map(repr, depths.values()))) > 1:
        said = ", ".join(f"{role} {depth if depth is not None else 'not declared'}" for role, depth in depths.items())
        raise FieldError(f"{path}.arms", f"pp3-v1 arms must run one speculative depth; num_speculative_tokens: {said}")


def load_plan(path: Path | str, *, overrides: Mapping[str, Any] | None = None) -> Plan:
    """Read, validate and freeze a TOML plan; family files are checked against their sha256.

    ``overrides`` replaces top-level members before validation (e.g. ``commit`` or
    ``window_id`` when a demo registers an example under its own repository's HEAD).
    """
    return read_plan_file(Path(path), overrides=overrides).plan
