"""The batch-aware step model: one engine's scheduler and step time, simulated (pure).

As vLLM's V1 scheduler (``vllm/v1/core/sched/scheduler.py``), there are no prefill and
decode phases: each engine step advances every scheduled request's computed tokens
within a token budget (``max_num_batched_tokens``) and a sequence budget
(``max_num_seqs``). Decodes are scheduled first (``1 + drafts`` tokens each), then the
running requests' unfinished prefills, then waiting requests (a long prompt is split
into chunks across steps: chunked prefill). Every scheduled token needs KV cache
blocks (16 tokens each); when a step cannot get them, the most recently admitted
running request is preempted: its blocks are freed and it goes back to the front of
the waiting queue, to be recomputed (prompt and generated tokens prefilled again).

A step takes ``fixed + per_token x decode tokens + per_prefill_token x prefill tokens
+ per_kv_token x KV tokens read`` model ms (:class:`StepCosts`); the fixed part is the
prefill fixed cost when the step carries prefill work, the decode one otherwise, so that
a batch of one reproduces the per-request model of :mod:`.model` exactly. Draft tokens
are batched tokens: a request drafting ``k`` schedules ``k + 1``.

Acceptance is drawn per request (:class:`Acceptance`): a request's rate ``q`` comes
from a Beta distribution (or a replayed trace), and each draft position is accepted
with probability ``q`` given the earlier ones were (prefix acceptance).

Nothing here reads a clock: :func:`simulate` runs a closed-loop workload (``concurrency``
clients, each sending its next request when the last one finished) or timed arrivals,
and returns every request's chunk times and the engine's per-step counts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "BLOCK_SIZE",
    "Acceptance",
    "Budgets",
    "EngineStep",
    "Job",
    "Outcome",
    "SimResult",
    "StepCosts",
    "simulate",
    "speculation_breakeven",
]

BLOCK_SIZE = 16   # vLLM's default KV block size (tokens)


@dataclass(frozen=True)
class StepCosts:
    """What one engine step costs (model ms)."""

    fixed_ms: float                     # a step of decodes only
    per_token_ms: float                 # per decode token scheduled (the sampled one and each draft)
    prefill_fixed_ms: float | None = None   # a step that carries prefill work (None: fixed_ms)
    per_prefill_token_ms: float = 0.0   # per prompt (or recomputed) token prefilled
    per_kv_token_us: float = 0.0        # per token of context the scheduled requests attend over

    def step_ms(self, decode_tokens: int, prefill_tokens: int, kv_tokens: int) -> float:
        fixed = self.fixed_ms if prefill_tokens == 0 or self.prefill_fixed_ms is None else self.prefill_fixed_ms
        return (fixed + self.per_token_ms * decode_tokens + self.per_prefill_token_ms * prefill_tokens
                + self.per_kv_token_us * kv_tokens / 1000.0)


@dataclass(frozen=True)
class Budgets:
    """The scheduler's budgets (vLLM's ``max_num_batched_tokens``, ``max_num_seqs``, KV blocks)."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    kv_blocks: int = 0                  # KV cache blocks of BLOCK_SIZE tokens (0: never short)


@dataclass(frozen=True)
class Acceptance:
    """A family's acceptance: each request's per-position rate ``q`` ~ Beta(rate, concentration).

    ``concentration`` 0 gives every request ``rate`` itself; ``trace`` (per-request rates
    recorded from a real server) is replayed in order, cycling, instead of drawing."""

    rate: float
    concentration: float = 0.0
    trace: tuple[float, ...] = ()

    def draw(self, rng: random.Random, index: int) -> float:
        if self.trace:
            return self.trace[index % len(self.trace)]
        if self.concentration <= 0 or self.rate <= 0 or self.rate >= 1:
            return self.rate
        return rng.betavariate(self.rate * self.concentration, (1 - self.rate) * self.concentration)

    def mean_accepted(self, k: int) -> float:
        """E[accepted per full-depth round] = E[q + q^2 + ... + q^k] (by sampling when spread)."""
        if self.trace:
            return sum(_geometric(q, k) for q in self.trace) / len(self.trace)
        if self.concentration <= 0:
            return _geometric(self.rate, k)
        rng = random.Random(0)
        draws = [self.draw(rng, i) for i in range(4000)]
        return sum(_geometric(q, k) for q in draws) / len(draws)


def _geometric(q: float, k: int) -> float:
    return sum(q ** i for i in range(1, k + 1))


@dataclass(frozen=True)
class Job:
    """One request of a workload."""

    prompt_tokens: int
    max_tokens: int
    arrival_ms: float | None = None     # timed arrival; None: closed loop (sent when a client is free)
    family: str = ""


