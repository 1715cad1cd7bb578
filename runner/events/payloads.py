"""Typed payloads of the window event catalogue (one example each in ``docs/events.md``).

One payload class (``runner.events.schema.payload``: a frozen, keyword-only dataclass)
per event type. Fields without a default are required; ``X | None`` members may be
null; ``Sha256``/``Commit``/``Time`` are strings with a checked shape. Every window
event carries ``window`` and ``plan_sha256`` (``WindowPayload``): producers leave them
out and the window's log adds them. ``runner.events.schema`` compiles these classes
into validators and turns instances into payloads and back; the runner builds its
events from them and the state fold reads them, so both ends are type-checked.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from ..vocabulary import (
    ArmRole,
    BudgetAction,
    CounterSourceName,
    Ending,
    GateName,
    GateVerdict,
    InterruptReason,
    MeasurementEndReason,
    ProtocolName,
    RequestStatus,
    RestoreStatus,
    SmokeOutcome,
    SmokeProbe,
    SnapshotSource,
    ThermalKind,
    TokenCountSource,
)
from .schema import payload

if TYPE_CHECKING:
    from ledger.store import Blob

__all__ = [
    "ArchiveControlStart",
    "ArchiveImported",
    "BlobRef",
    "BudgetDecision",
    "ChainAborted",
    "ChainMarkerCleared",
    "ChainMarkerSet",
    "ChunkIntervals",
    "ClientFigures",
    "CounterSourceInfo",
    "Counters",
    "DecisionRecorded",
    "GateResult",
    "HoldClosed",
    "HoldOpened",
    "HostAction",
    "HostLoad",
    "MeasurementEnded",
    "ParamsAttested",
    "Placeholder",
    "PressureCrossed",
    "PrimingDone",
    "PrimingRequest",
    "ProductionSnapshot",
    "ProductionState",
    "RequestSummary",
    "RestoreFinished",
    "ServerGauges",
    "SmokeResult",
    "StartBegan",
    "StartEnded",
    "ThermalEvent",
    "WarmupDone",
    "WarmupServed",
    "WatchResult",
    "WaveGauges",
    "WaveMeasured",
    "WindowAdmitted",
    "WindowClosed",
    "WindowInterrupted",
    "WindowPayload",
    "WindowRegistered",
]

# Shapes checked by the catalogue (the metadata is the regular expression).
Sha256 = Annotated[str, r"[0-9a-f]{64}"]
Commit = Annotated[str, r"[0-9a-f]{40}|[0-9a-f]{64}"]
Time = Annotated[str, r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"]
BlobName = Annotated[str, r"sha256:[0-9a-f]{64}"]
Name = Annotated[str, r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"]



@payload
class BlobRef:
    """``{"blob": "sha256:<hex>", "size": n, "media_type": "..."}`` (``docs/format.md``, blobs)."""

    blob: BlobName
    size: int
    media_type: str

    @classmethod
    def of(cls, blob: Blob) -> BlobRef:
        """How a payload refers to ``blob``."""
        return cls(blob=f"sha256:{blob.sha256}", size=len(blob.data), media_type=blob.media_type)


@payload
class WindowPayload:
    """Members every window event carries."""

    window: Name = ""          # always present on the wire; filled in by the window's log
    plan_sha256: Sha256 = ""


# ---------------------------------------------------------------------- registration and gates


@payload
class WindowRegistered(WindowPayload):
    plan: dict[str, Any]
    source: BlobRef | None = None
    family_files: dict[str, BlobRef] = field(default_factory=dict)


@payload
class GateResult(WindowPayload):
    gate: GateName
    verdict: GateVerdict
    evidence: dict[str, Any]
    summary: str = ""
    commit: Commit | None = None
    start: Name | None = None
    receipt: BlobRef | None = None


@payload
class WindowAdmitted(WindowPayload):
    commit: Commit
    gates: dict[str, int]
    under_marker: bool = False


# ---------------------------------------------------------------------- HOLD, production, hosts


@payload
class HoldOpened(WindowPayload):
    owner: Name
    hosts: list[str] = field(default_factory=list)
    allow_unreachable: list[str] = field(default_factory=list)
    from_marker: bool = False
    rollback_preflight: Literal["none"] | None = None   # "none": the site has no restore_check (nothing checked)


@payload
class HoldClosed(WindowPayload):
    owner: Name
    reason: str = ""


@payload
class ProductionSnapshot(WindowPayload):
    sha256: Sha256
    source: SnapshotSource
    identity: dict[str, Any] = field(default_factory=dict)
    blob: BlobRef | None = None


@payload
class ProductionState(WindowPayload):
    state: Literal["up", "down"]
    proof: dict[str, Any]
    host: str | None = None


@payload
class HostAction(WindowPayload):
    """One half of a host action; ``action_id`` pairs ``started`` with ``finished``."""

    host: str
    action: str
    phase: Literal["started", "finished"]
    action_id: str
    exit_code: int | None = None
    output: BlobRef | None = None
    ok: bool | None = None
    duration_s: float | None = None
    command: str | None = None
    probe_of: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def check(p: dict[str, Any]) -> list[tuple[str, str]]:
        """Cross-member rules, on the validated JSON payload."""
        problems = []
        if p["phase"] == "started":
            for name in ("exit_code", "ok", "duration_s", "output"):
                if p.get(name) is not None:
                    problems.append((name, "belongs to the finished half of the action"))
        else:
            if p.get("ok") is None:
                problems.append(("ok", "required when phase is finished"))
            if p.get("duration_s") is None:
                problems.append(("duration_s", "required when phase is finished"))
        return problems


# ---------------------------------------------------------------------- starts and waves


@payload
class StartBegan(WindowPayload):
    start: Name
    role: ArmRole
    clock_cap_mhz: int | None
    spec_config_sha256: Sha256
    spec_config: dict[str, Any] | None = None
    config_digest: Sha256 | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    log: BlobRef | None = None
    clock: dict[str, Any] | None = None   # every host's own reading ({hosts, problems}; a problem fails the start)


@payload
class WarmupServed:
    """Whether the start's engine served the warm-up: its own request counter across the warm-up action."""

    attested: bool                       # the counter was read before and after, and the site said how many
    ok: bool                             # attested and risen enough, or not attested where the plan allows it
    detail: str                          # one line: what was read and what it shows
    series: str | None = None            # the counter read (vllm:request_success_total, ...)
    counts: str | None = None            # what it counts: "requests", or "tokens" (one per request at least)
    before: float | None = None
    after: float | None = None


