"""DSSE envelopes and receipts: verified offline by us, and by securesystemslib unchanged."""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope as SSlibEnvelope
from securesystemslib.exceptions import VerificationError as SSlibVerificationError
from securesystemslib.signer import SSlibKey

from ledger import checkpoint as cp
from ledger import dsse, note, signing
from ledger import receipt as rc
from ledger.errors import FormatError, VerificationError
from ledger.keys import Signer
from ledger.store import Blob, Ledger, NewEvent
from runner.events.receipts import WINDOW_RECEIPTS

from .helpers import ORIGIN, fill

PLAN = hashlib.sha256(b"the registered plan").hexdigest()


def test_pae_matches_the_spec_and_counts_bytes() -> None:
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")
    assert dsse.pae("t\u00e9", b"\xc3\xa9") == b"DSSEv1 3 t\xc3\xa9 2 \xc3\xa9"  # bytes, not code points


def test_envelope_roundtrip_threshold_and_tampering() -> None:
    a, b = Signer.generate(), Signer.generate()
    env = dsse.sign_envelope(b'{"x":1}', "application/vnd.test+json", [a, b])
    parsed = dsse.Envelope.loads(env.dumps())
    assert parsed == env
    got = dsse.verify_envelope(parsed, [a.public_raw, b.public_raw], threshold=2, payload_type=None)
    assert set(got.key_ids) == {a.id, b.id}
    with pytest.raises(VerificationError, match="payloadType"):
        dsse.verify_envelope(parsed, [a.public_raw])
    with pytest.raises(VerificationError):
        dsse.verify_envelope(dsse.Envelope(b'{"x":2}', env.payload_type, env.signatures), [a.public_raw],
                             payload_type=None)
    with pytest.raises(VerificationError):
        dsse.verify_envelope(dsse.Envelope(env.payload, "application/json", env.signatures), [a.public_raw],
                             payload_type=None)
    with pytest.raises(FormatError):
        dsse.verify_envelope(parsed, [a.public_raw, a.public_raw], threshold=2, payload_type=None)
    # one key signing twice under two key ids meets a threshold of one, never two
    twice = dsse.Envelope(env.payload, env.payload_type,
                          (env.signatures[0], dsse.EnvelopeSignature("alias", env.signatures[0].sig)))
    with pytest.raises(VerificationError, match="2 needed"):
        dsse.verify_envelope(twice, [a.public_raw, Signer.generate().public_raw], threshold=2, payload_type=None)
    # the keyid is only a hint: a wrong hint still verifies under the right key
    hinted = dsse.Envelope(env.payload, env.payload_type, (dsse.EnvelopeSignature(b.id, env.signatures[0].sig),))
    assert dsse.verify_envelope(hinted, [a.public_raw, b.public_raw], payload_type=None).key_ids == (a.id,)
    # URL-safe base64 without padding is accepted
    wire = env.to_json()
    wire["payload"] = base64.urlsafe_b64encode(env.payload).decode().rstrip("=")
    wire["signatures"] = [{"keyid": s.keyid, "sig": base64.urlsafe_b64encode(s.sig).decode()} for s in env.signatures]
    assert dsse.Envelope.from_json(wire) == env
    for bad in ("[]", "{}", '{"payload": "!!", "payloadType": "t", "signatures": []}', "not json"):
        with pytest.raises(FormatError):
            dsse.Envelope.loads(bad)


@pytest.fixture
def window(ledger: Ledger, root: Signer) -> Ledger:
    """A ledger with a passing gate, a failing gate and a decision of window w1."""
    stream = "window/w1"
    ledger.append_many([
        NewEvent(stream, "window.registered", {"plan_sha256": PLAN}),
        NewEvent(stream, "gate.result", {"gate": "rng", "verdict": "PASS", "evidence": {"k": 1}, "plan_sha256": PLAN}),
        NewEvent(stream, "gate.result", {"gate": "budget", "verdict": "FAIL", "evidence": {}, "plan_sha256": PLAN}),
        NewEvent(stream, "decision.recorded", {"rule": "win2-v1", "params": {"bar": 0.02}, "inputs_digest": "ab" * 32,
                                               "result": "NO_CHANGE", "plan_sha256": PLAN},
                 blobs=(Blob(b"records"),)),
        NewEvent("ledger", "gate.result", {"gate": "standalone", "verdict": "PASS", "evidence": {}}),
    ], root)
    fill(ledger, root, 3)
    return ledger


