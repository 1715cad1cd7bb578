"""The HTTP witness end to end: a split view kept as evidence and proven offline; the quorum client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import note as notes
from ledger.checkpoint import open_checkpoint
from ledger.keys import Signer, load_signer
from ledger.store import Ledger, NewEvent
from ledger.witness_client import parse_policy

from .witnesshttp import OTHER_ROOT, body, free_port, root_of, serve_witness, signed

runner = CliRunner()
ORIGIN = "tally.test/witnessed"


def tally(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


# ----------------------------------------------------------------- split view -> evidence -> fork proof


@pytest.fixture
def split_view(workdir: Path) -> Iterator[tuple[str, str]]:
    """A witness that cosigned size 5 and was then shown another size-5 tree signed by the same log key."""
    log = Signer.generate()
    log_vkey = notes.vkey(ORIGIN, log.public_raw)
    with serve_witness(workdir, Signer.generate(), "witness.test/w1", log_vkeys=[log_vkey]) as served:
        first = httpx.post(f"{served.url}/add-checkpoint", content=body(0, [], signed(ORIGIN, 5, root_of(5), log)))
        assert first.status_code == 200
        other = signed(ORIGIN, 5, OTHER_ROOT, log)
        refused = httpx.post(f"{served.url}/add-checkpoint", content=body(5, [], other))
        assert refused.status_code == 422  # 409 in tlog-witness v1.0.0: the latest spec stands
        # a failed proof is kept too, but proves nothing to others
        bad = httpx.post(f"{served.url}/add-checkpoint",
                         content=body(5, [b"\x01" * 32], signed(ORIGIN, 9, root_of(9), log)))
        assert bad.status_code == 422
        yield served.db, log_vkey


def test_split_view_is_refused_kept_exported_and_audited_as_fork(workdir: Path, split_view: tuple[str, str]) -> None:
    db, log_vkey = split_view
    code, out, err = tally("witness", "evidence", "--db", db, "--json")
    assert code == 0, err
    entries = json.loads(out)["evidence"]
    assert [(e["kind"], e["cosigned_size"], e["submitted_size"]) for e in entries] == [
        ("root_mismatch", 5, 5), ("bad_proof", 5, 9)]
    code, out, err = tally("witness", "fork-proof", str(entries[0]["id"]), "--db", db, "--vkey", log_vkey,
                           "--out", "fork.json")
    assert code == 0, err
    proof = json.loads((workdir / "fork.json").read_text())
    # both notes are the log-signed checkpoints, whole
    for member in ("a", "b"):
        assert open_checkpoint(proof[member], [log_vkey], threshold=0).size == 5
    code, out, err = tally("audit", "--fork-proof", "fork.json", "--vkey", log_vkey)
    assert code == 1, err
    assert out.startswith(f"FORK {ORIGIN}: two checkpoints of size 5")
    assert out.count(f"signed by {log_vkey}") == 2  # both signatures verified under the log's key
    code, out, _ = tally("audit", "--fork-proof", "fork.json", "--json")  # the file's own vkey
    assert code == 1 and json.loads(out)["fork"] is True
    # the failed proof is no fork proof
    code, _, err = tally("witness", "fork-proof", str(entries[1]["id"]), "--db", db, "--vkey", log_vkey,
                         "--out", "bad.json")
    assert code == 2 and "proves no fork" in err and not (workdir / "bad.json").exists()


def test_forged_fork_proof_is_refused(workdir: Path, split_view: tuple[str, str]) -> None:
    db, log_vkey = split_view
    assert tally("witness", "fork-proof", "1", "--db", db, "--vkey", log_vkey, "--out", "fork.json")[0] == 0
    proof = json.loads((workdir / "fork.json").read_text())
    parsed = notes.parse_note(proof["b"])
    sig = parsed.signatures[0]
    forged = notes.NoteSignature(sig.name, sig.key_id, bytes([sig.signature[0] ^ 0x80]) + sig.signature[1:])
    proof["b"] = notes.Note(parsed.text, (forged,)).render()
    (workdir / "forged.json").write_text(json.dumps(proof))
    code, out, err = tally("audit", "--fork-proof", "forged.json", "--vkey", log_vkey)
    assert code == 2 and out == "" and "not a valid fork proof" in err and "does not verify" in err
    # another key's signature (a stranger under the log's name) is no signature by the log
    stranger = Signer.generate()
    proof["b"] = signed(ORIGIN, 5, OTHER_ROOT, stranger)
    (workdir / "stranger.json").write_text(json.dumps(proof))
    code, _, err = tally("audit", "--fork-proof", "stranger.json", "--vkey", log_vkey)
    assert code == 2 and "not a valid fork proof" in err
    # two copies of one checkpoint contradict nothing
    proof["b"] = proof["a"]
    (workdir / "same.json").write_text(json.dumps(proof))
    code, _, err = tally("audit", "--fork-proof", "same.json", "--vkey", log_vkey)
    assert code == 2 and "no fork" in err


def test_fork_proof_pinned_by_a_vkey_file_refuses_a_strangers_fork(workdir: Path,
                                                                   split_view: tuple[str, str]) -> None:
    """A fork proof made up by anyone with a key of their own (named in the file) proves nothing: a --vkey
    given as a file (as everywhere else) pins the log's key, it is never dropped for the file's own."""
    _, log_vkey = split_view
    stranger = Signer.generate()
    made_up = {"format": "tally-fork-proof/v1", "origin": ORIGIN,
               "log_vkeys": [notes.vkey(ORIGIN, stranger.public_raw)], "witness": None, "kind": "root_mismatch",
               "a": signed(ORIGIN, 5, root_of(5), stranger), "b": signed(ORIGIN, 5, OTHER_ROOT, stranger)}
    (workdir / "made_up.json").write_text(json.dumps(made_up))
    (workdir / "log.vkey").write_text(log_vkey + "\n")
    code, out, err = tally("audit", "--fork-proof", "made_up.json", "--vkey", "log.vkey")
    assert code == 2 and out == "" and "not a valid fork proof" in err
    witness_only = notes.vkey("witness.test/w1", Signer.generate().public_raw, notes.SIG_COSIGNATURE)
    code, out, err = tally("audit", "--fork-proof", "made_up.json", "--vkey", witness_only)
    assert code == 2 and out == "" and "needs the log's vkey" in err


# ----------------------------------------------------------------- the quorum client


def _ledger(workdir: Path, events: int) -> tuple[Ledger, Signer]:
    code, _, err = tally("init", "--origin", ORIGIN)
    assert code == 0, err
    book = Ledger.open(str(workdir / "tally.db"))
    root = load_signer(workdir / ".tally" / "root.pem")
    book.append_many([NewEvent("s", "test.event", {"i": i}) for i in range(events)], root)
    return book, root


def _policy(workdir: Path, witnesses: list[tuple[str, str, str]], quorum: str) -> Path:
    lines = ["# three witnesses, two must cosign"]
    lines += [f"witness {name} {vkey} {url}" for name, vkey, url in witnesses]
    lines += [f"group main {quorum} {' '.join(name for name, _, _ in witnesses)}", "quorum main"]
    path = workdir / "policy.txt"
    path.write_text("\n".join(lines) + "\n")
    parse_policy(path.read_text())
    return path


def test_quorum_of_three_one_down_one_answering_409_first(workdir: Path) -> None:
    book, root = _ledger(workdir, 12)
    log_vkey = notes.vkey(ORIGIN, root.public_raw)
    w1, w3 = Signer.generate(), Signer.generate()
    down = Signer.generate()
    with serve_witness(workdir, w1, "witness.test/w1", log_vkeys=[log_vkey]) as s1, \
            serve_witness(workdir, w3, "witness.test/w3", log_vkeys=[log_vkey]) as s3:
        # w3 already cosigned size 7 of this ledger: it answers the client's "old 0" with 409 and 7
        early = signed(ORIGIN, 7, book.root(7), root)
        assert httpx.post(f"{s3.url}/add-checkpoint", content=body(0, [], early)).status_code == 200
        down_vkey = notes.vkey("witness.test/w2", down.public_raw, notes.SIG_COSIGNATURE)
        policy = _policy(workdir, [("w1", s1.vkey, s1.url), ("w2", down_vkey, f"http://127.0.0.1:{free_port()}"),
                                   ("w3", s3.vkey, s3.url)], "2")
        code, out, err = tally("checkpoint", "--witnesses", str(policy), "--witness-timeout", "5")
        assert code == 0, err
        assert "witness w2:" in err  # the one down is named
        verified = open_checkpoint(out, [log_vkey], witnesses=[s1.vkey, s3.vkey, down_vkey], threshold=2)
        assert verified.size == book.size() and {w.verifier.name for w in verified.witnesses} == {
            "witness.test/w1", "witness.test/w3"}
        # w3 advanced from 7 by the consistency proof the client sent
        status = httpx.post(f"{s3.url}/add-checkpoint", content=body(7, [], early))
        assert status.status_code == 409 and status.text == f"{book.size()}\n"
        # the ledger stored the log-signed checkpoint, as `tally checkpoint` always does
        assert tally("checkpoint", "show")[1] in out


def test_quorum_fails_closed_with_two_down(workdir: Path) -> None:
    _, root = _ledger(workdir, 4)
    log_vkey = notes.vkey(ORIGIN, root.public_raw)
    w1 = Signer.generate()
    with serve_witness(workdir, w1, "witness.test/w1", log_vkeys=[log_vkey]) as s1:
        downs = [(f"w{i}", notes.vkey(f"witness.test/w{i}", Signer.generate().public_raw, notes.SIG_COSIGNATURE),
                  f"http://127.0.0.1:{free_port()}") for i in (2, 3)]
        policy = _policy(workdir, [("w1", s1.vkey, s1.url), *downs], "2")
        code, out, err = tally("checkpoint", "--witnesses", str(policy), "--witness-timeout", "3")
        assert code == 3 and out == ""
        assert "witness quorum not met: 1 of 3" in err and "w2:" in err and "w3:" in err
        code, out, err = tally("checkpoint", "--witnesses", str(policy), "--witness-timeout", "3", "--fail-open")
        assert code == 0 and "quorum not met" in err
        assert len(open_checkpoint(out, [log_vkey], witnesses=[s1.vkey], threshold=1).witnesses) == 1


def test_a_witness_reply_that_does_not_verify_is_not_attached(workdir: Path) -> None:
    """A witness answering under another key than the policy's: its line is refused, the quorum fails closed."""
    _, root = _ledger(workdir, 3)
    log_vkey = notes.vkey(ORIGIN, root.public_raw)
    with serve_witness(workdir, Signer.generate(), "witness.test/w1", log_vkeys=[log_vkey]) as s1:
        claimed = notes.vkey("witness.test/w1", Signer.generate().public_raw, notes.SIG_COSIGNATURE)
        policy = _policy(workdir, [("w1", claimed, s1.url)], "1")
        code, out, err = tally("checkpoint", "--witnesses", str(policy))
        assert code == 3 and out == "" and "does not verify" in err


