"""The application layer: what every ``tally`` command does, under the command line.

::

    from runner.app import Session, register_window, record_budget, run_window

    session = Session(db="tally.db", key=".tally/root.pem")
    register_window(session, Path("plan.toml"))
    record_budget(session, "w1").verdict
    run_window(session, "w1", Path("site.toml")).decision

The CLI (``cli/``) parses options, calls one function here and prints what it returns; of
the runner it imports this face to call, and other faces only for the types it prints.
Each function takes the :class:`Session` (the global options: the ledger, the signing
key) and the command's inputs, checks every input before it acts (bad input is one
``FormatError``, exit 2), and returns values to print: nothing here writes to stdout.
Modules, one per command group:

- ``session``: the global options, the ledger and key they name, a window's registration;
- ``files``, ``outdir``: the files a command reads (bounded, no symlinks) and writes (atomic,
  never through a planted symlink);
- ``ledgers``, ``keys``, ``proofs``, ``checks``, ``receipts``: the ledger, keys, checkpoints
  and proofs, verification, export and audit, receipts;
- ``windows``, ``gates``, ``replay``, ``archive``, ``promotion``: register, admit, run, report,
  record a gate, replay, the control archive, the promotion gate;
- ``measure``, ``verdicts``, ``sim``, ``demo``: one measured wave, the rules on a file, the
  simulator, the demo.

Importing this face is cheap (``tally --version`` does): every module imports the runner's
packages, the ledger's store and the heavy libraries inside its functions.
"""

from __future__ import annotations

from .archive import import_archive, list_archive
from .checks import audit_ledger, export_ledger, verify_stored
from .demo import SCENARIOS as DEMO_SCENARIOS
from .demo import DemoOutcome, demo_result_lines, run_demo_in
from .gates import (
    RehearsalRun,
    chain_preflight_report,
    check_chain_prev_ok,
    check_power_gate,
    record_budget,
    record_chain_prev_ok,
    record_power,
    record_qualification,
    record_rng,
    record_standard_spec,
    rehearse_production,
)
from .keys import add_key, key_vkey, list_keys, new_key, revoke_key, witness_vkey
from .ledgers import append_event, get_blob, init_ledger, upgrade_ledger
from .measure import Measured, WaveProgress, dump_report, measure_server
from .outdir import OutDir, write_out_file
from .promotion import promotion_check, promotion_register
from .proofs import (
    Inclusion,
    checkpoint_json,
    consistency,
    cosign_checkpoint,
    inclusion_proof,
    new_checkpoint,
    show_checkpoint,
)
from .receipts import ExportedReceipt, export_receipt, verify_receipt_files
from .replay import replay_power, replay_state, replay_verdict
from .session import Session
from .sim import calibrate_sim, default_sim_config, plan_sim_config, serve_sim, write_families
from .tiles import audit_from_tiles, publish_tiles, receipt_in_served_tiles
from .verdicts import compute_verdict, write_verdict_report
from .windows import (
    Decision,
    admit_window,
    describe_power,
    dry_run_window,
    owner_name,
    power_spread_lines,
    recorded_decision,
    register_window,
    run_window,
    window_power,
    write_window_report,
)
from .witnessing import (
    WitnessedCheckpoint,
    WitnessRun,
    check_fork_proof,
    cosign_by_policy,
    export_fork_proof,
    list_evidence,
    serve_witness,
)

__all__ = [
    "DEMO_SCENARIOS",
    "Decision",
    "DemoOutcome",
    "ExportedReceipt",
    "Inclusion",
    "Measured",
    "OutDir",
    "RehearsalRun",
    "Session",
    "WaveProgress",
    "WitnessRun",
    "WitnessedCheckpoint",
    "add_key",
    "admit_window",
    "append_event",
    "audit_from_tiles",
    "audit_ledger",
    "calibrate_sim",
    "chain_preflight_report",
    "check_chain_prev_ok",
    "check_fork_proof",
    "check_power_gate",
    "checkpoint_json",
    "compute_verdict",
    "consistency",
    "cosign_by_policy",
    "cosign_checkpoint",
    "default_sim_config",
    "demo_result_lines",
    "describe_power",
    "dry_run_window",
    "dump_report",
    "export_fork_proof",
    "export_ledger",
    "export_receipt",
    "get_blob",
    "import_archive",
    "inclusion_proof",
    "init_ledger",
    "key_vkey",
    "list_archive",
    "list_evidence",
    "list_keys",
    "measure_server",
    "new_checkpoint",
    "new_key",
    "owner_name",
    "plan_sim_config",
    "power_spread_lines",
    "promotion_check",
    "promotion_register",
    "publish_tiles",
    "receipt_in_served_tiles",
    "record_budget",
    "record_chain_prev_ok",
    "record_power",
    "record_qualification",
    "record_rng",
    "record_standard_spec",
    "recorded_decision",
    "register_window",
    "rehearse_production",
    "replay_power",
    "replay_state",
    "replay_verdict",
    "revoke_key",
    "run_demo_in",
    "run_window",
    "serve_sim",
    "serve_witness",
    "show_checkpoint",
    "upgrade_ledger",
    "verify_receipt_files",
    "verify_stored",
    "window_power",
    "witness_vkey",
    "write_families",
    "write_out_file",
    "write_verdict_report",
    "write_window_report",
]
