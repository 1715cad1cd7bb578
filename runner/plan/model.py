"""A window's registered plan (``docs/plan.md``): frozen values, the wave schedule, its digest.

A plan is written as TOML (``docs/plan.md``), validated by ``runner.plan.parse`` and
held as a frozen ``Plan``. Its JSON form (``Plan.to_json()``) is what
``window.registered`` carries; ``plan_sha256`` is the SHA-256 of that form's JCS bytes.
``runner.plan.parse.parse_plan`` reads the JSON form back (through the same validator),
so the registered plan and the file agree member for member. Values only: nothing here
reads a file or validates a document.

Everything window execution needs is here: arms and their declared configs, starts in
order, cells, families with their frozen prompt orders, the wave schedule
(``Plan.waves``: start x cell x wave with repeat, family, seed 42+wave and prompt ids),
sampling, deadlines, decision parameters (with their registered defaults), the time budget, the
required gates, the expected production clock cap, the chain mode and the
qualification carry lists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from ledger.canonical import canonical

from ..vocabulary import (
    ARM_ROLES,
    CHAIN_MODES,
    GATES,
    PROTOCOLS,
    SMOKE_PROBES,
    STAGE_KINDS,
    STRUCTURED_FIELDS,
    WAVE_ORDERS,
    WINDOW_KINDS,
    ArmRole,
    ChainMode,
    GateName,
    ProtocolName,
    SmokeProbe,
    StageKind,
    StructuredField,
    WaveOrder,
    WindowKind,
)

__all__ = [
    "ATTEST_MODES",
    "BLOCK_OVERRUNS",
    "CHAIN_MODES",
    "CONTEXTS",
    "CONTEXT_TOKENS",
    "CONTROL_ROLE",
    "ENGINE_SAMPLING_FIELDS",
    "GATES",
    "HOST_IDENTITIES",
    "MODES",
    "PP3_DEFAULTS",
    "PROTOCOLS",
    "REASONING_EFFORTS",
    "SMOKE_FAILURE_KIND",
    "SMOKE_PROBES",
    "SMOKE_PROMPT",
    "SMOKE_SCHEMA",
    "SPEC_OFF",
    "STAGE_KINDS",
    "STRUCTURED_FIELDS",
    "WAVE_ENDPOINTS",
    "WAVE_ORDERS",
    "WIN2_DEFAULTS",
    "WINDOW_KINDS",
    "Arm",
    "Budget",
    "Carry",
    "Cell",
    "Family",
    "Measurement",
    "Plan",
    "Power",
    "Pressure",
    "Priming",
    "Sampling",
    "Smoke",
    "Stage",
    "Start",
    "WaveSpec",
    "plan_sha256",
    "stage_start_id",
]

BlockOverrun = Literal["next_block", "truncate_experiment"]
BLOCK_OVERRUNS: tuple[BlockOverrun, ...] = ("next_block", "truncate_experiment")
MODES: Mapping[str, tuple[str, ...]] = {"win2-v1": ("controlled", "production-policy"), "pp3-v1": ("abba",)}
CONTROL_ROLE: Mapping[str, str] = {"controlled": "A", "production-policy": "P", "abba": "A"}
ROLES = ARM_ROLES
CONTEXTS: tuple[str, ...] = ("short", "8k", "32k", "64k", "128k", "150k")
CONTEXT_TOKENS: Mapping[str, int] = {"short": 2048, "8k": 8192, "32k": 32768, "64k": 65536, "128k": 131072,
                                     "150k": 153600}
"""The size of each standard context label; a cell with another label declares ``context_tokens``."""
SPEC_OFF = "none"
"""An arm's ``speculative`` when it runs no speculative decoding (a spec-off control)."""
WIN2_DEFAULTS: Mapping[str, float | int] = {"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2}
DecisionParam = float | int | str | list[str]
"""A ``[decision]`` member's value: a number, a name, or (win2-v1 ``primaries``) a list of metric names."""
PP3_DEFAULTS: Mapping[str, float | int] = {
    "min_gain": 0.05, "bootstrap": 2000, "seed": 4103, "interval": 0.90, "max_regression": 0.05,
}

SMOKE_FAILURE_KIND: Mapping[str, str] = {"greedy_identity": "greedy-identity", "structured": "grammar",
                                         "stop": "stop", "eos": "stop", "lifecycle": "lifecycle"}
"""The failure kind each smoke probe's failure is named by (the REJECT reasons of pp3-v1)."""
SMOKE_PROMPT = "Write the numbers from one to forty in words, separated by commas:"
SMOKE_SCHEMA: Mapping[str, Any] = {
    "type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["name", "count"],
}


# Identities an arm may declare and every start of it must report equal (``start_config``):
# the worker's and the Markov sampler's identity hashes, the experiment commit, the worker tree.
HOST_IDENTITIES = ("worker_identity", "markov_identity", "experiment_commit", "worker_tree")


@dataclass(frozen=True)
class Arm:
    """A server configuration: role A (control), B (candidate) or P (production policy).

    ``speculative`` is the arm's declared speculative config, or ``None`` for an arm that
    runs no speculative decoding (written ``speculative = "none"``). ``allowed_differences``
    (arm P only) lists the identity members in which P may differ from production's
    reported identity (dotted paths; a path covers everything under it).
    """

    role: ArmRole
    name: str
    config_digest: str
    speculative: dict[str, Any] | None
    sim: dict[str, Any]
    description: str = ""
    allowed_differences: tuple[str, ...] = ()
    # what the hosts must report at each start of the arm (:data:`HOST_IDENTITIES`), as declared
    identities: tuple[tuple[str, str], ...] = ()

    @property
    def speculates(self) -> bool:
        return self.speculative is not None

    @cached_property
    def speculative_sha256(self) -> str | None:
        """SHA-256 of the JCS of the declared speculative config (``None``: the arm declares none)."""
        return None if self.speculative is None else hashlib.sha256(canonical(self.speculative)).hexdigest()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "role": self.role, "name": self.name, "config_digest": self.config_digest,
            "speculative": SPEC_OFF if self.speculative is None else self.speculative, "sim": self.sim,
            "description": self.description,
        }
        if self.allowed_differences:
            data["allowed_differences"] = list(self.allowed_differences)
        data.update(self.identities)
        return data