@dataclass
class Outcome:
    """One request as the engine served it (model ms from the start of the simulation)."""

    index: int
    job: Job
    rate: float
    arrival_ms: float = 0.0
    chunk_ms: list[float] = field(default_factory=list)     # when each output chunk was emitted
    chunk_tokens: list[int] = field(default_factory=list)
    drafts: list[int] = field(default_factory=list)         # per decode step: drafts scheduled
    accepted: list[int] = field(default_factory=list)       # per decode step: drafts accepted
    preemptions: int = 0
    finished_ms: float | None = None

    @property
    def ttft_ms(self) -> float:
        return self.chunk_ms[0] - self.arrival_ms

    @property
    def generated(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def tpot_ms(self) -> float | None:
        """(last chunk - first chunk) / (tokens - 1), as ``vllm bench serve`` counts it."""
        if self.generated < 2:
            return None
        return (self.chunk_ms[-1] - self.chunk_ms[0]) / (self.generated - 1)

    @property
    def itl_ms(self) -> list[float]:
        """Gaps between consecutive chunks (one engine step each)."""
        return [b - a for a, b in zip(self.chunk_ms, self.chunk_ms[1:], strict=False)]

    @property
    def accepted_per_round(self) -> float | None:
        rounds = [a for a, d in zip(self.accepted, self.drafts, strict=True) if d > 0]
        return sum(rounds) / len(rounds) if rounds else None


@dataclass(frozen=True)
class EngineStep:
    """One engine step: what it scheduled and what it took (what ``/metrics`` counts)."""

    start_ms: float
    duration_ms: float
    running: int
    waiting: int
    prefill_tokens: int
    decode_tokens: int
    kv_tokens: int
    kv_blocks_used: int
    drafts: int
    draft_tokens: int
    accepted: int
    preempted: int

    @property
    def batched_tokens(self) -> int:   # vllm:iteration_tokens_total's sample
        return self.prefill_tokens + self.decode_tokens


@dataclass(frozen=True)
class SimResult:
    outcomes: tuple[Outcome, ...]
    steps: tuple[EngineStep, ...]

    @property
    def preemptions(self) -> int:
        return sum(s.preempted for s in self.steps)


@dataclass
class _Live:
    out: Outcome
    computed: int = 0          # tokens whose KV is in the cache
    held: int = 0              # KV blocks held (computed tokens and those scheduled this step)
    admitted_order: int = 0

    @property
    def target(self) -> int:   # tokens to have computed before sampling the next one
        return self.out.job.prompt_tokens + self.out.generated

    @property
    def prefilling(self) -> bool:
        return self.computed < self.target - (1 if self.out.generated else 0)


def simulate(jobs: Sequence[Job], *, k: int, costs: StepCosts, budgets: Budgets = Budgets(),
             acceptance: Acceptance | dict[str, Acceptance] = Acceptance(0.0), concurrency: int = 1,
             seed: int = 0, jitter: float = 0.0, max_steps: int = 2_000_000,
             draft_rate: float = 1.0) -> SimResult:
    """Serve ``jobs`` on one engine; closed loop with ``concurrency`` clients (timed jobs arrive on time).

    ``draft_rate``: the share of decode steps that draft (each decides on its own; 1: every step)."""
    rng = random.Random(seed)
    draw_rng = random.Random(f"{seed}|acceptance")
    draft_rng = random.Random(f"{seed}|drafting")   # drawn only when draft_rate < 1: other results unchanged
    families = acceptance if isinstance(acceptance, dict) else {}
    default = acceptance if isinstance(acceptance, Acceptance) else next(iter(acceptance.values()), Acceptance(0.0))
    outcomes = [Outcome(i, job, (families.get(job.family) or default).draw(draw_rng, i)) for i, job in enumerate(jobs)]
    timed = sorted((o for o in outcomes if o.job.arrival_ms is not None), key=lambda o: (o.job.arrival_ms, o.index))
    loop = [o for o in outcomes if o.job.arrival_ms is None]
    for o in timed:
        o.arrival_ms = float(o.job.arrival_ms or 0.0)
    clients = min(concurrency, len(loop)) if loop else 0
    for o in loop[:clients]:
        o.arrival_ms = 0.0
    pending = loop[clients:]
    arrivals = sorted(timed + loop[:clients], key=lambda o: (o.arrival_ms, o.index))
    waiting: list[_Live] = []
    running: list[_Live] = []
    steps: list[EngineStep] = []
    now = 0.0
    order = 0
    blocks_used = 0

    def blocks(tokens: int) -> int:
        return -(-tokens // BLOCK_SIZE)

    while arrivals or waiting or running:
        if len(steps) >= max_steps:
            raise RuntimeError("the step model ran past its step limit")
        while arrivals and arrivals[0].arrival_ms <= now:
            waiting.append(_Live(arrivals.pop(0)))
        if not waiting and not running:
            now = arrivals[0].arrival_ms
            continue
        budget = budgets.max_num_batched_tokens
        plan: list[tuple[_Live, int, int]] = []   # (request, tokens scheduled, drafts among them)
        preempted = 0
        # 1. decodes first, then unfinished prefills of running requests (admission order)
        for phase in ("decode", "prefill"):
            for live in list(running):
                if live not in running or (phase == "decode") == live.prefilling:
                    continue
                if phase == "decode":
                    remaining = live.out.job.max_tokens - live.out.generated
                    drafts = min(k, remaining - 1) if k > 0 else 0
                    if drafts and draft_rate < 1.0 and draft_rng.random() >= draft_rate:
                        drafts = 0
                    want, n_drafts = 1 + drafts, drafts
                else:
                    want, n_drafts = live.target - live.computed, 0
                    want = min(want, budget)
                if want <= 0 or (phase == "decode" and want > budget):
                    continue
                # KV for the new tokens; preempt the latest admitted request until it fits
                need = blocks(live.computed + want) - live.held
                while budgets.kv_blocks and blocks_used + need > budgets.kv_blocks:
                    victim = max(running, key=lambda r: r.admitted_order)
                    blocks_used -= victim.held
                    victim.computed = victim.held = 0
                    victim.out.preemptions += 1
                    preempted += 1
                    running.remove(victim)
                    waiting.insert(0, victim)
                    plan = [p for p in plan if p[0] is not victim]
                    if victim is live:
                        break
                if live not in running:
                    continue
                blocks_used += need
                live.held += need
                plan.append((live, want, n_drafts))
                budget -= want
        # 2. waiting requests, while sequences, tokens and blocks allow (FCFS: stop at the first that cannot)
        while waiting and budget > 0 and len(running) < budgets.max_num_seqs and not preempted:
            live = waiting[0]
            want = min(live.target - live.computed, budget)
            need = blocks(live.computed + want) - live.held
            if budgets.kv_blocks and blocks_used + need > budgets.kv_blocks:
                break
            waiting.pop(0)
            order += 1
            live.admitted_order = order
            running.append(live)
            blocks_used += need
            live.held += need
            plan.append((live, want, 0))
            budget -= want
        if not plan:
            if not arrivals or running:
                raise RuntimeError("nothing can be scheduled: a request needs more KV cache or token budget "
                                   "than the engine has")
            now = max(now, arrivals[0].arrival_ms)
            continue
        decode_tokens = sum(t for live, t, _d in plan if not live.prefilling)
        prefill_tokens = sum(t for live, t, _d in plan if live.prefilling)
        kv_tokens = sum(live.computed + t for live, t, _d in plan)
        duration = costs.step_ms(decode_tokens, prefill_tokens, kv_tokens)
        if jitter > 0:
            duration *= max(0.2, 1.0 + rng.gauss(0.0, jitter))
        start = now
        now += duration
        drafts_total = draft_tokens = accepted_total = 0
        for live, scheduled, n_drafts in plan:
            out = live.out
            was_prefilling = live.prefilling
            live.computed += scheduled
            if was_prefilling and live.computed < live.target:
                continue                      # a chunk of a longer prefill: nothing sampled yet
            accepted = 0
            if not was_prefilling:
                for _ in range(n_drafts):
                    if draw_rng.random() < out.rate:
                        accepted += 1
                    else:
                        break
                # rejected drafts' KV is dropped: only the sampled and accepted tokens stay computed
                live.computed -= n_drafts - accepted
                blocks_used -= live.held - blocks(live.computed)
                live.held = blocks(live.computed)
                out.drafts.append(n_drafts)
                out.accepted.append(accepted)
                if n_drafts:
                    drafts_total += 1
                    draft_tokens += n_drafts
                    accepted_total += accepted
            emitted = min(1 + accepted, out.job.max_tokens - out.generated)
            out.chunk_ms.append(now)
            out.chunk_tokens.append(emitted)
            if out.generated >= out.job.max_tokens:
                out.finished_ms = now
                running.remove(live)
                blocks_used -= live.held
                live.held = 0
                if pending:
                    nxt = pending.pop(0)
                    nxt.arrival_ms = now
                    arrivals.append(nxt)
                    arrivals.sort(key=lambda o: (o.arrival_ms, o.index))
        steps.append(EngineStep(start, duration, len(running), len(waiting), prefill_tokens, decode_tokens, kv_tokens,
                                blocks_used, drafts_total, draft_tokens, accepted_total, preempted))
    return SimResult(tuple(outcomes), tuple(steps))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def speculation_breakeven(costs: StepCosts, k: int, accepted: float, context_tokens: float) -> float:
    """The concurrency at which speculation stops paying, in steady decode (``math.inf``: it always pays).

    Without drafts a step of ``c`` requests takes ``F + c t + c K u`` for one token each; with ``k`` drafts
    ``F + c (k + 1) t + c K u`` for ``1 + A`` tokens each (``A`` accepted per round, ``K`` the context each
    request reads, ``u`` the per-KV-token cost). Equal per-token times give ``c* = A F / ((k - A) t - A K u)``.
    """
    u = costs.per_kv_token_us / 1000.0
    denominator = (k - accepted) * costs.per_token_ms - accepted * context_tokens * u
    if denominator <= 0:
        return math.inf
    return accepted * costs.fixed_ms / denominator
