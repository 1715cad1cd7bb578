"""Witnesses over HTTP: serve one, read its evidence, check a fork proof, collect cosignatures by a policy."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ledger import ExternalError, FormatError, VerificationError

from .files import read_text
from .session import Session

if TYPE_CHECKING:
    from ledger.checkpoint import SignedCheckpoint
    from ledger.forkproof import Fork
    from ledger.note import Verifier
    from ledger.witness_client import Collected
    from ledger.witness_store import Evidence

__all__ = [
    "WitnessRun",
    "WitnessedCheckpoint",
    "check_fork_proof",
    "cosign_by_policy",
    "export_fork_proof",
    "list_evidence",
    "serve_witness",
]


def _logs(logs_file: Path | None, log_vkeys: list[str]) -> tuple[dict[str, list[Verifier]], int]:
    from ledger.note import parse_vkey
    from ledger.witness_server import MAX_LOG_LIST_BYTES, parse_log_list

    logs, skipped = ({}, 0) if logs_file is None else parse_log_list(
        read_text(logs_file, "log list", MAX_LOG_LIST_BYTES))
    for text in log_vkeys:
        verifier = parse_vkey(text)
        if verifier.is_cosigner:
            raise FormatError(f"--log {text[:40]}: a cosigner key (type 0x04) is not a log key")
        logs.setdefault(verifier.name, [])
        if verifier not in logs[verifier.name]:
            logs[verifier.name].append(verifier)
    if not logs:
        raise FormatError("no log to witness: give --logs FILE (a logs/v0 list) or --log VKEY")
    return logs, skipped


@dataclass
class WitnessRun:
    """A witness ready to serve: what it is (for the banner) and ``run()`` (foreground, until SIGINT/SIGTERM)."""

    vkey: str
    logs: int
    skipped: int
    database: str
    host: str
    port: int
    app: object
    concurrency: int
    store: object

    def run(self) -> None:
        import uvicorn

        try:
            uvicorn.run(self.app, host=self.host, port=self.port, log_level="warning",  # type: ignore[arg-type]
                        access_log=False, lifespan="on", limit_concurrency=self.concurrency, timeout_keep_alive=5,
                        timeout_graceful_shutdown=5, h11_max_incomplete_event_size=16 << 10)
        except OSError as exc:
            raise ExternalError(f"cannot serve on {self.host}:{self.port}: {exc.strerror}") from None
        finally:
            self.store.close()  # type: ignore[attr-defined]


def serve_witness(key: Path, name: str | None, *, db: str | None, logs_file: Path | None, log_vkeys: list[str],
                  host: str, port: int, prefix: str, public: bool, max_body: int, concurrency: int) -> WitnessRun:
    """A C2SP tlog-witness to serve (uvicorn, one process): every input checked, the database migrated."""
    from ledger.witness_rules import MAX_BODY_BYTES
    from ledger.witness_server import WitnessService, asgi_app
    from ledger.witness_store import WitnessStore

    from .keys import load_key

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not public:
        raise FormatError(f"--host {host} is not a loopback address; pass --public to listen beyond this machine")
    if not 256 <= max_body <= 4 * MAX_BODY_BYTES:
        raise FormatError(f"--max-body must be between 256 and {4 * MAX_BODY_BYTES} bytes")
    if not 1 <= concurrency <= 10_000:
        raise FormatError("--max-connections must be between 1 and 10000")
    if not 0 <= port <= 65535:
        raise FormatError("--port must be between 0 and 65535")
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        raise FormatError("--prefix must start with '/' and not end with one (e.g. /witness)")
    logs, skipped = _logs(logs_file, log_vkeys)
    signer = load_key(key, name)
    store = WitnessStore(db)
    service = WitnessService(store, name or signer.name, signer, logs)
    app = asgi_app(service, prefix=prefix, max_body=max_body)
    return WitnessRun(service.vkey, len(logs), skipped, store.display_url, host, port, app, concurrency, store)


def list_evidence(db: str | None) -> list[Evidence]:
    """The witness's evidence log: every log-signed submission refused as inconsistent."""
    from ledger.witness_store import WitnessStore

    store = WitnessStore(db, create=False)
    try:
        return store.evidence()
    finally:
        store.close()