def _export(book: Ledger, root: Signer, seq: int, out: Path) -> tuple[str, str, str]:
    paths = rc.write_receipt(rc.build_receipt(book, seq, root, WINDOW_RECEIPTS), out)
    return tuple(p.read_text() for p in paths)  # type: ignore[return-value]


def test_statements(window: Ledger) -> None:
    gate = rc.statement_for(window.get(3), ORIGIN, WINDOW_RECEIPTS)
    assert gate["_type"] == "https://in-toto.io/Statement/v1"
    assert gate["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert gate["subject"] == [{"name": f"{ORIGIN}#3", "digest": {"sha256": window.get(3).hash}},
                               {"name": "plan/w1", "digest": {"sha256": PLAN}}]
    assert gate["predicate"]["result"] == "PASSED" and gate["predicate"]["passedTests"] == ["rng"]
    failed = rc.statement_for(window.get(4), ORIGIN, WINDOW_RECEIPTS)["predicate"]
    assert failed["result"] == "FAILED" and failed["failedTests"] == ["budget"]
    decision = rc.statement_for(window.get(5), ORIGIN, WINDOW_RECEIPTS)
    assert decision["predicateType"] == "urn:tally:decision:v1" and decision["predicate"] == window.get(5).payload
    standalone = rc.statement_for(window.get(6), ORIGIN, WINDOW_RECEIPTS)
    assert [s["name"] for s in standalone["subject"]] == [f"{ORIGIN}#6"]
    with pytest.raises(FormatError, match="receipts exist for"):
        rc.statement_for(window.get(2), ORIGIN, WINDOW_RECEIPTS)


@pytest.mark.parametrize("seq", [3, 4, 5])
def test_receipts_verify_offline_and_with_securesystemslib(window: Ledger, root: Signer, tmp_path: Path,
                                                          seq: int) -> None:
    envelope, proof, event = _export(window, root, seq, tmp_path)
    vkey = note.vkey(ORIGIN, root.public_raw)
    result = rc.verify_receipt(envelope, proof, [vkey], policy=WINDOW_RECEIPTS, event_text=event)
    assert (result.origin, result.seq, result.event_hash) == (ORIGIN, seq, window.get(seq).hash)
    assert result.signed_by == (root.id,) and result.checkpoint.size == window.size()
    assert result.to_json()["valid"] is True and result.event is not None
    assert rc.verify_receipt(envelope, proof, [root.public_raw], policy=WINDOW_RECEIPTS).event is None
    # securesystemslib, unchanged, with an SSlibKey built from our public key and key id
    key = SSlibKey(root.id, "ed25519", "ed25519", {"public": root.public_raw.hex()})
    accepted = SSlibEnvelope.from_dict(json.loads(envelope)).verify([key], 1)
    assert list(accepted) == [root.id]
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    crypto_key = SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(root.public_raw), keyid=root.id)
    assert list(SSlibEnvelope.from_dict(json.loads(envelope)).verify([crypto_key], 1)) == [root.id]
    tampered = json.loads(envelope)
    tampered["payload"] = base64.b64encode(base64.b64decode(tampered["payload"]).replace(b"#", b"%")).decode()
    with pytest.raises(SSlibVerificationError):
        SSlibEnvelope.from_dict(copy.deepcopy(tampered)).verify([key], 1)