def test_a_dribbling_witness_is_cut_at_its_deadline(workdir: Path) -> None:
    """A witness that sends its status line and then one header byte every 0.2 s never trips a per-read
    timeout; the witness's deadline (--witness-timeout) covers the whole exchange, so the quorum fails in time."""
    import socket
    import threading
    import time

    _ledger(workdir, 2)
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def dribble() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            end = time.monotonic() + 15
            while not stop.is_set() and time.monotonic() < end:
                try:
                    conn.sendall(b"X")
                except OSError:
                    return
                stop.wait(0.2)

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    try:
        vkey = notes.vkey("witness.test/slow", Signer.generate().public_raw, notes.SIG_COSIGNATURE)
        policy = _policy(workdir, [("slow", vkey, f"http://127.0.0.1:{listener.getsockname()[1]}")], "1")
        started = time.monotonic()
        code, out, err = tally("checkpoint", "--witnesses", str(policy), "--witness-timeout", "1")
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    assert code == 3 and out == "" and "slow: no whole answer within" in err
    assert elapsed < 8, elapsed  # the dribble lasts 15 s


def test_witness_serve_refuses_a_public_address_without_public(workdir: Path) -> None:
    (workdir / "w.pem").write_bytes(Signer.generate().private_pem())
    code, _, err = tally("witness", "serve", "--key", "w.pem", "--host", "0.0.0.0", "--log",
                         notes.vkey(ORIGIN, Signer.generate().public_raw))
    assert code == 2 and "not a loopback address" in err