def export_fork_proof(db: str | None, evidence_id: int, out: Path, log_vkeys: list[str],
                      witness_vkey: str | None) -> Path:
    """Write evidence entry ``evidence_id`` as a fork proof file (``audit --fork-proof`` checks it)."""
    from ledger.forkproof import fork_proof
    from ledger.witness_store import WitnessStore

    from .outdir import write_out_file

    store = WitnessStore(db, create=False)
    try:
        found = store.evidence(evidence_id)
    finally:
        store.close()
    if not found:
        raise FormatError(f"no evidence entry {evidence_id} (`tally witness evidence` lists them)")
    entry = found[0]
    if entry.kind != "root_mismatch":
        raise FormatError(f"evidence {evidence_id} is a failed consistency proof: it is kept, but a bad proof of a "
                          "good tree fails the same way, so it proves no fork to others")
    if not log_vkeys:
        raise FormatError("give the log's vkey (--vkey): the fork proof names the key that signed both checkpoints")
    try:
        text = fork_proof(entry.cosigned_note, entry.submitted_note, log_vkeys, witness=witness_vkey)
    except VerificationError as exc:
        raise FormatError(f"evidence {evidence_id} does not verify as a fork under the given vkey: "
                          f"{exc.args[0]}") from None
    return write_out_file(out, text.encode("utf-8"))


def check_fork_proof(path: Path, vkeys: list[str]) -> Fork:
    """Verify a fork proof file offline; a file that is not a valid one is refused (``FormatError``, exit 2).

    ``vkeys`` (inline or files of them, as every ``--vkey``) pin the log's keys; witness vkeys among them
    are not log keys and are left out. Without any, the file's own keys are used (``verify_fork_proof``).
    """
    from ledger.forkproof import MAX_FORK_PROOF_BYTES, verify_fork_proof

    from .files import read_vkeys

    text = read_text(path, "fork proof", MAX_FORK_PROOF_BYTES)
    log_keys = [k.vkey() for k in read_vkeys(vkeys) if not k.is_cosigner]  # inline vkeys or files of them
    if vkeys and not log_keys:
        raise FormatError("--fork-proof needs the log's vkey; only witness (type 0x04) vkeys were given")
    try:
        return verify_fork_proof(text, log_keys)
    except VerificationError as exc:
        raise FormatError(f"not a valid fork proof: {exc.args[0]}") from None


def _bounded_post(url: str, body: bytes, deadline_s: float) -> tuple[int, str, bytes]:
    """One add-checkpoint request, its whole exchange (headers included) within the deadline, however a
    witness dribbles, and its reply within ``MAX_REPLY_BYTES`` (``runner.measure.fetch``)."""
    import httpx

    from ledger.witness_client import MAX_REPLY_BYTES

    from ..measure import ReplyRefused, StampingTransport, fetch

    try:
        with httpx.Client(transport=StampingTransport(), follow_redirects=False) as client:
            reply = fetch(client, "POST", url, deadline_s=deadline_s, max_bytes=MAX_REPLY_BYTES,
                          what="the witness's reply", content=body)
    except ReplyRefused as exc:
        raise ExternalError(str(exc)) from None
    except httpx.TimeoutException:
        raise ExternalError(f"no whole answer within {deadline_s:.3g} s") from None
    except httpx.HTTPError as exc:
        raise ExternalError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
    return reply.status, reply.headers.get("content-type", ""), reply.body


@dataclass(frozen=True)
class WitnessedCheckpoint:
    """A checkpoint the ledger signed (stored), with the cosignatures the policy's witnesses gave."""

    signed: SignedCheckpoint
    created: bool
    note: str
    collected: Collected


def cosign_by_policy(session: Session, policy_file: Path, *, timeout: float, fail_open: bool) -> WitnessedCheckpoint:
    """Sign (and store) a checkpoint at the current size, then collect its cosignatures by the quorum policy."""
    from ledger.note import with_signatures
    from ledger.witness_client import MAX_POLICY_BYTES, collect_cosignatures, parse_policy

    from .proofs import new_checkpoint

    if not 0 < timeout <= 300:
        raise FormatError("--witness-timeout must be between 0 and 300 seconds")
    policy = parse_policy(read_text(policy_file, "witness policy", MAX_POLICY_BYTES))
    signed, created = new_checkpoint(session)
    book = session.ledger()

    def proof_for(old: int, new: int) -> list[bytes]:
        return list(book.consistency_proof(old, new))

    collected = collect_cosignatures(signed.note, policy, proof_for, timeout=timeout, fail_open=fail_open,
                                     post=_bounded_post)
    note = with_signatures(signed.note, list(collected.lines.values()))
    return WitnessedCheckpoint(signed, created, note, collected)