def _replace_payload(envelope: str, change: dict[str, object]) -> str:
    wire = json.loads(envelope)
    statement = json.loads(base64.b64decode(wire["payload"]))
    statement.update(change)
    wire["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(wire)


def test_tampered_receipts_fail(window: Ledger, root: Signer, tmp_path: Path) -> None:
    envelope, proof, event = _export(window, root, 3, tmp_path / "a")
    _, other_proof, _ = _export(window, root, 5, tmp_path / "b")
    vkey = note.vkey(ORIGIN, root.public_raw)

    def fails(env: str, prf: str, match: str, ev: str | None = None) -> None:
        with pytest.raises(VerificationError, match=match):
            rc.verify_receipt(env, prf, [vkey], policy=WINDOW_RECEIPTS, event_text=ev)

    fails(_replace_payload(envelope, {"predicate": {"result": "FAILED"}}), proof, "signature")
    wire = json.loads(envelope)
    wire["payloadType"] = "application/json"
    fails(json.dumps(wire), proof, "signature")
    fails(envelope, other_proof, "index")  # another event's proof
    lines = proof.split("\n")
    lines[2] = base64.b64encode(bytes(32)).decode()  # a proof hash
    fails(envelope, "\n".join(lines), "inclusion")
    fails(envelope, proof.replace(f"\n{window.size()}\n", f"\n{window.size() + 1}\n"), "checkpoint")  # size
    head, _, note_text = proof.partition("\n\n")
    other_root = signing.sign_checkpoint(window, root, size=window.size() - 1).note
    fails(envelope, head + "\n\n" + other_root, "inclusion")  # a real checkpoint, of another tree size
    fails(envelope, head + "\n\n" + note.sign(note.parse_note(note_text).text, ORIGIN, Signer.generate()),
          "checkpoint")  # the checkpoint re-signed by a stranger
    fails(envelope, proof, "event file", ev=event.replace('"k":1', '"k":2'))
    fails(envelope, proof, "not the receipt's subject", ev=json.dumps(window.get(4).to_json()))
    fails(envelope, proof.replace("c2sp.org/tlog-proof@v1", "c2sp.org/tlog-proof@v2"), "malformed")
    fails("{}", proof, "malformed")
    with pytest.raises(VerificationError, match="signature"):
        rc.verify_receipt(envelope, proof, [note.vkey(ORIGIN, Signer.generate().public_raw)], policy=WINDOW_RECEIPTS)


def test_receipt_with_witness_policy(window: Ledger, root: Signer, tmp_path: Path) -> None:
    from ledger.witness import Witness

    witness = Witness(tmp_path / "w", "w.example", Signer.generate())
    signed = signing.sign_checkpoint(window, root)
    cosigned = witness.cosign(signed.note, [root.public_raw], None, now=5).note
    receipt = rc.build_receipt(window, 5, root, WINDOW_RECEIPTS, cp.SignedCheckpoint(signed.checkpoint, cosigned))
    envelope, proof, _ = (p.read_text() for p in rc.write_receipt(receipt, tmp_path / "r"))
    keys = [note.vkey(ORIGIN, root.public_raw)]
    result = rc.verify_receipt(envelope, proof, keys, policy=WINDOW_RECEIPTS, witnesses=[witness.vkey()])
    assert [w.verifier.name for w in result.checkpoint.witnesses] == ["w.example"]
    plain, plain_proof, _ = _export(window, root, 5, tmp_path / "p")
    with pytest.raises(VerificationError, match="witness"):
        rc.verify_receipt(plain, plain_proof, keys, policy=WINDOW_RECEIPTS, witnesses=[witness.vkey()])


def test_tlog_proof_format(window: Ledger, root: Signer) -> None:
    signed = signing.sign_checkpoint(window, root)
    hashes = tuple(window.inclusion_proof(2, signed.size))
    proof = rc.TlogProof(2, hashes, signed.note, extra=b"x")
    text = proof.text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra eA==\nindex 2\n") and text.endswith(signed.note)
    assert rc.parse_tlog_proof(text) == proof
    verified = rc.verify_tlog_proof(proof, window.get(3).raw_hash, [root.public_raw])
    assert verified.size == signed.size
    for bad in ("c2sp.org/tlog-proof@v1\nindex 2\n", "index 2\n\n" + signed.note,
                "c2sp.org/tlog-proof@v1\nindex 02\n\n" + signed.note,
                "c2sp.org/tlog-proof@v1\nindex 2\nAAAA\n\n" + signed.note):
        with pytest.raises(FormatError):
            rc.parse_tlog_proof(bad)


def test_inclusion_records_for_partial_exports(window: Ledger, root: Signer) -> None:
    signed = signing.sign_checkpoint(window, root)
    seqs = [e.seq for e in window.events(stream="window/w1")]
    proofs = rc.inclusion_proofs(window, seqs, signed.size, chunk=2)
    verified = cp.verify_checkpoint(signed.note, [root.public_raw])
    for seq in seqs:
        record = json.loads(json.dumps(rc.inclusion_record(seq, signed.size, proofs[seq])))
        assert record["hashes"] == [h.hex() for h in window.inclusion_proof(seq - 1, signed.size)]
        rc.verify_inclusion_record(record, window.get(seq).hash, verified)
    record = rc.inclusion_record(3, signed.size, proofs[3])
    with pytest.raises(VerificationError) as info:
        rc.verify_inclusion_record(record, window.get(4).hash, verified)  # a swapped proof
    assert (info.value.seq, info.value.rule) == (3, "proof")
    with pytest.raises(VerificationError):
        rc.verify_inclusion_record({**record, "index": 3}, window.get(3).hash, verified)
    with pytest.raises(VerificationError):
        rc.verify_inclusion_record({**record, "tree_size": 2}, window.get(3).hash, verified)


def test_verification_summary_shape() -> None:
    vsa = rc.verification_summary(verifier_id="https://tally.example/audit", time_verified="2026-01-01T00:00:00Z",
                                  resource_uri="bundle:x", passed=True,
                                  subjects=[{"name": "bundle", "digest": {"sha256": "00" * 32}}])
    assert vsa["predicateType"] == "https://slsa.dev/verification_summary/v1"
    assert vsa["predicate"]["verificationResult"] == "PASSED"


def test_bundle_proofs_for_a_partial_export(window: Ledger, root: Signer, tmp_path: Path) -> None:
    from ledger.event import Event, event_from_json

    with pytest.raises(FormatError, match="signing key"):
        rc.write_bundle_proofs(window, tmp_path, window.size(), "window/w1", None)
    files = rc.write_bundle_proofs(window, tmp_path, window.size(), "window/w1", root)
    assert files["checkpoint_size"] == window.size() and set(files) == {"checkpoint_size", "checkpoint.txt",
                                                                        "proofs.jsonl"}
    checkpoint = cp.open_checkpoint((tmp_path / "checkpoint.txt").read_text(), [root.public_raw])
    lines = (tmp_path / "proofs.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"seq": 2, "index": 1, "tree_size": window.size(),
                                    "hashes": json.loads(lines[0])["hashes"]}
    assert list(json.loads(lines[0])) == ["seq", "index", "tree_size", "hashes"]
    events = [event_from_json(e.to_json()) for e in window.events(stream="window/w1")]
    assert rc.verify_bundle_proofs(lines, events, checkpoint) == 4

    def fails(lines_: list[str], events_: list[Event], match: str) -> None:
        with pytest.raises(VerificationError, match=match):
            rc.verify_bundle_proofs(lines_, events_, checkpoint)

    fails(lines[:2] + lines[3:], events, "is for seq 5")  # a proof line deleted
    fails(lines, events[:2] + events[3:], "is for seq 4")  # an event line deleted
    fails(lines[:3], events, "no line 4")
    fails([*lines, lines[0]], events, "more lines")
    fails([lines[1], lines[0], *lines[2:]], events, "is for seq 3")  # two lines swapped
    swapped = json.loads(lines[0])
    swapped["hashes"] = json.loads(lines[1])["hashes"]  # another event's proof under this seq
    fails([json.dumps(swapped), *lines[1:]], events, "not included")
    edited = event_from_json({**events[1].to_json(), "payload": {"gate": "rng", "verdict": "FAIL"}})
    fails(lines, [events[0], edited, *events[2:]], "recomputed hash")
    rehashed = dataclasses.replace(edited, hash=edited.computed_hash())  # edited, and its hash recomputed
    fails(lines, [events[0], rehashed, *events[2:]], "not included")
    # a stored checkpoint covering the stream is reused; a full export gets the one at its size
    again = rc.write_bundle_proofs(window, tmp_path, window.size(), "window/w1", None)
    assert again == files
    full = tmp_path / "full"
    full.mkdir()
    assert rc.write_bundle_proofs(window, full, window.size(), None, None)["checkpoint_size"] == window.size()
    assert not (full / "proofs.jsonl").exists()


def test_write_receipt_refuses_a_planted_symlink(window: Ledger, root: Signer, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    out = tmp_path / "r"
    out.mkdir()
    (out / "3.tlog-proof").symlink_to(victim)
    with pytest.raises(FormatError, match=r"3\.tlog-proof is a symbolic link; refusing to follow it"):
        rc.write_receipt(rc.build_receipt(window, 3, root, WINDOW_RECEIPTS), out)
    assert victim.read_bytes() == b"precious\n"