@dataclass(frozen=True)
class Start:
    """One engine session of one arm, in registered order (``s1``/``s2``/``s3`` or ``A1``...)."""

    id: str
    role: ArmRole
    greedy_check: bool = False

    @property
    def label(self) -> str:
        """``s1-P`` for win2 starts, the block id (``A1``) when it already names the role."""
        return self.id if self.id.startswith(self.role) else f"{self.id}-{self.role}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "arm": self.role, "greedy_check": self.greedy_check}


@dataclass(frozen=True)
class Cell:
    """A context/batch condition; ``decision`` cells feed the verdict.

    ``context`` is a label: one of :data:`CONTEXTS` (whose size is known) or any other
    name with a declared ``context_tokens``.
    """

    name: str
    context: str
    concurrency: int
    decision: bool
    context_tokens: int | None = None  # declared size; None: the known size of a standard label

    @property
    def tokens(self) -> int:
        """The context's size in tokens (declared, else the standard label's)."""
        return self.context_tokens if self.context_tokens is not None else CONTEXT_TOKENS[self.context]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "context": self.context, "concurrency": self.concurrency,
                                "decision": self.decision}
        if self.context_tokens is not None:
            data["context_tokens"] = self.context_tokens
        return data


@dataclass(frozen=True)
class Family:
    """A source family: its prompts file, the file's sha256, frozen prompt orders per context."""

    name: str
    prompts: str
    sha256: str
    orders: dict[str, tuple[str, ...]]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "prompts": self.prompts, "sha256": self.sha256,
                "orders": {ctx: list(ids) for ctx, ids in self.orders.items()}}


