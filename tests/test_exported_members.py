"""Every package's face, pinned: its sorted ``__all__``, every name importable, nothing else public.

A face (a package's ``__init__``) is what other packages may use (``tests/test_layering.py``
refuses imports of anything else); changing one is a decision, made here too. As httpx's
``tests/test_exported_members.py``: the public attributes of the face are exactly its
``__all__`` (submodules it does not export aside), and each name resolves (the ledger's
face loads its names lazily).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]

FACES: dict[str, list[str]] = {
    "ledger": [
        "Blob", "Event", "ExternalError", "FormatError", "IntegrityError", "KeyRing", "Ledger", "NewEvent",
        "PayloadError", "PolicyError", "Signer", "StorageError", "TallyError", "VerificationError", "VerifiedLedger",
        "blob_ref", "check_seq", "load_signer", "verify_events",
    ],
    "runner": [],
    "runner.app": [
        "DEMO_SCENARIOS", "Decision", "DemoOutcome", "ExportedReceipt", "Inclusion", "Measured", "OutDir", "RehearsalRun", "Session",
        "WaveProgress", "WitnessRun", "WitnessedCheckpoint", "add_key", "admit_window", "append_event",
        "audit_from_tiles", "audit_ledger", "calibrate_sim", "chain_preflight_report", "check_chain_prev_ok", "check_fork_proof",
        "check_power_gate", "checkpoint_json", "compute_verdict", "consistency", "cosign_by_policy",
        "cosign_checkpoint", "default_sim_config", "demo_result_lines", "describe_power", "dry_run_window",
        "dump_report", "export_fork_proof", "export_ledger", "export_receipt", "get_blob", "import_archive",
        "inclusion_proof", "init_ledger", "key_vkey", "list_archive", "list_evidence", "list_keys", "measure_server",
        "new_checkpoint", "new_key", "owner_name", "plan_sim_config", "power_spread_lines", "promotion_check",
        "promotion_register", "publish_tiles", "receipt_in_served_tiles", "record_budget", "record_chain_prev_ok",
        "record_power", "record_qualification", "record_rng", "record_standard_spec", "recorded_decision",
        "register_window", "rehearse_production", "replay_power", "replay_state", "replay_verdict", "revoke_key",
        "run_demo_in", "run_window", "serve_sim", "serve_witness", "show_checkpoint", "upgrade_ledger",
        "verify_receipt_files", "verify_stored", "window_power", "witness_vkey", "write_families", "write_out_file",
        "write_verdict_report", "write_window_report",
    ],
    "runner.audit": [
        "INVARIANTS", "AuditReport", "FullAudit", "Violation", "audit_protocol", "audit_report", "run_audit",
    ],
    "runner.decide": [
        "DEFAULT_PARAMS", "INPUT_BUILDER", "MIN_WINDOWS", "NOISE_METRICS", "NOISE_PRIMARY", "POWER_MODEL", "RULES",
        "SPENDINGS", "ChainStudy", "ControlPair", "Difference", "LookBudget", "LookTest", "Pp3Design", "Pp3Noise",
        "ReplayResult", "Spread", "Win2Design", "Win2Noise", "build_input", "cap_reasons", "chain_study", "compute",
        "correlation_label", "decision_for", "design_of", "dial_back_reasons", "diff", "estimate_spread",
        "estimate_win2_noise", "inputs_digest", "look_test", "parse_pilot", "parse_pilot_noise", "pooled_values",
        "power_figures", "power_figures_v1", "pp3", "recorded_builder", "replay_window", "smoke_findings",
        "smoke_tally", "spread_lines", "thin_reason", "validate", "win2",
    ],
    "runner.demo": [
        "DEMO_TIME_SCALE", "DemoDisplay", "DemoWindow", "PlanDemo", "TourResult", "World", "build_world", "ledger_tour",
        "pass_chain_gate", "pass_gates", "prepare_plan_demo", "result_lines", "run_demo",
        "sim_config_for",
    ],
    "runner.drivers": [
        "ACTIONS", "CHAIN_ACTIONS", "CLOSE_ACTIONS", "DEFAULT_TIMEOUTS_S", "OBSERVING_ACTIONS", "PER_HOST_ACTIONS",
        "PLANNED_OPTIONAL_ACTIONS", "SERVING_STATES",
        "ActionResult", "CommandTemplate", "CommandsDriver", "HostDriver", "SimDriver", "check_action", "load_site",
        "parse_facts", "parse_template", "settle", "site_from_dict", "site_time_scale", "unreachable_allowed",
    ],
    "runner.events": [
        "ARCHIVE_STREAM", "CATALOGUE", "WINDOW_RECEIPTS", "WINDOW_STREAM_PREFIX", "WindowLog", "append_window_event",
        "bundle_companions", "from_wire", "parse_payload", "payloads", "read_payload", "receipt_context", "to_wire",
        "validate_payload", "window_event",
    ],
    "runner.execution": [
        "LineFolder", "Progress", "RunResult", "WindowRunner", "chain_preflight", "dry_run_report", "host_locks",
        "owner_name",
        "refuse_unadmitted", "wave_bar", "window_lock",
    ],
    "runner.gates": [
        "Admission", "AdmissionReceipt", "BudgetGate", "BudgetReport", "ChainPrevOkGate", "ClockReading", "Finding",
        "Gate", "GateOutcome", "GateRecord", "PowerCheck", "PowerGate", "PrevOk", "PrevOkRecord", "QualificationGate",
        "RehearsalGate", "RngGate", "RngReceipt", "SpecResult", "StandardSpecGate", "admit", "budget_report",
        "check_effective", "check_power", "check_prev_ok", "check_rng", "check_standard_spec", "check_start_config",
        "check_warmup_served", "context_problems", "describe",
        "new_dial_backs", "power_gate", "read_admission_receipt", "read_caps", "read_rng_receipt", "record_finding",
        "record_gate", "replay_power_gate", "restored_clock", "run_gate", "run_prev_ok", "spec_reported", "spec_sha256",
    ],
    "runner.measure": [
        "COUNTER_SERIES", "FAMILIES", "MAX_COUNT", "MAX_FAMILY_BYTES", "MAX_PROBE_BYTES", "SERVER_STRING_BYTES",
        "STATUSES", "CounterDeltas", "Family", "Frame", "MetricsSnapshot", "OriginAuth", "Prompt", "ReplyRefused", "RequestRecord",
        "SSEDecoder", "SSEOverflow", "ServerURL", "StampingTransport", "WaveResult", "WaveTotals", "bounded_json",
        "clip", "counter_deltas", "counter_source", "deadline_guard", "dump_json", "error_of", "family_bytes", "fetch",
        "has_credentials", "list_models", "load_family", "measure_wave", "parse_family", "parse_metrics", "read_frame",
        "read_served",
        "redact",
        "scrape_metrics", "select_source", "served_count", "served_models", "server_url", "summary_entry_bound", "synthetic_family",
        "write_family",
    ],
    "runner.plan": [
        "CONTROL_ROLE", "MODES", "SMOKE_FAILURE_KIND", "SMOKE_SCHEMA", "Arm", "Budget", "Carry", "LoadedPlan", "Plan",
        "Power", "Pressure", "Registration", "Smoke", "WaveSpec", "WindowNotRegistered", "family_prompts", "load_plan",
        "parse_plan", "plan_sha256", "read_plan_file", "register_plan", "registered", "registered_plan", "window_log",
    ],
    "runner.promotion": [
        "MAX_POLICY_BYTES", "POLICY_EVENT", "POLICY_STREAM", "Candidate", "Check", "Look", "PromotionPolicy",
        "PromotionResult", "ReceiptFiles", "candidate_of", "check_promotion", "count_looks", "read_policy",
        "registration_payload",
    ],
    "runner.rehearsal": [
        "FIELDS", "GREEDY_NEUTRAL", "MAX_PROBE_LIST_BYTES", "RESERVED_NAMES", "VLLM_PROBES", "Need", "Probe",
        "ProbeList", "ProbeResult", "Rehearsal", "engine_refusals", "not_sent", "plan_needs", "read_probe_list", "rehearse", "send",
        "smoke_refusals", "token_count", "write_rehearsal",
    ],
    "runner.report": [
        "Document", "ReportPaths", "build_document", "fixed", "metric_label", "metric_value", "render_html",
        "render_markdown", "window_report", "write_report",
    ],
    "runner.sim": [
        "ACTIONS", "Acceptance", "ArmConfig", "Budgets", "Calibration", "Job", "Run", "SimConfig", "SimHandle",
        "SimProcess", "SimResult", "StepCosts", "arm_model", "calibrate", "compare", "config_from_dict", "config_toml",
        "default_config", "load_config", "observed_figures", "predict", "read_config_table", "read_run", "serve",
        "simulate", "spawn", "speculation_breakeven", "start",
    ],
    "runner.smoke": [
        "Emitted", "GreedyComparison", "ProbeVerdict", "SmokeSession", "compare_greedy",
    ],
    "runner.state": [
        "ARCHIVE_TYPES", "ENGINE_REPORTS", "IMPORT_ROW_FIELDS", "MAX_IMPORT_ROWS", "ArchiveKey", "ArchiveMapping",
        "ArchiveRow", "BudgetEntry", "ChainAbort", "Clock", "DecisionView", "EngineView", "FinishedAction", "Folding",
        "GateView", "Hold", "Interruption", "JSONValue", "Marker", "MeasurementEnd", "OpenAction", "PlaceholderUp",
        "Priming", "RestoreView", "StartView", "State", "ThermalEntry", "TypedPayload", "UnmappedCell", "Warmup",
        "WatchView", "WaveKeys", "WindowState", "admission_blockers", "archive_rows", "comparability_key",
        "day_to_day_rows", "ending_causes", "fold", "parse_archive_mapping", "production_commit", "replay", "touched",
        "typed_payload", "validate_import_row",
    ],
    "runner.measure.sources": [
        "COUNTER_SOURCES", "GAUGE_KEYS", "CounterSource", "CounterSourceName", "GaugeReading", "LlamaCppSource",
        "NoSource", "SglangSource", "SourceCheck", "VllmSource", "counter_source", "select_source",
    ],
}


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: SCREAMING_CASE, then CamelCase, then the rest."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


def test_every_face_is_pinned() -> None:
    packages = {"ledger", "runner"} | {f"runner.{p.parent.name}" for p in (REPO / "runner").glob("*/__init__.py")}
    packages |= {"runner.measure.sources"}
    assert sorted(FACES) == sorted(packages)


@pytest.mark.parametrize("face", sorted(FACES))
def test_the_face_exports_its_pinned_names(face: str) -> None:
    module = importlib.import_module(face)
    assert list(module.__all__) == FACES[face]
    assert list(module.__all__) == sorted(module.__all__, key=_isort_key)
    for name in module.__all__:
        assert getattr(module, name) is not None, name


@pytest.mark.parametrize("face", sorted(FACES))
def test_nothing_else_on_the_face_is_public(face: str) -> None:
    module = importlib.import_module(face)
    public = {name for name, value in vars(module).items()
              if not name.startswith("_") and name != "annotations" and not isinstance(value, ModuleType)}
    assert public - set(module.__all__) == set()
