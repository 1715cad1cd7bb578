"""The tlog-witness conformance vectors (vectors/witness_add_checkpoint.json), every case over real HTTP.

One `tally witness serve` subprocess witnesses one origin per case (a logs/v0 list names
them all), so each case starts from its own state: ``state_before`` is reached by an
``old 0`` submission, then the case's request is sent and the status, content type,
body, the state after (read on the monitor endpoint) and the evidence log are checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger import note as notes
from ledger.checkpoint import parse_checkpoint
from ledger.keys import Signer
from ledger.witness_store import WitnessStore

from .witnesshttp import OTHER_ROOT, Served, body, proof, root_of, serve_witness, signed

VECTORS = json.loads((Path(__file__).parent / "vectors" / "witness_add_checkpoint.json").read_text())
CASES = VECTORS["cases"]
LOG = Signer.generate()
STRANGER = Signer.generate()
WITNESS = Signer.generate()
WITNESS_NAME = "witness.test/w1"


def origin_of(index: int) -> str:
    return f"case{index}.test/log"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("conformance")
    lines = ["# tally conformance logs", "logs/v0", ""]
    for index in range(len(CASES) + 1):
        lines += [f"vkey {notes.vkey(origin_of(index), LOG.public_raw)}", "qpd 86400", "contact tests", ""]
    with serve_witness(tmp, WITNESS, WITNESS_NAME, logs="\n".join(lines)) as running:
        yield running


def _root(spec: str, size: int) -> bytes:
    return {"tree": root_of(size), "other": OTHER_ROOT, "empty": hashlib.sha256(b"").digest()}.get(spec) or \
        base64.b64decode(spec)


def _note(origin: str, size: int, root: bytes, signed_by: str) -> str:
    text = signed(origin, size, root, LOG)
    if signed_by == "log":
        return text
    stranger = signed(origin, size, root, STRANGER)
    stranger_line = stranger[stranger.rindex("\n\n") + 2:]
    if signed_by == "stranger":
        return stranger
    if signed_by == "log+stranger":
        return text + stranger_line
    assert signed_by == "bad"
    parsed = notes.parse_note(text)
    sig = parsed.signatures[0]
    broken = notes.NoteSignature(sig.name, sig.key_id, bytes([sig.signature[0] ^ 1]) + sig.signature[1:])
    return notes.Note(parsed.text, (broken,)).render()


def _proof(spec: Any, old: int, size: int, proof_from: int | None) -> list[bytes]:
    if isinstance(spec, list):
        return [base64.b64decode(h) for h in spec]
    if spec == "none":
        return []
    if spec == "garbage":
        return [b"\xaa" * 32] * 4
    hashes = proof(proof_from if proof_from is not None else old, size)
    return [*hashes, b"\xbb" * 32] if spec == "valid+extra" else hashes


def _state(served: Served, origin: str) -> int | None:
    digest = hashlib.sha256(origin.encode()).hexdigest()
    reply = httpx.get(f"{served.url}/{digest}/checkpoint", timeout=10)
    if reply.status_code == 404:
        return None
    assert reply.status_code == 200
    witness = notes.parse_vkey(served.vkey)
    log = notes.Verifier(origin, notes.SIG_ED25519, LOG.public_raw)
    opened = notes.open_note(reply.text, [witness, log])  # the log's signature and ours, both verified
    assert {v.verifier.sig_type for v in opened.verified} == {notes.SIG_ED25519, notes.SIG_COSIGNATURE}
    return parse_checkpoint(opened.text).size


def _raw_body(template: str, origin: str) -> bytes:
    note = signed(origin, 3, root_of(3), LOG)
    hashes = "".join(base64.b64encode(bytes([i]) * 32).decode() + "\n" for i in range(64))
    return (template.replace("{checkpoint}", note).replace("{64_hashes}\n", hashes)
            .replace("{20000_spaces}", "A" * 20000)).encode()


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_add_checkpoint_vector(served: Served, index: int) -> None:
    case = CASES[index]
    request = case.get("request", {})
    checkpoint = request.get("checkpoint", {})
    origin = checkpoint.get("origin", origin_of(index))
    before = case["state_before"]
    if before is not None:
        setup = httpx.post(f"{served.url}/add-checkpoint", timeout=10,
                           content=body(0, [], signed(origin, before, root_of(before), LOG)))
        assert setup.status_code == 200, setup.text
    if case.get("method") == "GET":
        reply = httpx.get(f"{served.url}/add-checkpoint", timeout=10)
    elif "raw_body" in case:
        reply = httpx.post(f"{served.url}/add-checkpoint", content=_raw_body(case["raw_body"], origin), timeout=10)
    else:
        size = checkpoint["size"]
        note = _note(origin, size, _root(checkpoint["root"], size), checkpoint["signed_by"])
        hashes = _proof(request["proof"], request["old"], size, request.get("proof_from"))
        reply = httpx.post(f"{served.url}/add-checkpoint", content=body(request["old"], hashes, note), timeout=10)
    expect = case["expect"]
    assert reply.status_code == expect["status"], reply.text
    if expect["body"] == "size":
        assert reply.headers["content-type"] == "text/x.tlog.size"
        assert reply.text == f"{0 if before is None else before}\n"
    elif expect["body"] == "cosignature":
        assert reply.text.startswith("\u2014 ") and reply.text.endswith("\n") and reply.text.count("\n") == 1
        full = notes.parse_note(note + reply.text)
        opened = notes.open_note(full, [notes.parse_vkey(served.vkey)])
        (cosig,) = opened.signers(notes.SIG_COSIGNATURE)
        assert cosig.timestamp and cosig.timestamp > 1_700_000_000  # never zero
    if case.get("method") != "GET" and "raw_body" not in case:
        assert _state(served, origin) == expect["state_after"]
    store = WitnessStore(served.db, create=False)
    try:
        kept = [e for e in store.evidence() if e.origin == origin]
    finally:
        store.close()
    if expect.get("evidence"):
        assert [e.kind for e in kept] == [expect["evidence"]]
        assert kept[0].submitted_note == note and parse_checkpoint(notes.parse_note(kept[0].cosigned_note).text).size \
            == before
    else:
        assert kept == []


def test_vectors_cover_every_row_of_the_spec_table() -> None:
    statuses = {c["expect"]["status"] for c in CASES}
    assert {200, 400, 403, 404, 409, 422} <= statuses
    kinds = {c["expect"].get("evidence") for c in CASES}
    assert {"root_mismatch", "bad_proof"} <= kinds
    marked = [c["name"] for c in CASES if "versions" in c]
    assert "same size, another root (a split view)" in marked  # 409 in v1.0.0, 422 at HEAD


def test_concurrent_updates_from_one_state_never_roll_back(served: Served) -> None:
    """The rollback race of the spec: many requests from the same old size, one wins, the rest get 409."""
    origin = origin_of(len(CASES))
    assert httpx.post(f"{served.url}/add-checkpoint", timeout=10,
                      content=body(0, [], signed(origin, 4, root_of(4), LOG))).status_code == 200
    results: dict[int, int] = {}

    def submit(size: int) -> None:
        note = signed(origin, size, root_of(size), LOG)
        results[size] = httpx.post(f"{served.url}/add-checkpoint", content=body(4, proof(4, size), note),
                                   timeout=30).status_code

    threads = [threading.Thread(target=submit, args=(size,)) for size in range(5, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [size for size, status in results.items() if status == 200]
    assert len(winners) == 1 and sorted(set(results.values())) == [200, 409]
    assert _state(served, origin) == winners[0]
