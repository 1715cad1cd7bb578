"""C2SP signed notes and vkeys: real notes from the wild, the parsing rules, cosignatures."""

from __future__ import annotations

import base64

import pytest

from ledger import note
from ledger.checkpoint import parse_checkpoint, verify_checkpoint
from ledger.errors import FormatError, VerificationError
from ledger.keys import Signer

from .helpers import b64, vectors


def _vector(name: str) -> tuple[str, str]:
    entry = vectors("signed_note_vectors.json")[name]
    return entry["vkey"], entry["note"]


def test_c2sp_example_note_verifies() -> None:
    vkey, message = _vector("c2sp_signed_note_example")
    verifier = note.parse_vkey(vkey)
    assert (verifier.name, f"{verifier.key_id:08x}") == ("example.com/foo", "530d903a")
    opened = note.open_note(message, [verifier])
    assert opened.text == "This is an example message.\n"
    assert [v.verifier for v in opened.verified] == [verifier]
    assert verifier.vkey() == vkey


def test_sum_golang_org_checkpoint_verifies() -> None:
    vkey, message = _vector("sum_golang_org_checkpoint")
    verifier = note.parse_vkey(vkey)  # its base64 contains '+': split on the first two only
    assert vkey.count("+") > 2 and verifier.name == "sum.golang.org" and f"{verifier.key_id:08x}" == "033de0ae"
    opened = note.open_note(message, [verifier])
    checkpoint = parse_checkpoint(opened.text)
    assert (checkpoint.origin, checkpoint.size) == ("go.sum database tree", 65664258)
    assert checkpoint.root == b64("WVVNVD2qx+fTq31zkj6UAqxT5X6HvGphGM+o8Thnbsg=")
    # as a checkpoint too: its key name is not its origin, which a vkey allows
    assert verify_checkpoint(message, [vkey]) == checkpoint


def test_rekor_v2_checkpoint_verifies_with_a_vkey_built_from_its_key() -> None:
    entry = vectors("signed_note_vectors.json")["rekor_v2_staging_entry"]
    public_raw = b64(entry["public_key_spki_der_b64"])[-32:]  # Ed25519 SPKI: the raw key is the tail
    verifier = note.Verifier(entry["origin"], note.SIG_ED25519, public_raw)
    assert f"{verifier.key_id:08x}" == entry["log_id_full_c2sp_keyid_hex"][:8]
    checkpoint = verify_checkpoint(entry["checkpoint"], [public_raw])  # raw key: named after the origin
    assert checkpoint.size == entry["tree_size"] and checkpoint.root == b64(entry["root_hash_b64"])


@pytest.mark.parametrize("name", ["c2sp_signed_note_example", "sum_golang_org_checkpoint"])
def test_a_one_byte_change_fails(name: str) -> None:
    vkey, message = _vector(name)
    verifier = note.parse_vkey(vkey)
    text, _, signatures = message.rpartition("\n\n")
    tampered_text = ("X" + text[1:]) + "\n\n" + signatures
    with pytest.raises(VerificationError):
        note.open_note(tampered_text, [verifier])
    line = signatures.rstrip("\n")
    prefix, _, encoded = line.rpartition(" ")
    raw = bytearray(base64.b64decode(encoded))
    raw[10] ^= 1  # inside the Ed25519 signature, after the key ID
    tampered_sig = text + "\n\n" + prefix + " " + base64.b64encode(bytes(raw)).decode() + "\n"
    with pytest.raises(VerificationError):
        note.open_note(tampered_sig, [verifier])


def test_vkey_rules() -> None:
    vkey, _ = _vector("sum_golang_org_checkpoint")
    name, hex8, key = vkey.split("+", 2)
    with pytest.raises(FormatError, match="does not match"):
        note.parse_vkey(f"{name}+{int(hex8, 16) ^ 1:08x}+{key}")
    with pytest.raises(FormatError):
        note.parse_vkey(f"{name}+{hex8[:7]}+{key}")
    with pytest.raises(FormatError):
        note.parse_vkey(f"other name+{hex8}+{key}")
    with pytest.raises(FormatError):
        note.parse_vkey(f"{name}+{hex8}")
    ecdsa = base64.b64encode(b"\x02" + base64.b64decode(key)[1:]).decode()
    with pytest.raises(FormatError, match="type"):
        note.parse_vkey(f"{name}+{hex8}+{ecdsa}")
    assert note.parse_vkey(f"{name}+{hex8.upper()}+{key}").name == name