REASONING_EFFORTS = ("low", "medium", "high")
ATTEST_MODES = ("where_reported", "required")
# The engine-side sampling fields a plan may register (``[sampling]``): sent with the identical value
# on every request of every arm (waves, priming, the site's warm-up), registered only when given.
ENGINE_SAMPLING_FIELDS = ("reasoning_effort", "top_k", "min_p", "repetition_penalty")
WAVE_ENDPOINTS = ("completions", "chat")
"""The API the waves and the priming use: ``/v1/completions`` (the default) or ``/v1/chat/completions``."""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 512
    ignore_eos: bool = True
    seed_base: int = 42
    priority: int = 0
    reasoning_effort: str | None = None   # REASONING_EFFORTS
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None

    @property
    def engine_fields(self) -> dict[str, Any]:
        """The registered engine-side sampling fields (``ENGINE_SAMPLING_FIELDS``), as a request body carries them."""
        return {name: getattr(self, name) for name in ENGINE_SAMPLING_FIELDS if getattr(self, name) is not None}

    def to_json(self) -> dict[str, Any]:
        # the engine-side fields are written only when given, so older plans keep their digest
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "ignore_eos": self.ignore_eos, "seed_base": self.seed_base, "priority": self.priority,
                **self.engine_fields}


@dataclass(frozen=True)
class Measurement:
    repeats: int
    order: WaveOrder = "cell-major"
    rotate_families: bool = False
    request_deadline_s: float = 120.0
    wave_deadline_s: float = 600.0
    decode_bound_s: float | None = None  # bounded decode runs: cut this long after the first token
    keep_token_ids: bool = False         # the records blob keeps each request's emitted token ids
    endpoint: str = "completions"        # the waves' and priming's API: "completions" or "chat" (WAVE_ENDPOINTS)

    @property
    def chat(self) -> bool:
        """Do the waves (and the priming) go to ``/v1/chat/completions``?"""
        return self.endpoint == "chat"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"repeats": self.repeats, "order": self.order, "rotate_families": self.rotate_families,
                                "request_deadline_s": self.request_deadline_s, "wave_deadline_s": self.wave_deadline_s}
        if self.decode_bound_s is not None:  # written only when given, so older plans keep their digest
            data["decode_bound_s"] = self.decode_bound_s
        if self.keep_token_ids:
            data["keep_token_ids"] = True
        if self.endpoint != "completions":
            data["endpoint"] = self.endpoint
        return data


@dataclass(frozen=True)
class Pressure:
    """Pressure limits (seed 003: "abort on unexplained failures/pressure"), checked on every wave.

    ``max_waiting``: requests waiting in the server's queue, read just before and just
    after each wave (the server's own gauge: another tenant's backlog); ``max_kv_cache_usage``:
    its KV-cache usage (0..1) then; ``max_failed_share``: the share of a wave's requests that
    failed. A wave over any limit (or whose gauge a limit needs was not read) ends the
    measurement safely, named (``pressure.crossed``).
    """

    max_waiting: int | None = None
    max_kv_cache_usage: float | None = None
    max_failed_share: float | None = None

    @property
    def gauges(self) -> tuple[str, ...]:
        """The server gauges the limits read (``waiting``, ``kv_cache_usage``)."""
        return tuple(name for name, limit in (("waiting", self.max_waiting),
                                              ("kv_cache_usage", self.max_kv_cache_usage)) if limit is not None)

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in (("max_waiting", self.max_waiting),
                                              ("max_kv_cache_usage", self.max_kv_cache_usage),
                                              ("max_failed_share", self.max_failed_share)) if value is not None}


@dataclass(frozen=True)
class Priming:
    """Prefix priming per block (seed 003): identical requests that put each prompt's prefix in the cache.

    Each block sends every prompt of its waves ``requests`` times (``max_tokens`` each) under
    one ``cache_salt`` of its own (fresh across blocks), checks the occupied token count its
    server reports (``usage.prompt_tokens``) against the cell's declared context size (within
    ``tolerance_tokens``), and its waves then run under the same salt.
    """

    requests: int = 1
    max_tokens: int = 1
    tolerance_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "max_tokens": self.max_tokens, "tolerance_tokens": self.tolerance_tokens}


