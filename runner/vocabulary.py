"""The closed vocabularies of tally, in one place: each a ``Literal`` and the tuple of its words.

Plans, event payloads, the fold, the rules and the measurement client all use these
names, so a word means one thing everywhere: ``ArmRole`` is a plan arm's role (A
control, B candidate, P production policy); a win2-v1 metric's role in the decision is
a ``MetricRole``. The tuples (``ARM_ROLES``...) are ``get_args`` of their ``Literal``,
so the two can never disagree. ``docs/events.md`` and ``docs/plan.md`` list them too.

A foundation module: it imports nothing of tally, and every layer may import it.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "ARM_ROLES",
    "BUDGET_ACTIONS",
    "CHAIN_MODES",
    "CORRECTIONS",
    "COUNTER_SOURCES",
    "DECIDE_MODES",
    "DECISION_REQUEST_STATUSES",
    "ENDINGS",
    "GATES",
    "GATE_VERDICTS",
    "INTERRUPT_REASONS",
    "MEASUREMENT_END_REASONS",
    "PHASES",
    "PP3_DECISIONS",
    "PROTOCOLS",
    "REQUEST_STATUSES",
    "SMOKE_OUTCOMES",
    "SMOKE_PROBES",
    "SNAPSHOT_SOURCES",
    "STAGE_KINDS",
    "STRUCTURED_FIELDS",
    "TOKEN_COUNT_SOURCES",
    "WAVE_ORDERS",
    "WIN2_DECISIONS",
    "WIN2_METRICS",
    "WINDOW_KINDS",
    "ArmRole",
    "BudgetAction",
    "ChainMode",
    "Correction",
    "CounterSourceName",
    "DecideMode",
    "DecisionRequestStatus",
    "EffectVerdict",
    "Ending",
    "GateName",
    "GateVerdict",
    "GuardVerdict",
    "InterruptReason",
    "MeasurementEndReason",
    "MetricRole",
    "Phase",
    "Pp3Decision",
    "ProtocolName",
    "RequestStatus",
    "RestoreStatus",
    "SmokeOutcome",
    "SmokeProbe",
    "SnapshotSource",
    "StageKind",
    "StructuredField",
    "ThermalKind",
    "TokenCountSource",
    "WaveOrder",
    "Win2Decision",
    "Win2Metric",
    "WindowKind",
    "multiplicity_problem",
]

# ---------------------------------------------------------------------- plans

ProtocolName = Literal["win2-v1", "pp3-v1"]
ArmRole = Literal["A", "B", "P"]
ChainMode = Literal["none", "chained", "last"]
GateName = Literal["qualification", "rng", "budget", "rehearsal", "standard_spec", "chain_prev_ok", "start_config",
                   "power"]
StageKind = Literal["setup", "measure", "smoke", "restore", "close"]
"""Budget stages in their order; ``smoke`` is the smoke stage of its own (``[smoke] arms``), after the blocks."""
WaveOrder = Literal["cell-major", "repeat-major"]
WindowKind = Literal["measurement", "admission", "pair-only"]

PROTOCOLS: tuple[ProtocolName, ...] = get_args(ProtocolName)
ARM_ROLES: tuple[ArmRole, ...] = get_args(ArmRole)
CHAIN_MODES: tuple[ChainMode, ...] = get_args(ChainMode)
GATES: tuple[GateName, ...] = get_args(GateName)
STAGE_KINDS: tuple[StageKind, ...] = get_args(StageKind)
WAVE_ORDERS: tuple[WaveOrder, ...] = get_args(WaveOrder)
WINDOW_KINDS: tuple[WindowKind, ...] = get_args(WindowKind)
"""What a window is for (seed 000): a measurement window may chain; an admission or a pair-only window
never does (its receipts need the restore and the watch), so its ending is always restore + watch."""

# ---------------------------------------------------------------------- gates and window state

GateVerdict = Literal["PASS", "FAIL"]
Phase = Literal[
    "unregistered", "registered", "admitted", "holding", "measuring", "measurement_ended", "closing",
    "restored", "chained", "aborted", "decided",
]
Ending = Literal["restored", "chained", "aborted"]
SnapshotSource = Literal["drain", "marker", "capture"]
ThermalKind = Literal["dial_back", "recovered", "malformed"]
MeasurementEndReason = Literal["complete", "stop_admitting", "hard_limit", "interrupted", "aborted", "failed",
                               "truncated", "pressure"]
BudgetAction = Literal["stop_admitting", "truncate_block", "begin_restore"]
RestoreStatus = Literal["ok", "failed"]
InterruptReason = Literal["signal", "crash", "abort", "error"]

GATE_VERDICTS: tuple[GateVerdict, ...] = get_args(GateVerdict)
PHASES: tuple[Phase, ...] = get_args(Phase)
ENDINGS: tuple[Ending, ...] = get_args(Ending)
SNAPSHOT_SOURCES: tuple[SnapshotSource, ...] = get_args(SnapshotSource)
MEASUREMENT_END_REASONS: tuple[MeasurementEndReason, ...] = get_args(MeasurementEndReason)
BUDGET_ACTIONS: tuple[BudgetAction, ...] = get_args(BudgetAction)
INTERRUPT_REASONS: tuple[InterruptReason, ...] = get_args(InterruptReason)

# ---------------------------------------------------------------------- measurement

# ``bounded``: cut by the plan's decode bound (a registered observation), not by an unintended deadline.
RequestStatus = Literal["ok", "failed", "timeout", "cancelled", "censored", "bounded"]
REQUEST_STATUSES: tuple[RequestStatus, ...] = get_args(RequestStatus)
# A decision input also knows requests the plan registered and nothing recorded.
DecisionRequestStatus = Literal["ok", "censored", "failed", "timeout", "cancelled", "lost", "bounded"]
DECISION_REQUEST_STATUSES: tuple[DecisionRequestStatus, ...] = get_args(DecisionRequestStatus)
# Where a site's server counters come from (a site endpoint's ``counter_source``).
CounterSourceName = Literal["vllm", "llamacpp", "sglang", "none"]
COUNTER_SOURCES: tuple[CounterSourceName, ...] = get_args(CounterSourceName)
# How the tokens of each streamed chunk were counted.
TokenCountSource = Literal["token_ids", "usage_deltas", "tokenizer", "one_per_chunk", "none"]
TOKEN_COUNT_SOURCES: tuple[TokenCountSource, ...] = get_args(TokenCountSource)

# ---------------------------------------------------------------------- decisions

Win2Decision = Literal["WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE"]
Pp3Decision = Literal["CANDIDATE", "NO_PROMOTION", "REJECT"]
EffectVerdict = Literal["WIN", "LOSS", "NO_CHANGE"]
GuardVerdict = Literal["LOSS", "OK"]
MetricRole = Literal["primary", "guard", "reported"]

WIN2_DECISIONS: tuple[Win2Decision, ...] = get_args(Win2Decision)
PP3_DECISIONS: tuple[Pp3Decision, ...] = get_args(Pp3Decision)

# win2-v1's metrics, and how a plan deciding on several primaries combines them (docs/rules.md 2.7)
Win2Metric = Literal["pooled_rate_tps", "accepted_per_round", "decode_tps", "ms_per_round", "ttft_s"]
Correction = Literal["holm", "bonferroni", "none"]
DecideMode = Literal["all", "any"]
WIN2_METRICS: tuple[Win2Metric, ...] = get_args(Win2Metric)
CORRECTIONS: tuple[Correction, ...] = get_args(Correction)
DECIDE_MODES: tuple[DecideMode, ...] = get_args(DecideMode)


def multiplicity_problem(primaries: int, correction: str, decide: str) -> tuple[str, str] | None:
    """The (field, problem) that makes a registered set of primaries unusable, or ``None``.

    ``decide = "any"`` over more than one primary claims a WIN when any one of them wins:
    without a correction the chance of a false WIN grows with the number of primaries, so
    ``correction = "none"`` is refused there (plan parse and rule input alike).
    """
    if decide == "any" and primaries > 1 and correction == "none":
        return ("correction", f'"none" with decide = "any" over {primaries} primaries: a WIN on any one of them '
                              'needs a correction ("holm" or "bonferroni")')
    return None

# ---------------------------------------------------------------------- the smoke stage

SmokeProbe = Literal["greedy_identity", "structured", "stop", "eos", "lifecycle"]
SmokeOutcome = Literal["pass", "fail", "near_tie", "recorded", "not_exercised", "interrupted"]
StructuredField = Literal["structured_outputs", "guided_json", "response_format"]

SMOKE_PROBES: tuple[SmokeProbe, ...] = get_args(SmokeProbe)
SMOKE_OUTCOMES: tuple[SmokeOutcome, ...] = get_args(SmokeOutcome)
STRUCTURED_FIELDS: tuple[StructuredField, ...] = get_args(StructuredField)