def test_unknown_signatures_are_ignored_and_a_known_bad_one_rejects() -> None:
    log, stranger = Signer.generate(), Signer.generate()
    signed = note.sign("hello\n", "log.example", log)
    foreign = note.signature_line("hello\n", "stranger.example", stranger)
    message = note.with_signatures(signed, [foreign])
    verifier = note.Verifier("log.example", note.SIG_ED25519, log.public_raw)
    opened = note.open_note(message, [verifier])
    assert len(opened.verified) == 1 and [s.name for s in opened.unverified] == ["stranger.example"]
    # the stranger's key is known now, but its line was made over other text: the note is rejected
    bad = note.NoteSignature("stranger.example", foreign.key_id, stranger.sign(b"other\n"))
    with pytest.raises(VerificationError, match=r"stranger\.example"):
        note.open_note(note.with_signatures(signed, [bad]),
                       [verifier, note.Verifier("stranger.example", note.SIG_ED25519, stranger.public_raw)])
    with pytest.raises(VerificationError, match="no signature"):
        note.open_note(signed, [note.Verifier("log.example", note.SIG_ED25519, stranger.public_raw)])


def test_text_may_contain_blank_lines_and_the_last_blank_line_splits() -> None:
    log = Signer.generate()
    text = "Quasimodo\n\nhunchback\n"
    message = note.sign(text, "bells.example", log)
    opened = note.open_note(message, [note.Verifier("bells.example", note.SIG_ED25519, log.public_raw)])
    assert opened.text == text


@pytest.mark.parametrize("message", [
    "no blank line\n\u2014 a AAAAAAA=\n",
    "text\n\n",
    "text\n\n\u2014 a AAAAAAA=",
    "text\n\n- a AAAAAAA=\n",
    "text\n\n\u2014 a b c\n",
    "text\n\n\u2014 a+b AAAAAAA=\n",
    "text\n\n\u2014 a AAAA\n",
    "tab\there\n\n\u2014 a AAAAAAA=\n",
    "carriage\r\n\n\u2014 a AAAAAAA=\n",
])
def test_malformed_notes_are_refused(message: str) -> None:
    with pytest.raises(FormatError):
        note.parse_note(message)


def test_signature_count_cap() -> None:
    log = Signer.generate()
    message = note.sign("capped\n", "log.example", log)
    extra = [note.NoteSignature(f"w{i}", i, b"\x00" * 64) for i in range(note.MAX_SIGNATURES)]
    with pytest.raises(FormatError, match="at most"):
        note.with_signatures(message, extra)
    crowded = message + "".join(s.line() for s in extra)
    with pytest.raises(FormatError, match="more than"):
        note.parse_note(crowded)
    assert len(note.parse_note(message + "".join(s.line() for s in extra[:-1])).signatures) == note.MAX_SIGNATURES


def test_duplicate_signatures_are_dropped() -> None:
    log = Signer.generate()
    message = note.sign("twice\n", "log.example", log)
    doubled = message + message.split("\n\n")[1]
    opened = note.open_note(doubled, [note.Verifier("log.example", note.SIG_ED25519, log.public_raw)])
    assert len(opened.verified) == 1


def test_cosignature_spec_example_decodes() -> None:
    line = ("\u2014 witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZ"
            "qhf5nNo0xUe+mbIUBkBIfZ+qnA==\n")
    parsed = note.parse_note("x\n\n" + line).signatures[0]
    assert f"{parsed.key_id:08x}" == "8d66cf3f"
    assert int.from_bytes(parsed.signature[:8], "big") == 1679315147 and len(parsed.signature) == 72


def test_cosignature_roundtrip_and_binding() -> None:
    witness, log = Signer.generate(), Signer.generate()
    text = "example.com/log\n5\n" + base64.b64encode(b"\x01" * 32).decode() + "\n"
    cosig = note.cosign(text, "w.example", witness, 1700000000)
    verifier = note.Verifier("w.example", note.SIG_COSIGNATURE, witness.public_raw)
    assert verifier.key_id == cosig.key_id != note.key_id("w.example", note.SIG_ED25519, witness.public_raw)
    message = note.with_signatures(note.sign(text, "example.com/log", log), [cosig])
    opened = note.open_note(message, [verifier])
    assert opened.verified[0].timestamp == 1700000000
    # the timestamp is signed: changing it breaks the cosignature
    forged = note.NoteSignature(cosig.name, cosig.key_id, (1700000001).to_bytes(8, "big") + cosig.signature[8:])
    with pytest.raises(VerificationError):
        note.open_note(note.with_signatures(message, [forged]), [verifier])
    # a cosigner key never matches as a log key (the type byte enters the key ID)
    with pytest.raises(VerificationError):
        note.open_note(message, [note.Verifier("w.example", note.SIG_ED25519, witness.public_raw)])
    assert note.parse_vkey(verifier.vkey()) == verifier