@dataclass(frozen=True)
class Stage:
    """A budget stage. ``reserve`` stages take their length from the budget's pair reserve."""

    name: str
    kind: StageKind
    minutes: float | None
    start: str | None = None
    reserve: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "minutes": self.minutes, "start": self.start,
                "reserve": self.reserve}


def stage_start_id(role: str) -> str:
    """The id of the smoke stage's start of ``role`` (``A-smoke``): never a measurement start's."""
    return f"{role}-smoke"


DEFAULT_NEAR_TIE_FOLLOW = 4   # near ties greedy identity follows when the plan registers no near_tie_follow


@dataclass(frozen=True)
class Smoke:
    """The smoke stage: probes run at the end of each of ``starts`` (after its waves), T=0.

    ``declared`` is false for the stage a plan implies by ``greedy_check = true`` on a start
    without a ``[smoke]`` table (greedy identity only; not written to the registered plan,
    which is re-derived from the starts). Greedy identity compares every later smoke start
    with the first, a control start (the reference).
    """

    starts: tuple[str, ...]
    probes: tuple[SmokeProbe, ...] = ("greedy_identity",)
    # the stage of its own (``[smoke] arms``): one start per arm after the blocks, in this order (the first the
    # control, the greedy reference); ``starts`` are then their ids (:func:`stage_start_id`). Empty: the
    # probes run at the end of the named measurement starts, as plans without ``arms`` always have.
    arms: tuple[ArmRole, ...] = ()
    compare: str = "token_ids"                 # or "text": the server gives no token ids
    max_tokens: int = 16
    seed: int = 7
    temperature: float = 0.0
    prompt: str = SMOKE_PROMPT
    logprobs: int = 0                          # top logprobs asked per position (0: none)
    near_tie_margin: float | None = None       # top-2 logprob margin (nats): a divergence within it is a near tie
    near_tie_rejects: bool = False
    near_tie_follow: int | None = None         # near ties followed teacher-forced (None: not registered, the default)
    structured_field: StructuredField = "structured_outputs"
    eos_token_id: int | None = None
    win2_effect: str = "report"                # win2-v1: "report" (recorded only) or "inconclusive"
    timeout_s: float = 30.0
    declared: bool = True

    @property
    def reference(self) -> str:
        return self.starts[0]

    @property
    def own_stage(self) -> bool:
        """Do the probes run in a stage of their own (a start per arm, after the blocks)?"""
        return bool(self.arms)

    def to_json(self) -> dict[str, Any]:
        # a stage of its own is registered by its arms (its starts follow from them); else by the starts
        where: dict[str, Any] = {"arms": list(self.arms)} if self.arms else {"starts": list(self.starts)}
        data: dict[str, Any] = {
            **where, "probes": list(self.probes), "compare": self.compare,
            "max_tokens": self.max_tokens, "seed": self.seed, "temperature": self.temperature, "prompt": self.prompt,
            "logprobs": self.logprobs, "near_tie_margin": self.near_tie_margin,
            "near_tie_rejects": self.near_tie_rejects, "structured_field": self.structured_field,
            "eos_token_id": self.eos_token_id,
            "win2_effect": self.win2_effect, "timeout_s": self.timeout_s,
        }
        if self.near_tie_follow is not None:  # written only when given, so plans without it keep their digest
            data["near_tie_follow"] = self.near_tie_follow
        return data

    @property
    def follow(self) -> int:
        """How many near ties greedy identity follows past (``docs/smoke.md``): the registered number, else 4."""
        return DEFAULT_NEAR_TIE_FOLLOW if self.near_tie_follow is None else self.near_tie_follow