@payload
class WarmupDone(WindowPayload):
    start: Name
    cold_ttft_s: float | None
    warm_ttft_s: float | None
    requests: int = 0
    served: WarmupServed | None = None   # recorded by runners that attest the warm-up (older ledgers: absent)


@payload
class ParamsAttested(WindowPayload):
    """A start's effective parameters, as its server reports them, against the plan's (before its warm-up).

    ``reported``: what the server's own endpoints said (``/v1/models``, ``/metrics`` info series,
    ``/server_info``), bounded; ``checks``: each parameter compared (``param``, ``plan``,
    ``reported``, ``source``, ``ok``); ``none_reported``: the server reported none of them.
    """

    start: Name
    ok: bool
    reported: dict[str, Any]
    checks: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    none_reported: bool = False
    required: bool = False               # the plan requires attestation (attest = "required")
    sampling: dict[str, Any] = field(default_factory=dict)   # the engine-side fields every request carries


@payload
class PrimingRequest:
    """One priming request of a block: what its server said the prompt occupies, and its prefill time."""

    cell: Name
    family: Name
    prompt_id: str
    repeat: int                          # 1..priming.requests (identical requests, in order)
    status: RequestStatus
    prompt_tokens: int | None            # usage.prompt_tokens (null: the server reported none)
    declared_tokens: int                 # the cell's declared context size
    ttft_s: float | None                 # its time to first token: the (cold, then primed) prefill
    reason: str | None = None


@payload
class PrimingDone(WindowPayload):
    """A block's prefix priming (plan ``[priming]``): identical requests under the block's ``cache_salt``."""

    start: Name
    cache_salt: str
    ok: bool                             # every request ok and every occupied count as declared
    requests: list[PrimingRequest]
    failures: list[str] = field(default_factory=list)   # what did not verify, one line each
    records: BlobRef | None = None       # the priming requests' full records (application/x-ndjson)


@payload
class StartEnded(WindowPayload):
    start: Name
    role: ArmRole
    ok: bool = True
    truncated: bool = False
    reason: str = ""


@payload
class Counters:
    rounds: int | None
    accepted: int | None
    draft_tokens: int | None
    accepted_per_pos: list[int] | None
    decode_s: float | None
    generation_tokens: int | None
    drafts: int | None = None   # draft-verification steps (vLLM: = rounds; llama.cpp: fewer than its decode steps)
    accepted_delivered: int | None = None   # accepted capped at the drafts delivered (docs/measure.md)


@payload
class ChunkIntervals:
    p50: float
    p95: float
    p99: float


