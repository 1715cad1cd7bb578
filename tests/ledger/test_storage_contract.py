"""One storage contract, run on SQLite in memory, a SQLite file and a real PostgreSQL 15."""

from __future__ import annotations

import hashlib

import pytest

from ledger import merkle
from ledger.errors import FormatError, PayloadError, PolicyError
from ledger.keys import Signer, key_entry
from ledger.store import Blob, Ledger, NewEvent
from ledger.stored import verify_ledger


@pytest.fixture
def book(any_url: str, root: Signer) -> Ledger:
    ledger = Ledger(any_url)
    ledger.init("tally.test/contract", root)
    yield ledger
    ledger.close()


class TestStorageContract:
    def test_genesis(self, book: Ledger, root: Signer) -> None:
        genesis = book.get(1)
        assert genesis.type == "ledger.created" and genesis.stream == "ledger"
        assert genesis.prev == "0" * 64 and genesis.actor == root.id
        assert book.info.origin == "tally.test/contract"
        assert len(book.info.ledger_id) == 32
        assert book.key_ring().keys[root.id].roles == ("root",)

    def test_init_twice_is_refused(self, book: Ledger, root: Signer) -> None:
        with pytest.raises(PolicyError):
            book.init("again", root)
        assert book.size() == 1

    def test_append_and_read_back(self, book: Ledger, root: Signer) -> None:
        first = book.append("notes", "note.added", {"text": "héllo", "n": [1, 2.5, None, True]}, root)
        assert first.seq == 2 and first.prev == book.get(1).hash
        stored = book.get(2)
        assert stored == first
        assert stored.payload == {"text": "héllo", "n": [1, 2.5, None, True]}
        assert stored.computed_hash() == stored.hash
        assert book.head() == (2, first.hash)

    def test_batch_is_contiguous_and_ordered(self, book: Ledger, root: Signer) -> None:
        items = [NewEvent("s/a" if i % 3 else "s/b", "x.y", {"i": i}) for i in range(50)]
        events = book.append_many(items, root)
        assert [e.seq for e in events] == list(range(2, 52))
        assert [e.payload["i"] for e in book.events(1)] == list(range(50))
        assert [e.payload["i"] for e in book.events(1, stream="s/b")] == [i for i in range(50) if i % 3 == 0]
        assert [e.seq for e in book.events(10, until=12)] == [11, 12]
        assert [e.seq for e in book.events(0, types=["ledger.created"])] == [1]

    def test_events_iterates_in_batches(self, book: Ledger, root: Signer) -> None:
        book.append_many([NewEvent("s", "x.y", {"i": i}) for i in range(25)], root)
        assert [e.seq for e in book.events(0, batch=7)] == list(range(1, 27))

    def test_blob_written_with_its_event(self, book: Ledger, root: Signer) -> None:
        blob = Blob(b"raw records\n" * 100, "application/x-ndjson")
        event = book.append("s", "wave.measured", {"records": blob.ref()}, root, blobs=[blob])
        assert event.payload["records"]["blob"] == "sha256:" + hashlib.sha256(blob.data).hexdigest()
        assert book.blob(blob.sha256) == blob
        assert verify_ledger(book).blobs_checked == 1

    def test_failed_append_writes_nothing(self, book: Ledger, root: Signer) -> None:
        blob = Blob(b"evidence")
        with pytest.raises(PayloadError):
            book.append_many([NewEvent("s", "x.y", {"ok": 1}, (blob,)), NewEvent("s", "x.y", {"bad": float("nan")})],
                             root)
        assert book.size() == 1 and book.blob(blob.sha256) is None
        with pytest.raises(PayloadError):  # body over 1 MiB, caught inside the transaction
            book.append_many([NewEvent("s", "x.y", {"ok": 1}, (blob,)), NewEvent("s", "x.y", {"big": "x" * (1 << 20)})],
                             root)
        assert book.size() == 1 and book.blob(blob.sha256) is None

    def test_key_management(self, book: Ledger, root: Signer) -> None:
        op = Signer.generate("op")
        book.append("ledger", "key.added", key_entry(op.public_raw, "op", ["signer"]), root)
        book.append("notes", "note.added", {"by": "op"}, op)
        with pytest.raises(PolicyError):
            book.append("ledger", "key.added", key_entry(Signer.generate().public_raw, "x", ["root"]), op)
        with pytest.raises(PolicyError, match="already"):
            book.append("ledger", "key.added", key_entry(op.public_raw, "op-again", ["signer"]), root)
        with pytest.raises(FormatError):
            book.append("notes", "key.added", key_entry(Signer.generate().public_raw, "x", ["signer"]), root)
        book.append("ledger", "key.revoked", {"id": op.id, "reason": "rotated"}, root)
        assert book.key_ring().keys[op.id].revoked_at_seq == 4
        with pytest.raises(PolicyError, match="revoked"):
            book.append("notes", "note.added", {}, op)
        assert verify_ledger(book).verified.keys.keys[op.id].revoked_at_seq == 4

    def test_merkle_tree_matches_recomputation(self, book: Ledger, root: Signer) -> None:
        book.append_many([NewEvent("s", "x.y", {"i": i}) for i in range(40)], root)
        for i in range(5):
            book.append("s", "x.y", {"single": i}, root)
        leaves = [merkle.hash_leaf(e.raw_hash) for e in book.events()]
        for size in (1, 2, 7, 8, 33, len(leaves)):
            assert book.root(size) == merkle.root_from_leaves(leaves[:size])
        assert verify_ledger(book).verified.root == book.root(len(leaves))


@pytest.fixture(params=["sqlite-file", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """Backends that several engines (hosts, processes) can open at once."""
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_two_handles_share_one_chain(shared_url: str, root: Signer) -> None:
    book = Ledger(shared_url)
    book.init("tally.test/shared", root)
    other = Ledger.open(shared_url)
    book.append("s", "x.y", {"from": "a"}, root)
    other.append("s", "x.y", {"from": "b"}, root)  # book's cached head is now stale: it must re-read
    book.append("s", "x.y", {"from": "a"}, root)
    assert [e.payload.get("from") for e in book.events(1)] == ["a", "b", "a"]
    assert verify_ledger(other).verified.size == 4
    other.close()
    book.close()