@dataclass(frozen=True)
class Budget:
    """The registered time budget; minutes are elapsed from the window's first host action."""

    stages: tuple[Stage, ...]
    hard_ceiling_min: float
    measurement_end_limit_min: float
    stop_admitting_min: float
    restore_reserve_min: float
    per_block_limit_min: float | None = None
    pair_reserve_s: float | None = None
    dry_bound_s: float | None = None
    stop_admitting_if_overrun: bool = False   # seed 003: stop admitting at the time only if a stage has overrun
    block_overrun: BlockOverrun = "next_block"  # a block over its limit: the next begins, or the experiment ends

    @property
    def restore_by_min(self) -> float:
        """When whatever runs is cut and the restore begins: min(measurement end, hard ceiling - restore reserve)."""
        return min(self.measurement_end_limit_min, self.hard_ceiling_min - self.restore_reserve_min)

    def stage_minutes(self, kind: str | None = None, start: str | None = None) -> float:
        """The registered minutes of the stages of ``kind`` (any kind: ``None``) counting toward ``start``."""
        return sum(s.minutes or 0.0 for s in self.stages
                   if (kind is None or s.kind == kind) and (start is None or s.start == start))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "hard_ceiling_min": self.hard_ceiling_min,
            "measurement_end_limit_min": self.measurement_end_limit_min,
            "stop_admitting_min": self.stop_admitting_min,
            "restore_reserve_min": self.restore_reserve_min,
            "per_block_limit_min": self.per_block_limit_min,
            "pair_reserve_s": self.pair_reserve_s,
            "dry_bound_s": self.dry_bound_s,
            "stages": [stage.to_json() for stage in self.stages],
        }
        # written only when given, so plans without them keep their digest
        if self.stop_admitting_if_overrun:
            data["stop_admitting_if_overrun"] = True
        if self.block_overrun != "next_block":
            data["block_overrun"] = self.block_overrun
        return data


@dataclass(frozen=True)
class Carry:
    """What a qualified admission carries to HEAD: files, path prefixes, AST units."""

    files: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    units: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"files": list(self.files), "prefixes": list(self.prefixes), "units": list(self.units)}


@dataclass(frozen=True)
class Power:
    """The registered power requirement (``[power]``, ``docs/power.md``): checked by the ``power`` gate."""

    effect: float                 # the true effect the window must be able to detect
    min_power: float = 0.8        # P(WIN) / P(CANDIDATE) at that effect, at least
    windows: int = 10_000         # simulated windows
    seed: int = 1                 # their seed: the same figures, bit for bit
    min_windows: int = 2          # archived windows with both control starts the spread must rest on

    def to_json(self) -> dict[str, Any]:
        return {"effect": self.effect, "min_power": self.min_power, "windows": self.windows, "seed": self.seed,
                "min_windows": self.min_windows}


@dataclass(frozen=True)
class WaveSpec:
    """One planned wave: what ``wave.measured`` for (start, cell, wave) must say."""

    index: int
    start: str
    role: ArmRole
    cell: str
    repeat: int
    wave: int
    family: str
    seed: int
    prompt_ids: tuple[str, ...]
    concurrency: int
    max_tokens: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.start, self.cell, self.wave)