def test_one_proof_per_old_size_and_a_409_beyond_the_log_is_fatal(workdir: Path) -> None:
    """Tessera's TestWitnessReusesProofs and its 'larger than log size' rule, against real witnesses."""
    from ledger.witness_client import collect_cosignatures

    book, root = _ledger(workdir, 12)
    log_vkey = notes.vkey(ORIGIN, root.public_raw)
    keys = [Signer.generate() for _ in range(3)]
    with serve_witness(workdir, keys[0], "witness.test/a", log_vkeys=[log_vkey]) as a, \
            serve_witness(workdir, keys[1], "witness.test/b", log_vkeys=[log_vkey]) as b, \
            serve_witness(workdir, keys[2], "witness.test/c", log_vkeys=[log_vkey]) as c:
        early = signed(ORIGIN, 6, book.root(6), root)
        for served in (a, b):
            assert httpx.post(f"{served.url}/add-checkpoint", content=body(0, [], early)).status_code == 200
        ahead = signed(ORIGIN, 40, OTHER_ROOT, root)  # the witness saw a tree larger than the log's
        assert httpx.post(f"{c.url}/add-checkpoint", content=body(0, [], ahead)).status_code == 200
        policy = parse_policy("".join(f"witness {n} {s.vkey} {s.url}\n" for n, s in (("a", a), ("b", b), ("c", c)))
                              + "group all3 2 a b c\nquorum all3\n")
        calls: list[tuple[int, int]] = []

        def proof_for(old: int, new: int) -> list[bytes]:
            calls.append((old, new))
            return list(book.consistency_proof(old, new))

        note = signed(ORIGIN, 12, book.root(12), root)
        collected = collect_cosignatures(note, policy, proof_for, timeout=10, sleep=lambda _: None)
        assert sorted(collected.lines) == ["a", "b"] and collected.quorum
        assert calls == [(6, 12)]  # one proof from 6, shared by both witnesses that needed it
        assert "larger than this log's 12" in collected.failures["c"]


