"""Sign only what you verified: no change to storage made without the key yields a signature.

The attacker can write the database (events, merkle_nodes, checkpoints, keys) but does
not hold the log key. Every signing path (receipts, checkpoints, bundle checkpoints)
refuses; ``tally verify`` names what was changed, caches included.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import merkle
from ledger.keys import Signer, load_signer
from ledger.store import Ledger, NewEvent

from .helpers import rewrite_history, sql

runner = CliRunner()
ORIGIN = "tally.test/attack"
PLAN = hashlib.sha256(b"plan").hexdigest()


def tally(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    assert tally("init", "--origin", ORIGIN)[0] == 0
    book = Ledger.open(str(tmp_path / "tally.db"))
    root = load_signer(tmp_path / ".tally" / "root.pem")
    book.append_many([NewEvent("s", "test.event", {"i": i}) for i in range(3)], root)
    book.append_many([
        NewEvent("window/w1", "gate.result", {"gate": "rng", "verdict": "PASS", "evidence": {}, "plan_sha256": PLAN}),
        *[NewEvent("s", "test.event", {"i": i}) for i in range(6)],
    ], root)
    book.close()
    return tmp_path


GATE_SEQ = 5


def _edit_verdict(book: Ledger) -> None:
    payload = json.dumps({"evidence": {}, "gate": "rng", "plan_sha256": PLAN, "verdict": "FAIL"},
                         separators=(",", ":"), sort_keys=True)
    sql(book, "UPDATE events SET payload = :p WHERE seq = :s", p=payload, s=GATE_SEQ)


def _receipt_refused(workdir: Path, out: str) -> str:
    code, _, err = tally("receipt", "export", str(GATE_SEQ), "--out", out)
    assert code == 1, err
    assert not (workdir / out).exists() or not any((workdir / out).iterdir())
    return err


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no checkpoint", "under a stored checkpoint"])
def test_receipt_export_refuses_an_event_edited_in_storage(workdir: Path, checkpointed: bool) -> None:
    if checkpointed:
        assert tally("checkpoint")[0] == 0
    book = Ledger.open(str(workdir / "tally.db"))
    _edit_verdict(book)
    err = _receipt_refused(workdir, "r")
    assert f"seq {GATE_SEQ}, rule 4" in err and "refusing to sign" in err
    code, _, verify_err = tally("verify")
    assert code == 1 and f"seq {GATE_SEQ}, rule 4" in verify_err


def test_receipt_export_refuses_a_thorough_rewrite_without_the_key(workdir: Path) -> None:
    """The attacker recomputes the hash, re-chains, rebuilds merkle_nodes and deletes the checkpoints."""
    assert tally("checkpoint")[0] == 0
    book = Ledger.open(str(workdir / "tally.db"))
    attacker = Signer.generate("attacker")
    rewrite_history(book, attacker, GATE_SEQ, {"evidence": {}, "gate": "rng", "plan_sha256": PLAN, "verdict": "FAIL"})
    sql(book, "DELETE FROM checkpoints")
    err = _receipt_refused(workdir, "r")
    assert f"seq {GATE_SEQ}, rule 6" in err
    assert tally("checkpoint")[0] == 1  # nor is the rewritten tree signed
    assert book.checkpoint_notes() == []


def test_checkpoint_refuses_a_tampered_merkle_cache(workdir: Path) -> None:
    """No stored checkpoint; one stored subtree hash zeroed: the log key never signs that root."""
    book = Ledger.open(str(workdir / "tally.db"))
    size = book.size()
    level, index = merkle.frontier_nodes(size)[0]
    sql(book, 'UPDATE merkle_nodes SET hash = :h WHERE level = :l AND "index" = :i', h=b"\x00" * 32, l=level, i=index)
    code, _, err = tally("checkpoint")
    assert code == 1 and "rule cache" in err and "refusing to sign" in err
    assert book.checkpoint_notes() == []
    code, _, err = tally("verify")
    assert code == 1 and f"level {level}, index {index}" in err and "rule cache" in err


def test_checkpoint_signs_the_root_of_the_events_not_of_the_store(workdir: Path) -> None:
    """A node off the frontier zeroed: the checkpoint is the events' root, and verify names the node."""
    book = Ledger.open(str(workdir / "tally.db"))
    true_root = book.root(book.size())
    sql(book, 'UPDATE merkle_nodes SET hash = :h WHERE level = 1 AND "index" = 0', h=b"\x00" * 32)
    code, out, _ = tally("checkpoint", "--json")
    if code == 0:
        assert json.loads(out)["root"] == true_root.hex()
    else:  # the zeroed node is on the path of a proof the signing needed: refused instead
        assert book.checkpoint_notes() == []
    code, _, err = tally("verify")
    assert code == 1 and "level 1, index 0" in err


def test_verify_checks_the_key_cache(workdir: Path) -> None:
    book = Ledger.open(str(workdir / "tally.db"))
    sql(book, "UPDATE keys SET roles = 'root,signer,witness'")
    code, _, err = tally("verify")
    assert code == 1 and "rule cache" in err and "differs from its key events" in err


def test_verify_checks_for_extra_merkle_nodes(workdir: Path) -> None:
    book = Ledger.open(str(workdir / "tally.db"))
    sql(book, 'INSERT INTO merkle_nodes (level, "index", hash) VALUES (9, 99, :h)', h=b"\x01" * 32)
    code, _, err = tally("verify")
    assert code == 1 and "rule cache" in err and "stored" in err


def test_a_clean_ledger_still_signs_and_verifies(workdir: Path) -> None:
    assert tally("checkpoint")[0] == 0
    assert tally("verify")[0] == 0
    code, _, err = tally("receipt", "export", str(GATE_SEQ), "--out", "r")
    assert code == 0, err
    vkey = tally("keys", "vkey")[1].strip()
    assert tally("receipt", "verify", f"r/{GATE_SEQ}.dsse.json", "--vkey", vkey)[0] == 0


@pytest.mark.parametrize("name", ["ab" * 32, "../../x", "/abs/path", "AB" * 32])
def test_append_refuses_a_reference_to_a_blob_the_ledger_does_not_hold(workdir: Path, name: str) -> None:
    """One append must never brick verify: every referenced blob is attached or stored, by 64 hex."""
    book = Ledger.open(str(workdir / "tally.db"))
    size = book.size()
    payload = json.dumps({"evidence": {"blob": f"sha256:{name}", "size": 3, "media_type": "text/plain"}})
    code, _, err = tally("append", "note.added", "--stream", "s", "--payload", payload)
    assert code == 2 and err.count("\n") == 1 and "payload.evidence" in err
    assert book.size() == size
    assert tally("verify")[0] == 0
