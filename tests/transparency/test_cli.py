"""The transparency commands: outputs in the formats the issue fixes, exit codes 0 / 1 / 2."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import checkpoint as cp
from ledger import merkle, note
from ledger import receipt as rc
from ledger.keys import generate_key_file
from ledger.store import Blob, Ledger, NewEvent

from .helpers import sql

runner = CliRunner()
ORIGIN = "tally.test/cli"
PLAN = hashlib.sha256(b"plan").hexdigest()


def tally(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = tally("init", "--origin", ORIGIN)
    assert code == 0, err
    book = Ledger.open(str(tmp_path / "tally.db"))
    from ledger.keys import load_signer

    root = load_signer(tmp_path / ".tally" / "root.pem")
    book.append_many([
        NewEvent("window/w1", "gate.result", {"gate": "rng", "verdict": "PASS", "evidence": {}, "plan_sha256": PLAN}),
        NewEvent("window/w1", "decision.recorded", {"rule": "win2-v1", "result": "WIN", "plan_sha256": PLAN},
                 blobs=(Blob(b"\x00binary\xffevidence\n", "application/octet-stream"),)),
        *[NewEvent("s", "test.event", {"i": i}) for i in range(5)],
    ], root)
    book.close()
    return tmp_path


def book(workdir: Path) -> Ledger:
    return Ledger.open(str(workdir / "tally.db"))


def vkey(workdir: Path) -> str:
    code, out, _ = tally("keys", "vkey")
    assert code == 0
    return out.strip()


def test_checkpoint_sign_and_show(workdir: Path) -> None:
    code, out, _ = tally("checkpoint")
    assert code == 0
    checkpoint = cp.verify_checkpoint(out, [vkey(workdir)])
    assert (checkpoint.origin, checkpoint.size) == (ORIGIN, 8)
    code, again, _ = tally("checkpoint", "--json")
    data = json.loads(again)
    assert code == 0 and data["created"] is False and data["note"] == out and data["size"] == 8
    assert data["root"] == book(workdir).root(8).hex()
    assert tally("checkpoint", "show") == (0, out, "")
    assert tally("checkpoint", "show", "--size", "8")[1] == out
    code, _, err = tally("checkpoint", "show", "--size", "3")
    assert code == 2 and "no checkpoint at size 3" in err


def test_checkpoint_show_without_any_and_refusal(workdir: Path) -> None:
    code, _, err = tally("checkpoint", "show")
    assert code == 2 and "tally checkpoint" in err
    tally("checkpoint")
    sql(book(workdir), "UPDATE merkle_nodes SET hash = :h WHERE level = 3 AND \"index\" = 0", h=bytes(32))
    tally("append", "x.y", "--stream", "s", "--payload", "{}")
    code, out, err = tally("checkpoint")
    assert code == 1 and out == "" and "refusing to sign" in err and err.count("\n") == 1


def test_keys_vkey(workdir: Path) -> None:
    code, out, _ = tally("keys", "vkey", "--json")
    data = json.loads(out)
    verifier = note.parse_vkey(data["vkey"])
    assert code == 0 and verifier.name == ORIGIN and verifier.sig_type == note.SIG_ED25519
    assert tally("keys", "vkey", data["id"][:12])[1].strip() == data["vkey"]
    witness = generate_key_file(workdir / "w.pem", "w1")
    assert tally("keys", "add", str(workdir / "w.pem.pub"), "--name", "witness.example/w1", "--role", "witness")[0] == 0
    code, out, _ = tally("keys", "vkey", "witness.example/w1")
    assert code == 0 and out.strip() == note.vkey("witness.example/w1", witness.public_raw, note.SIG_COSIGNATURE)
    code, _, err = tally("keys", "vkey", "nobody")
    assert code == 2 and err


def test_prove_inclusion(workdir: Path) -> None:
    code, out, _ = tally("prove", "inclusion", "2")  # no checkpoint yet: signs one at the current size
    assert code == 0
    proof = rc.parse_tlog_proof(out)
    verified = rc.verify_tlog_proof(proof, book(workdir).get(2).raw_hash, [vkey(workdir)])
    assert (proof.index, verified.size) == (1, 8)
    code, out, _ = tally("prove", "inclusion", "2", "--json")
    data = json.loads(out)
    assert set(data) == {"seq", "index", "tree_size", "leaf_hash", "hashes", "root", "checkpoint"}
    assert (data["seq"], data["index"], data["tree_size"]) == (2, 1, 8)
    assert data["leaf_hash"] == merkle.hash_leaf(book(workdir).get(2).raw_hash).hex()
    merkle.verify_inclusion(1, 8, bytes.fromhex(data["leaf_hash"]), [bytes.fromhex(h) for h in data["hashes"]],
                            bytes.fromhex(data["root"]))
    code, out, _ = tally("prove", "inclusion", "2", "--size", "5", "--json")
    assert code == 0 and json.loads(out)["tree_size"] == 5
    assert [c.size for c in cp.stored_checkpoints(book(workdir))] == [5, 8]
    for args in (["0"], ["9"], ["3", "--size", "2"], ["3", "--size", "99"], ["x"]):
        code, out, _ = tally("prove", "inclusion", *args)
        assert code == 2 and out == "", args


def test_prove_consistency_and_witness_cosign(workdir: Path) -> None:
    tally("keys", "new", "w1", "--out", "w1.pem")
    first = workdir / "cp1.txt"
    first.write_text(tally("checkpoint")[1])
    log_vkey = vkey(workdir)
    code, out, err = tally("witness", "cosign", str(first), "--key", "w1.pem", "--state", "ws", "--vkey", log_vkey)
    assert code == 0, err
    witness_vkey = tally("witness", "vkey", "--key", "w1.pem")[1].strip()
    assert len(cp.open_checkpoint(out, [log_vkey], witnesses=[witness_vkey]).witnesses) == 1
    for i in range(3):
        tally("append", "x.y", "--stream", "s", "--payload", json.dumps({"i": i}))
    second = workdir / "cp2.txt"
    second.write_text(tally("checkpoint")[1])
    code, out, _ = tally("prove", "consistency", "8", "11")
    assert code == 0 and out.startswith("old 8\n") and out.endswith(second.read_text())
    (workdir / "proof.txt").write_text(out)
    code, out, _ = tally("prove", "consistency", "8", "11", "--json")
    data = json.loads(out)
    assert set(data) == {"old", "new", "hashes", "old_root", "new_root"} and (data["old"], data["new"]) == (8, 11)
    merkle.verify_consistency(8, 11, bytes.fromhex(data["old_root"]), bytes.fromhex(data["new_root"]),
                              [bytes.fromhex(h) for h in data["hashes"]])
    (workdir / "proof.json").write_text(out)
    code, out, err = tally("witness", "cosign", str(second), "--key", "w1.pem", "--state", "ws",
                           "--proof", "proof.json", "--json")
    assert code == 0, err
    assert json.loads(out)["old_size"] == 8
    code, out, err = tally("witness", "cosign", str(first), "--key", "w1.pem", "--state", "ws")
    assert code == 1 and out == "" and "rollback" in err
    code, _, err = tally("witness", "cosign", str(second), "--key", "w1.pem", "--state", "other",
                         "--proof", "proof.txt")
    assert code == 2 and "vkey" in err  # a fresh witness knows no log key
    for args in (["0", "3"], ["5", "4"], ["3", "99"]):
        assert tally("prove", "consistency", *args)[0] == 2


def test_blob_get(workdir: Path) -> None:
    data = b"\x00binary\xffevidence\n"
    digest = hashlib.sha256(data).hexdigest()
    result = runner.invoke(app, ["blob", "get", digest])
    assert result.exit_code == 0 and result.stdout_bytes == data
    assert tally("blob", "get", f"sha256:{digest}", "--out", "copy.bin")[0] == 0
    assert (workdir / "copy.bin").read_bytes() == data
    code, _, err = tally("blob", "get", "ab" * 32)
    assert code == 2 and "no blob" in err
    assert tally("blob", "get", "xyz")[0] == 2
    sql(book(workdir), "UPDATE blobs SET data = :d WHERE sha256 = :s", d=b"tampered", s=digest)
    result = runner.invoke(app, ["blob", "get", digest])
    assert result.exit_code == 1 and result.stdout_bytes == b"" and "does not match" in result.stderr


def test_receipt_export_and_verify(workdir: Path) -> None:
    code, out, err = tally("receipt", "export", "2", "--out", "receipts")
    assert code == 0, err
    assert out.split() == ["receipts/2.dsse.json", "receipts/2.tlog-proof", "receipts/2.event.json"]
    log_vkey = vkey(workdir)
    code, out, err = tally("receipt", "verify", "receipts/2.dsse.json", "--vkey", log_vkey)
    assert code == 0 and out.startswith(f"OK {ORIGIN}#2 https://in-toto.io/attestation/test-result/v0.1 PASSED"), err
    (workdir / "log.vkey").write_text(log_vkey + "\n")
    code, out, _ = tally("receipt", "verify", "receipts/2.dsse.json", "--vkey", "log.vkey", "--json")
    data = json.loads(out)
    assert code == 0 and data["valid"] is True and data["event_checked"] is True and data["seq"] == 2
    # decisions too; the proof can be named explicitly
    assert tally("receipt", "export", "3", "--out", "receipts")[0] == 0
    code, out, _ = tally("receipt", "verify", "receipts/3.dsse.json", "--vkey", log_vkey,
                         "--proof", "receipts/3.tlog-proof", "--json")
    assert code == 0 and json.loads(out)["predicate_type"] == "urn:tally:decision:v1"
    # tampering: the envelope's payload
    envelope = json.loads((workdir / "receipts/2.dsse.json").read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["result"] = "FAILED"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    (workdir / "bad.dsse.json").write_text(json.dumps(envelope))
    code, out, err = tally("receipt", "verify", "bad.dsse.json", "--vkey", log_vkey,
                           "--proof", "receipts/2.tlog-proof")
    assert code == 1 and out == "" and err.startswith("FAIL bad.dsse.json")
    code, out, _ = tally("receipt", "verify", "bad.dsse.json", "--vkey", log_vkey, "--proof",
                         "receipts/2.tlog-proof", "--json")
    assert code == 1 and json.loads(out)["valid"] is False
    # a swapped proof
    code, _, err = tally("receipt", "verify", "receipts/2.dsse.json", "--vkey", log_vkey,
                         "--proof", "receipts/3.tlog-proof")
    assert code == 1 and "index" in err
    # bad input: exit 2, one line
    for args in (["receipts/2.dsse.json", "--vkey", "nonsense"], ["missing.dsse.json", "--vkey", log_vkey]):
        code, _, err = tally("receipt", "verify", *args)
        assert code == 2 and err.count("\n") == 1, args
    code, _, err = tally("receipt", "export", "5", "--out", "nothing")
    assert code == 2 and "receipts exist for" in err and not (workdir / "nothing").exists()


def test_receipt_with_a_cosigned_checkpoint(workdir: Path) -> None:
    tally("keys", "new", "w1", "--out", "w1.pem")
    (workdir / "cp.txt").write_text(tally("checkpoint")[1])
    code, out, _ = tally("witness", "cosign", "cp.txt", "--key", "w1.pem", "--state", "ws", "--vkey", vkey(workdir))
    (workdir / "cosigned.txt").write_text(out)
    code, _, err = tally("receipt", "export", "2", "--out", "r", "--checkpoint", "cosigned.txt")
    assert code == 0, err
    witness = tally("witness", "vkey", "--key", "w1.pem")[1].strip()
    code, out, err = tally("receipt", "verify", "r/2.dsse.json", "--vkey", vkey(workdir), "--vkey", witness)
    assert code == 0 and "1 witness cosignature(s)" in out, err
    stranger = note.vkey("w9", generate_key_file(workdir / "w9.pem").public_raw, note.SIG_COSIGNATURE)
    code, _, err = tally("receipt", "verify", "r/2.dsse.json", "--vkey", vkey(workdir), "--vkey", witness,
                         "--vkey", stranger)
    assert code == 1 and "needs 2" in err
    code, _, err = tally("receipt", "verify", "r/2.dsse.json", "--vkey", vkey(workdir), "--vkey", witness,
                         "--vkey", stranger, "--witness-threshold", "1")
    assert code == 0, err
    (workdir / "forged.txt").write_text(note.sign("other.example\n8\n" + base64.b64encode(bytes(32)).decode() + "\n",
                                                  "other.example", generate_key_file(workdir / "x.pem")))
    code, _, err = tally("receipt", "export", "2", "--out", "r2", "--checkpoint", "forged.txt")
    assert code == 1 and err


def test_receipt_verify_refuses_a_symlinked_event_or_proof_beside_the_receipt(workdir: Path) -> None:
    assert tally("receipt", "export", "2", "--out", "receipts")[0] == 0
    log_vkey = vkey(workdir)
    for name in ("2.event.json", "2.tlog-proof"):
        moved = workdir / f"real-{name}"
        (workdir / "receipts" / name).rename(moved)
        (workdir / "receipts" / name).symlink_to(moved)
        code, out, err = tally("receipt", "verify", "receipts/2.dsse.json", "--vkey", log_vkey)
        assert code == 2 and out == "" and err.count("\n") == 1
        assert err.strip().endswith(f"receipts/{name} is a symbolic link; refusing to follow it"), err
        (workdir / "receipts" / name).unlink()
        moved.rename(workdir / "receipts" / name)
    (workdir / "receipts" / "2.event.json").unlink()  # the event beside the receipt is optional
    code, _, err = tally("receipt", "verify", "receipts/2.dsse.json", "--vkey", log_vkey)
    assert code == 0, err
