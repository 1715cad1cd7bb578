"""Export bundles audited offline (docs/format.md): full and partial, and each corruption named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.bundle import export_bundle, verify_bundle
from ledger.canonical import canonical
from ledger.errors import VerificationError
from ledger.keys import Signer, key_entry
from ledger.note import vkey
from ledger.signing import sign_checkpoint
from ledger.store import Blob, Ledger, NewEvent
from ledger.stored import verify_ledger

from .helpers import sql


@pytest.fixture
def book(ledger: Ledger, root: Signer) -> Ledger:
    op = Signer.generate("op")
    ledger.append("ledger", "key.added", key_entry(op.public_raw, "op", ["signer"]), root)
    records = Blob(b'{"request": 1}\n', "application/x-ndjson")
    ledger.append_many([NewEvent("runs/w1" if i % 2 else "notes", "note.added", {"i": i}) for i in range(12)], op)
    ledger.append("runs/w1", "evidence.attached", {"records": records.ref()}, op, blobs=[records])
    ledger.append_many([NewEvent("notes", "note.added", {"j": j}) for j in range(5)], op)
    return ledger


def jcs(event: dict[str, object]) -> str:
    """An edited event written back as an exporter would: its canonical line (else it fails as non-canonical)."""
    return canonical(event).decode()


def log_vkey(book: Ledger, root: Signer) -> str:
    return vkey(book.info.origin, root.public_raw)


def test_full_bundle_audits_offline(book: Ledger, root: Signer, tmp_path: Path) -> None:
    manifest = export_bundle(book, tmp_path / "b", signer=root)
    assert manifest["events"] == book.size() and manifest["checkpoint_size"] == book.size()
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["blobs", "checkpoint.txt", "events.jsonl",
                                                                 "manifest.json"]
    verified = verify_bundle(tmp_path / "b", root_key=root.id, vkeys=[log_vkey(book, root)])
    assert len(verified.events) == book.size() and verified.blobs == 1
    assert verified.checkpoint.root == book.root(book.size())


def test_partial_bundle_of_one_stream(book: Ledger, root: Signer, tmp_path: Path) -> None:
    manifest = export_bundle(book, tmp_path / "p", stream="runs/w1", signer=root)
    lines = (tmp_path / "p" / "events.jsonl").read_text().splitlines()
    streams = {json.loads(line)["stream"] for line in lines}
    assert streams == {"runs/w1", "ledger"}  # the stream plus the key events its signatures need
    assert manifest["partial"] and len((tmp_path / "p" / "proofs.jsonl").read_text().splitlines()) == len(lines)
    verified = verify_bundle(tmp_path / "p", vkeys=[log_vkey(book, root)])
    assert [e.seq for e in verified.events] == [json.loads(line)["seq"] for line in lines]


def _partial(book: Ledger, root: Signer, tmp_path: Path) -> Path:
    export_bundle(book, tmp_path / "p", stream="runs/w1", signer=root)
    return tmp_path / "p"


def _fails(path: Path, book: Ledger, root: Signer) -> VerificationError:
    with pytest.raises(VerificationError) as info:
        verify_bundle(path, vkeys=[log_vkey(book, root)])
    return info.value


def test_partial_deleted_line(book: Ledger, root: Signer, tmp_path: Path) -> None:
    path = _partial(book, root, tmp_path)
    lines = (path / "events.jsonl").read_text().splitlines()
    del lines[3]
    (path / "events.jsonl").write_text("\n".join(lines) + "\n")
    assert _fails(path, book, root).rule == "proof"


def test_partial_edited_line(book: Ledger, root: Signer, tmp_path: Path) -> None:
    path = _partial(book, root, tmp_path)
    lines = (path / "events.jsonl").read_text().splitlines()
    event = json.loads(lines[3])
    event["payload"]["i"] = 999
    lines[3] = jcs(event)
    (path / "events.jsonl").write_text("\n".join(lines) + "\n")
    error = _fails(path, book, root)
    assert (error.seq, error.rule) == (event["seq"], 4)


def test_partial_swapped_proofs(book: Ledger, root: Signer, tmp_path: Path) -> None:
    path = _partial(book, root, tmp_path)
    proofs = (path / "proofs.jsonl").read_text().splitlines()
    proofs[3], proofs[4] = proofs[4], proofs[3]
    (path / "proofs.jsonl").write_text("\n".join(proofs) + "\n")
    assert _fails(path, book, root).rule == "proof"


def test_partial_proof_hash_flipped(book: Ledger, root: Signer, tmp_path: Path) -> None:
    path = _partial(book, root, tmp_path)
    proofs = (path / "proofs.jsonl").read_text().splitlines()
    record = json.loads(proofs[3])
    record["hashes"][0] = ("0" if record["hashes"][0][0] != "0" else "1") + record["hashes"][0][1:]
    proofs[3] = json.dumps(record)
    (path / "proofs.jsonl").write_text("\n".join(proofs) + "\n")
    assert _fails(path, book, root).rule == "proof"


def test_full_bundle_corruptions(book: Ledger, root: Signer, tmp_path: Path) -> None:
    export_bundle(book, tmp_path / "clean", signer=root)

    def fresh(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(tmp_path / "clean", target)
        return target

    truncated = fresh("truncated")
    lines = (truncated / "events.jsonl").read_text().splitlines()
    (truncated / "events.jsonl").write_text("\n".join(lines[:-2]) + "\n")
    assert _fails(truncated, book, root).rule == 8  # the checkpoint covers events that are gone

    blob = fresh("blob")
    (next((blob / "blobs").iterdir())).write_bytes(b"swapped evidence")
    assert _fails(blob, book, root).rule == "blob"

    missing_blob = fresh("missing-blob")
    shutil.rmtree(missing_blob / "blobs")
    assert _fails(missing_blob, book, root).rule == "blob"

    forged_cp = fresh("forged-checkpoint")
    text = (forged_cp / "checkpoint.txt").read_text().splitlines()
    text[1] = str(int(text[1]) - 1)
    (forged_cp / "checkpoint.txt").write_text("\n".join(text) + "\n")
    assert _fails(forged_cp, book, root).rule in (8, "checkpoint")

    other = Signer.generate("mallory")
    with pytest.raises(VerificationError):
        verify_bundle(tmp_path / "clean", vkeys=[vkey(book.info.origin, other.public_raw)])
    with pytest.raises(VerificationError) as info:
        verify_bundle(tmp_path / "clean", root_key=other.id)
    assert info.value.rule == 9


def test_truncated_tail_after_a_recorded_head(book: Ledger, root: Signer, tmp_path: Path) -> None:
    saved = sign_checkpoint(book, root)  # the recorded head: a signed checkpoint the auditor keeps
    (tmp_path / "saved.txt").write_text(saved.note)
    sql(book, "DELETE FROM events WHERE seq > :n", n=book.size() - 3)
    with pytest.raises(VerificationError) as info:
        verify_ledger(book)
    assert info.value.rule == 8
    with pytest.raises(VerificationError, match="truncated"):
        verify_ledger(book, since=tmp_path / "saved.txt")


def test_since_catches_a_prefix_row_edited_behind_its_hash(book: Ledger, root: Signer, tmp_path: Path) -> None:
    saved = sign_checkpoint(book, root)
    (tmp_path / "saved.txt").write_text(saved.note)
    book.append("notes", "note.added", {"after": True}, root)
    assert verify_ledger(book, since=tmp_path / "saved.txt").since == saved.size
    sql(book, "UPDATE events SET payload = :p WHERE seq = 5", p='{"i":77}')
    with pytest.raises(VerificationError, match="rewritten") as info:
        verify_ledger(book, since=tmp_path / "saved.txt")
    assert info.value.seq == 5


def test_tally_audit_bundle_cli(book: Ledger, root: Signer, tmp_path: Path) -> None:
    runner = CliRunner()
    db = ["--db", book.url, "--key", str(tmp_path / "root.pem")]
    (tmp_path / "root.pem").write_bytes(root.private_pem())
    (tmp_path / "root.pem").chmod(0o600)  # a key open to group/others is refused
    assert runner.invoke(app, [*db, "export", str(tmp_path / "b")]).exit_code == 0
    result = runner.invoke(app, ["audit", str(tmp_path / "b"), "--root-key", root.id, "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 0, result.stdout
    assert report["verificationResult"] == "PASSED"
    assert report["statement"]["predicateType"] == "https://slsa.dev/verification_summary/v1"
    assert report["statement"]["predicate"]["verificationResult"] == "PASSED"
    (tmp_path / "b" / "events.jsonl").write_text("")
    result = runner.invoke(app, ["audit", str(tmp_path / "b")])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("FAIL cryptographic checks:") and result.stderr.count("\n") == 1
    result = runner.invoke(app, ["audit", str(tmp_path / "nowhere")])
    assert result.exit_code == 2


def test_partial_swapped_signature(book: Ledger, root: Signer, tmp_path: Path) -> None:
    path = _partial(book, root, tmp_path)
    lines = (path / "events.jsonl").read_text().splitlines()
    first, other = json.loads(lines[3]), json.loads(lines[4])
    first["sig"] = other["sig"]
    lines[3] = jcs(first)
    (path / "events.jsonl").write_text("\n".join(lines) + "\n")
    error = _fails(path, book, root)
    assert (error.seq, error.rule) == (first["seq"], 6)


def test_database_audit_without_a_checkpoint_says_so(book: Ledger, root: Signer) -> None:
    from runner.audit.full import run_audit

    first = run_audit(book=book).lines()[0]
    assert first.startswith("OK cryptographic checks") and "(no checkpoint," in first and "None" not in first
    sign_checkpoint(book, root)
    assert f"(checkpoint size {book.size()}," in run_audit(book=book).lines()[0]