@payload
class ClientFigures:
    requests: int
    ok: int
    failed: int
    timed_out: int
    cancelled: int
    censored: int
    delivered_tokens: int
    tokens_after_first: int
    decode_s: float
    decode_tps: float | None
    ttft_s: list[float]
    chunk_interval_ms: ChunkIntervals | None
    tokens_per_chunk: float | None
    token_itl_ms: ChunkIntervals | None = None          # per-token intervals (docs/measure.md), p50/p95/p99
    tpot_ms: ChunkIntervals | None = None               # vllm bench serve's TPOT per ok request, p50/p95/p99
    token_count_sources: dict[str, int] | None = None   # how chunk tokens were counted: requests per way
    bounded: int = 0                                    # requests cut by the plan's decode bound (written when > 0)
    # a server streaming reasoning apart (vLLM's reasoning parser): the delivered tokens that were reasoning and
    # those that were the answer, over the requests it streamed reasoning for (written only then)
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None


@payload
class RequestSummary:
    index: int
    prompt_id: str
    status: RequestStatus
    delivered_tokens: int
    decode_s: float | None
    ttft_s: float | None
    round_ms_p95: float | None          # null when the counter source says chunks are not engine steps
    finish_reason: str | None
    reason: str | None
    chunk_ms_p95: float | None = None   # p95 of the per-chunk intervals, whatever a chunk is
    token_itl_ms_p95: float | None = None   # p95 of the per-token intervals
    tpot_ms: float | None = None        # (E2EL - TTFT) / (delivered tokens - 1), ms
    token_count_source: TokenCountSource | None = None
    # written only when the server streamed reasoning apart (a diagnostic; delivered_tokens stays the total):
    reasoning_tokens: int | None = None   # delivered tokens that were reasoning
    answer_tokens: int | None = None      # delivered tokens that were the answer
    first_answer_s: float | None = None   # send to the first answer chunk (null: no answer arrived)


@payload
class CounterSourceInfo:
    """Where a wave's server counters came from and how each was derived."""

    name: CounterSourceName
    speculative: bool | None            # what the runner said of the arm (null: nothing)
    counts_rounds: bool                 # the source can count a speculative arm's rounds at all
    chunks_are_steps: bool              # one streamed chunk is one engine step on this source
    derived: dict[str, str]             # counter -> how it was obtained from which series
    resolution: dict[str, float] = field(default_factory=dict)   # counter -> +/- of its delta (printed digits)
    first_tokens: int | None = None     # requests whose first token arrived (subtracted in derived rounds)
    absent: str | None = None           # why no server counters were read (source none)


@payload
class ServerGauges:
    running: float | None               # requests running on the server
    waiting: float | None               # requests waiting (queued, deferred)
    kv_cache_usage: float | None        # KV-cache usage, 0..1 (largest over engines)


@payload
class WaveGauges:
    """The server's gauges just before and just after the wave (null: not read)."""

    before: ServerGauges | None
    after: ServerGauges | None
    series: dict[str, str | None] = field(default_factory=dict)   # gauge -> the series read


@payload
class HostLoad:
    """The runner host's load average (1, 5, 15 min) before and after the wave."""

    before: list[float] | None
    after: list[float] | None
    cpus: int | None = None


@payload
class WaveMeasured(WindowPayload):
    """One wave (start x cell x wave); its members are a contract (``docs/events.md``)."""

    start: Name
    cell: Name
    repeat: int
    wave: int
    family: Name
    seed: int
    max_tokens: int
    concurrency: int
    started_at: Time
    ended_at: Time
    counters: Counters
    counters_missing: list[str]
    complete: bool
    incomplete_reasons: list[str]
    client: ClientFigures
    requests: list[RequestSummary]
    records: BlobRef
    engine: dict[str, Any] | None = None  # the engine seen serving before and after the wave (attestation)
    counter_source: CounterSourceInfo | None = None   # absent in older ledgers: vLLM's series
    gauges: WaveGauges | None = None
    host_load: HostLoad | None = None
    # two metrics URLs or more (engines, hosts): each one's own deltas ({url, series, problems}); counters is their sum
    counters_by_url: list[dict[str, Any]] | None = None

    @staticmethod
    def check(p: dict[str, Any]) -> list[tuple[str, str]]:
        """Cross-member rules, on the validated JSON payload."""
        problems = []
        c = p["client"]
        if c["requests"] != len(p["requests"]):
            problems.append(("client.requests", f"{c['requests']} but {len(p['requests'])} request records"))
        if c["ok"] + c["failed"] + c["timed_out"] + c["cancelled"] + c["censored"] + c.get("bounded", 0) \
                != c["requests"]:
            problems.append(("client", "ok + failed + timed_out + cancelled + censored + bounded != requests"))
        if p["ended_at"] < p["started_at"]:
            problems.append(("ended_at", "before started_at"))
        return problems