@dataclass(frozen=True)
class Plan:
    """A validated plan. Build it with ``runner.plan.parse.load_plan`` or ``parse_plan``."""

    window_id: str
    protocol: ProtocolName
    mode: str
    commit: str
    chain: ChainMode
    production_clock_cap_mhz: int | None  # None: GPU clocks do not apply (the site declares clocks = false)
    sampling: Sampling
    arms: tuple[Arm, ...]
    starts: tuple[Start, ...]
    cells: tuple[Cell, ...]
    families: tuple[Family, ...]
    measurement: Measurement
    decision: dict[str, DecisionParam]
    budget: Budget
    required_gates: tuple[GateName, ...]
    qualification: Carry = field(default_factory=Carry)
    description: str = ""
    rng_tests: tuple[str, ...] = ()  # the test ids every RNG receipt must list as passed (``docs/gates.md``)
    power: Power | None = None  # registered only when declared, so plans without it keep their digest
    priming: Priming | None = None  # prefix priming per block (None: none registered)
    smoke: Smoke | None = None  # the smoke stage ([smoke], or implied by greedy_check starts)
    tag: str | None = None  # the git tag the hosts must have checked out at ``commit`` (checked at a chained start)
    kind: WindowKind | None = None  # what the window is for (None: not registered, a measurement window)
    pressure: Pressure | None = None  # pressure limits checked on every wave (None: none registered)
    # the identity paths every arm's first start must report equal to the plan's first start's (None: not
    # registered, the default: every member but the arms' switches, ``runner.gates.start_config.ARM_SWITCHES``)
    equal_identity: tuple[str, ...] | None = None
    # how a start's effective parameters and warm-up are attested (ATTEST_MODES; None: not registered,
    # ``where_reported``: what the server reports must equal the plan's, a server reporting none is recorded so)
    attest: str | None = None

    @property
    def attest_required(self) -> bool:
        """A start whose server reports none of its effective parameters (or no warm-up counter) fails."""
        return self.attest == "required"

    # ------------------------------------------------------------------ JSON

    @property
    def window_kind(self) -> WindowKind:
        """What the window is for: ``measurement`` unless the plan registers another kind."""
        return self.kind if self.kind is not None else "measurement"

    def to_json(self) -> dict[str, Any]:
        """The plan as registered (every default filled in)."""
        return {
            "window_id": self.window_id,
            "protocol": self.protocol,
            "mode": self.mode,
            "commit": self.commit,
            **({"tag": self.tag} if self.tag is not None else {}),   # only when registered: old digests stand
            **({"kind": self.kind} if self.kind is not None else {}),   # the same
            "chain": self.chain,
            "description": self.description,
            "production_clock_cap_mhz": self.production_clock_cap_mhz,
            "sampling": self.sampling.to_json(),
            "arms": [arm.to_json() for arm in self.arms],
            "starts": [start.to_json() for start in self.starts],
            "cells": [cell.to_json() for cell in self.cells],
            "families": [family.to_json() for family in self.families],
            "measurement": self.measurement.to_json(),
            "decision": {k: list(v) if isinstance(v, list) else v for k, v in self.decision.items()},
            "budget": self.budget.to_json(),
            "gates": self._gates_json(),
            "qualification": self.qualification.to_json(),
            # written only when registered, so plans without it keep their digest
            **({"priming": self.priming.to_json()} if self.priming is not None else {}),
            **({"smoke": self.smoke.to_json()} if self.smoke is not None and self.smoke.declared else {}),
            **({"pressure": self.pressure.to_json()} if self.pressure is not None else {}),
            **({"equal_identity": list(self.equal_identity)} if self.equal_identity is not None else {}),
            **({"attest": self.attest} if self.attest is not None else {}),
        } | ({"power": self.power.to_json()} if self.power is not None else {})

    def _gates_json(self) -> dict[str, Any]:
        # ``rng_tests`` only when registered: a plan without it keeps the digest it always had.
        gates: dict[str, Any] = {"required": list(self.required_gates)}
        if self.rng_tests:
            gates["rng_tests"] = list(self.rng_tests)
        return gates

    @cached_property
    def sha256(self) -> str:
        return plan_sha256(self.to_json())

    # ------------------------------------------------------------------ lookups

    def arm(self, role: str) -> Arm:
        for arm in self.arms:
            if arm.role == role:
                return arm
        raise KeyError(role)

    def start(self, start_id: str) -> Start:
        for start in self.run_starts:
            if start.id == start_id:
                return start
        raise KeyError(start_id)

    @cached_property
    def stage_starts(self) -> tuple[Start, ...]:
        """The smoke stage's own starts (one per arm of ``[smoke] arms``, in order; none without it).

        They measure no wave: each runs its arm's engine, attested as any start, for the probes."""
        if self.smoke is None or not self.smoke.own_stage:
            return ()
        return tuple(Start(stage_start_id(role), role) for role in self.smoke.arms)

    @cached_property
    def smoke_stage_ids(self) -> frozenset[str]:
        """The ids of :attr:`stage_starts`."""
        return frozenset(start.id for start in self.stage_starts)

    @property
    def run_starts(self) -> tuple[Start, ...]:
        """Every start the window runs, in order: the measurement starts, then the smoke stage's."""
        return self.starts + self.stage_starts

    def cell(self, name: str) -> Cell:
        return self._cells_by_name[name]  # KeyError for a cell the plan does not have

    def family(self, name: str) -> Family:
        return self._families_by_name[name]

    @cached_property
    def _cells_by_name(self) -> dict[str, Cell]:
        """name -> cell, built once: a lookup per wave stays O(1) however many cells (names are unique)."""
        return {cell.name: cell for cell in self.cells}

    @cached_property
    def _families_by_name(self) -> dict[str, Family]:
        return {family.name: family for family in self.families}

    @property
    def start_ids(self) -> tuple[str, ...]:
        return tuple(start.id for start in self.starts)

    @property
    def decision_cells(self) -> tuple[str, ...]:
        return tuple(cell.name for cell in self.cells if cell.decision)

    @property
    def control_role(self) -> str:
        return CONTROL_ROLE[self.mode]

    @property
    def decision_params(self) -> dict[str, DecisionParam]:
        """The rule's ``params`` exactly as the decision input takes them (``docs/rules.md``)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self.decision.items()}

    # ------------------------------------------------------------------ schedule

    def _families_for(self, cell_index: int) -> tuple[Family, ...]:
        families = self.families
        if self.measurement.rotate_families and families:
            shift = cell_index % len(families)
            families = families[shift:] + families[:shift]
        return families

    @cached_property
    def waves(self) -> tuple[WaveSpec, ...]:
        """Every planned wave in execution order (starts in order; within a start per ``order``).

        Wave numbers run 1..repeats x families per (start, cell): wave = (repeat-1) x F + i + 1
        for the i-th family of that cell; seed = seed_base + wave, the same for every start.
        """
        per_start: list[tuple[Cell, int, int, Family]] = []
        count = len(self.families)
        repeats = range(1, self.measurement.repeats + 1)
        cells = list(enumerate(self.cells))
        if self.measurement.order == "cell-major":
            for ci, cell in cells:
                for repeat in repeats:
                    for fi, family in enumerate(self._families_for(ci)):
                        per_start.append((cell, repeat, (repeat - 1) * count + fi + 1, family))
        else:
            for repeat in repeats:
                for ci, cell in cells:
                    for fi, family in enumerate(self._families_for(ci)):
                        per_start.append((cell, repeat, (repeat - 1) * count + fi + 1, family))
        out: list[WaveSpec] = []
        for start in self.starts:
            for cell, repeat, wave, family in per_start:
                out.append(WaveSpec(
                    index=len(out), start=start.id, role=start.role, cell=cell.name, repeat=repeat,
                    wave=wave, family=family.name, seed=self.sampling.seed_base + wave,
                    prompt_ids=family.orders.get(cell.context, ()), concurrency=cell.concurrency,
                    max_tokens=self.sampling.max_tokens,
                ))
        return tuple(out)

    def waves_of(self, start_id: str) -> tuple[WaveSpec, ...]:
        return self._waves_by_start.get(start_id, ())

    @cached_property
    def _waves_by_start(self) -> dict[str, tuple[WaveSpec, ...]]:
        grouped: dict[str, list[WaveSpec]] = {}
        for wave in self.waves:
            grouped.setdefault(wave.start, []).append(wave)
        return {start: tuple(waves) for start, waves in grouped.items()}

    @cached_property
    def wave_index(self) -> dict[tuple[str, str, int], WaveSpec]:
        """(start, cell, wave) -> planned wave."""
        return {w.key: w for w in self.waves}

    @cached_property
    def wave_position(self) -> dict[tuple[str, str, int], int]:
        """(start, cell, wave) -> its 0-based position among its start's waves."""
        out: dict[tuple[str, str, int], int] = {}
        for start in self.starts:
            for position, wave in enumerate(self.waves_of(start.id)):
                out[wave.key] = position
        return out


def plan_sha256(plan_json: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the JCS bytes of a plan's JSON form."""
    return hashlib.sha256(canonical(dict(plan_json), "plan")).hexdigest()