def test_receipt_export_collects_cosignatures_for_promotion(workdir: Path) -> None:
    """The promotion path: a receipt proven against a checkpoint the policy's witnesses cosigned over HTTP."""
    book, root = _ledger(workdir, 2)
    book.append_many([NewEvent("window/w1", "gate.result", {"gate": "rng", "verdict": "PASS", "evidence": {},
                                                            "plan_sha256": "ab" * 32})], root)
    seq = book.size()
    log_vkey = notes.vkey(ORIGIN, root.public_raw)
    with serve_witness(workdir, Signer.generate(), "witness.test/w1", log_vkeys=[log_vkey]) as s1:
        policy = _policy(workdir, [("w1", s1.vkey, s1.url)], "1")
        code, _, err = tally("receipt", "export", str(seq), "--out", "receipts", "--witnesses", str(policy))
        assert code == 0, err
        code, out, err = tally("receipt", "verify", f"receipts/{seq}.dsse.json", "--vkey", log_vkey, "--vkey",
                               s1.vkey, "--witness-threshold", "1")
        assert code == 0 and "1 witness cosignature(s)" in out, err


@pytest.mark.postgres
def test_witness_on_postgresql_keeps_state_and_evidence_and_never_rolls_back(workdir: Path, pg_url: str) -> None:
    """The same compare-and-swap on PostgreSQL: concurrent steps from one state, one wins; a split view kept."""
    import threading

    from ledger.witness_store import WitnessStore

    log = Signer.generate()
    log_vkey = notes.vkey(ORIGIN, log.public_raw)
    with serve_witness(workdir, Signer.generate(), "witness.test/pg", log_vkeys=[log_vkey], db=pg_url) as served:
        assert httpx.post(f"{served.url}/add-checkpoint",
                          content=body(0, [], signed(ORIGIN, 4, root_of(4), log))).status_code == 200
        results: dict[int, int] = {}

        def submit(size: int) -> None:
            from .witnesshttp import proof

            note = signed(ORIGIN, size, root_of(size), log)
            results[size] = httpx.post(f"{served.url}/add-checkpoint", content=body(4, proof(4, size), note),
                                       timeout=30).status_code

        threads = [threading.Thread(target=submit, args=(size,)) for size in range(5, 11)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [size for size, status in results.items() if status == 200]
        assert len(winners) == 1 and set(results.values()) == {200, 409}
        won = winners[0]
        split = httpx.post(f"{served.url}/add-checkpoint", content=body(won, [], signed(ORIGIN, won, OTHER_ROOT, log)))
        assert split.status_code == 422
    store = WitnessStore(pg_url, create=False)
    try:
        latest = store.latest(ORIGIN)
        assert latest is not None and latest.checkpoint.size == won and latest.step == 2
        (kept,) = store.evidence()
        assert kept.kind == "root_mismatch"
    finally:
        store.close()
    code, _, err = tally("witness", "fork-proof", str(kept.id), "--db", pg_url, "--vkey", log_vkey, "--out", "f.json")
    assert code == 0, err
    assert tally("audit", "--fork-proof", "f.json", "--vkey", log_vkey)[0] == 1


def test_slippery_witness_gives_nothing_after_three_tries(workdir: Path) -> None:
    """Tessera's TestSlipperyWitness: a witness that always answers 409 with another size."""
    import http.server
    import threading

    from ledger.witness_client import collect_cosignatures

    seen: list[bytes] = []

    class Slippery(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(409)
            self.send_header("Content-Type", "text/x.tlog.size")
            self.end_headers()
            self.wfile.write(str(len(seen) % 9).encode())  # no newline, as Tessera's test

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slippery)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        log = Signer.generate()
        vkey = notes.vkey("witness.test/slippery", Signer.generate().public_raw, notes.SIG_COSIGNATURE)
        policy = parse_policy(f"witness s {vkey} http://127.0.0.1:{server.server_port}\nquorum none\n")
        note = signed(ORIGIN, 9, root_of(9), log)
        from .witnesshttp import proof

        collected = collect_cosignatures(note, policy, lambda old, new: proof(old, new), sleep=lambda _: None)
    finally:
        server.shutdown()
        server.server_close()
    assert collected.lines == {} and "after 3 tries" in collected.failures["s"]
    assert [b.split(b"\n", 1)[0] for b in seen] == [b"old 0", b"old 1", b"old 2"]  # each 409's size adopted


def test_logs_v0_list_of_the_witness_network() -> None:
    """transparency-dev/witness TestParsePublicWitnessConfig's example, and its refusals."""
    from ledger.errors import FormatError
    from ledger.witness_server import parse_log_list

    logs, skipped = parse_log_list("""
        # List:      10qps-100klogs
        logs/v0

        # 1st list item -- foo's log
        vkey sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8
        qpd 86400
        contact https://tlog.foo.org/contact

        vkey sigsum.org/v1/tree/44ad38f8226ff9bd27629a41e55df727308d0a1cd8a2c31d3170048ac1dd22a1+682b49db+AQ7H4WhDEZsSA3enOROsasvC0D2CQy4sNrhBsJqVhB8l
        origin something-not-equal-to-vkey-keyname
        qpd 24

        vkey tlog.andxor.it+d5e6b3d0+AU6uJ3h8tb+RRMdGjHV4KCrrHoKfIYGbhL2A46thEhKQ
        qpd 1
        vkey other.example+00000000+BwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA
        """)
    assert sorted(logs) == ["something-not-equal-to-vkey-keyname", "sum.golang.org", "tlog.andxor.it"]
    assert logs["sum.golang.org"][0].vkey() == "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
    assert skipped == 1  # a key type tally cannot verify
    for bad in ("vkey a+00000000+AQ", "logs/v0\nvkey sum.golang.org+033de0af+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8\n",
                "logs/v0\nlogs/v0\n", "logs/v0\nqpd 3\n", "logs/v0\nfrobnicate x\n", ""):
        with pytest.raises(FormatError):
            parse_log_list(bad)


def test_evidence_of_a_missing_database_is_one_line_and_creates_nothing(workdir: Path) -> None:
    code, out, err = tally("witness", "evidence", "--db", "nowhere.db")
    assert code == 2 and out == "" and "no witness database" in err
    assert not (workdir / "nowhere.db").exists()