@payload
class SmokeResult(WindowPayload):
    """One probe of the smoke stage on one start (``docs/smoke.md``); its exchanges travel as ``evidence``.

    ``outcome``: ``pass``, ``fail`` (named by ``kind``: greedy-identity, grammar, stop,
    lifecycle), ``near_tie`` (a greedy divergence within the registered margin) or
    ``recorded`` (the greedy reference start: nothing to compare with yet).
    """

    start: Name
    role: ArmRole
    probe: SmokeProbe
    outcome: SmokeOutcome
    kind: str
    summary: str
    checks: dict[str, Any] = field(default_factory=dict)
    reference: Name | None = None      # greedy identity: the start compared with
    position: int | None = None        # greedy identity: the first divergent position (0-based)
    margin: float | None = None        # the top-2 logprob margin there (nats), where the server gives logprobs
    evidence: BlobRef | None = None


@payload
class ThermalEvent(WindowPayload):
    host: str
    kind: ThermalKind
    clock_cap_mhz: int | None = None
    at: Time | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@payload
class MeasurementEnded(WindowPayload):
    reason: MeasurementEndReason
    waves: int


@payload
class BudgetDecision(WindowPayload):
    """A decision of the budget clock, with its reason."""

    action: BudgetAction
    reason: str
    elapsed_min: float
    limit_min: float
    start: Name | None = None
    cell: Name | None = None


@payload
class PressureCrossed(WindowPayload):
    """A wave over one of the plan's ``[pressure]`` limits: measuring stops, and the window ends safely.

    ``crossed``: one line per limit crossed (the gauge or share, when it was read, its value
    and the limit; a gauge a limit needs that was not read counts as crossed); ``limits``:
    the plan's limits as registered.
    """

    start: Name
    cell: Name
    wave: int
    crossed: list[str]
    limits: dict[str, Any]

    @property
    def line(self) -> str:
        """``s1 short-b1 wave 3: waiting 9 before the wave, over the limit 4`` (the fold, the rule input, the
        causes and the run's output say it so)."""
        return f"{self.start} {self.cell} wave {self.wave}: " + "; ".join(self.crossed)


# ---------------------------------------------------------------------- endings and chain


@payload
class Placeholder(WindowPayload):
    host: str
    proof: dict[str, Any] = field(default_factory=dict)


@payload
class ChainMarkerSet(WindowPayload):
    production_snapshot_sha256: Sha256
    hosts: list[str] = field(default_factory=list)


@payload
class ChainMarkerCleared(WindowPayload):
    production_snapshot_sha256: Sha256 | None = None
    watch_seq: int | None = None


@payload
class ChainAborted(WindowPayload):
    reason: str
    marker_window: Name | None = None


@payload
class RestoreFinished(WindowPayload):
    status: RestoreStatus
    attempts: int = 1
    production_snapshot_sha256: Sha256 | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@payload
class WatchResult(WindowPayload):
    verdict: GateVerdict
    evidence: dict[str, Any] = field(default_factory=dict)


@payload
class WindowInterrupted(WindowPayload):
    reason: InterruptReason
    signal: str | None = None
    phase: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@payload
class WindowClosed(WindowPayload):
    ending: Ending
    summary: str = ""


@payload
class DecisionRecorded(WindowPayload):
    rule: ProtocolName
    params: dict[str, Any]
    inputs_digest: Sha256
    input: dict[str, Any]
    result: dict[str, Any]
    input_builder: int | None = None  # absent: builder 1 (see runner.decide.inputs)


@payload
class ArchiveControlStart(WindowPayload):
    """A finished control start, for the archive's day-to-day spread (stream ``archive``)."""

    start: Name
    role: ArmRole
    cell: Name
    max_tokens: int
    commit: Commit
    clock_cap_mhz: int | None            # the cap it really ran at (the lowest dial-back's, if any)
    figures: dict[str, Any]
    # the comparability key's other members (runner.state.archive.comparability_key), and the dial-back flag
    control_config_digest: Sha256 | None = None
    production_commit: Commit | None = None
    dial_back: bool = False                # a thermal dial-back during the start: not in the day-to-day spread
    nominal_clock_cap_mhz: int | None = None   # the cap the start began at, when a dial-back lowered it


@payload
class ArchiveImported(WindowPayload):
    """Rows of an existing control archive file (``tally archive import``); ``window`` names the import and
    ``plan_sha256`` is the source file's sha256 (an import has no plan)."""

    source: BlobRef
    rows: list[dict[str, Any]]
    filename: str = ""
    mapping: BlobRef | None = None          # the --map file the rows were mapped by (its TOML, kept)
    mapped_cells: dict[str, str] = field(default_factory=dict)   # source cell -> plan cell, as mapped
