"""tlog-tiles: the spec's 70,000-leaf layout, publishing incrementally and atomically, proofs from a real
static web server (nginx), tampered tiles and bundles detected."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import merkle
from ledger import note as notes
from ledger.checkpoint import Checkpoint
from ledger.errors import FormatError
from ledger.keys import Signer, load_signer
from ledger.store import Ledger, NewEvent
from ledger.tiles import TileSource, encode_index, layout, publish
from ledger.tiles_audit import audit_tiles

from .nginxstatic import serve_static

runner = CliRunner()
ORIGIN = "tally.test/tiles"
PLAN = hashlib.sha256(b"plan").hexdigest()


def tally(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_index_encoding_of_the_spec() -> None:
    assert encode_index(1234067) == "x001/x234/067"
    assert encode_index(0) == "000" and encode_index(999) == "999" and encode_index(1000) == "x001/000"


def test_golden_70000_leaf_layout(tmp_path: Path) -> None:
    """tlog-tiles: 273 full level-0 tiles and one of width 112, one full level-1 tile and one of width 17,
    one level-2 tile of width 1; a 256-leaf tree is a full level-0 tile and a level-1 tile of width 1."""
    assert layout(256) == [(0, 0, 256), (1, 0, 1)]
    data = [i.to_bytes(4, "big") for i in range(70_000)]
    leaves = [merkle.hash_leaf(d) for d in data]
    signer = Signer.generate()
    root = merkle.root_from_leaves(leaves)
    note = notes.sign(Checkpoint(ORIGIN, 70_000, root).text(), ORIGIN, signer)
    result = publish(tmp_path, leaves, note, lambda s, e: data[s:e])
    files = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    level0 = {f for f in files if f.startswith("tile/0/")}
    assert len([f for f in level0 if ".p/" not in f]) == 273 and "tile/0/273.p/112" in level0 and len(level0) == 274
    assert {f for f in files if f.startswith(("tile/1/", "tile/2/"))} == {"tile/1/000", "tile/1/001.p/17",
                                                                          "tile/2/000.p/1"}
    assert len([f for f in files if f.startswith("tile/entries/")]) == 274 and "tile/entries/273.p/112" in files
    assert files == set(result.written) and result.written[-1] == "checkpoint"
    assert all((tmp_path / f).stat().st_size == 8192 for f in level0 if ".p/" not in f)
    assert (tmp_path / "tile/0/273.p/112").stat().st_size == 112 * 32
    # proofs from these tiles alone: the root, an inclusion proof, a consistency proof from 40,000
    vkey = notes.Verifier(ORIGIN, notes.SIG_ED25519, signer.public_raw)
    since = notes.sign(Checkpoint(ORIGIN, 40_000, merkle.root_from_leaves(leaves[:40_000])).text(), ORIGIN, signer)
    source = TileSource(str(tmp_path))
    audit = audit_tiles(source, [vkey], since=since, seq=65_537, full=False, with_events=False)
    assert audit.inclusion == (65_537, 70_000) and audit.consistency == (40_000, 70_000)
    assert source.fetched < 20  # the proofs read a handful of tiles, not the tree


# ----------------------------------------------------------------- a ledger, published and served by nginx


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = tally("init", "--origin", ORIGIN)
    assert code == 0, err
    return tmp_path


def _append(workdir: Path, count: int, *, receipt: bool = False) -> None:
    book = Ledger.open(str(workdir / "tally.db"))
    signer = load_signer(workdir / ".tally" / "root.pem")
    events = [NewEvent("s", "test.event", {"i": i}) for i in range(count)]
    if receipt:
        events.insert(2, NewEvent("window/w1", "gate.result", {"gate": "rng", "verdict": "PASS", "evidence": {},
                                                               "plan_sha256": PLAN}))
    book.append_many(events, signer)
    book.close()


def _vkey() -> str:
    code, out, _ = tally("keys", "vkey")
    assert code == 0
    return out.strip()


@pytest.fixture
def published(workdir: Path) -> Iterator[tuple[Path, str, str]]:
    """A ledger of 600 events (2 full tiles and a partial one), a checkpoint saved at 300, published, served."""
    _append(workdir, 298, receipt=True)  # seq 1 is the genesis; the gate.result is seq 4
    code, saved, _ = tally("checkpoint")
    assert code == 0
    (workdir / "cp-300.txt").write_text(saved)
    _append(workdir, 300)
    assert tally("checkpoint")[0] == 0
    code, out, err = tally("tiles", "publish", "site", "--json")
    assert code == 0, err
    assert json.loads(out)["size"] == 600
    with serve_static(workdir / "site", workdir / "nginx") as url:
        yield workdir / "site", url, _vkey()


def test_proofs_verified_from_a_static_server(published: tuple[Path, str, str]) -> None:
    site, url, vkey = published
    assert httpx.get(f"{url}/tile/0/000").content == (site / "tile/0/000").read_bytes()
    code, out, err = tally("audit", "--tiles", url, "--vkey", vkey, "--since", "cp-300.txt", "--seq", "4")
    assert code == 0, err
    assert out.splitlines() == [
        f"OK tiles {url}: checkpoint {ORIGIN} size 600 signed by the log",
        "OK tree: 4 tiles, 3 entry bundles and 600 events hash to the checkpoint's root",
        "OK inclusion: event 4 is in the tree of size 600",
        "OK consistency: size 300 is a prefix of size 600",
    ]
    code, out, _ = tally("audit", "--tiles", url, "--vkey", vkey, "--edge-only", "--json")
    assert code == 0 and json.loads(out)["inclusion"] == {"seq": 600, "size": 600}
    # a receipt exported against the size-300 checkpoint, checked against the served log
    code, _, err = tally("receipt", "export", "4", "--out", "receipts", "--checkpoint", "cp-300.txt")
    assert code == 0, err
    code, out, err = tally("receipt", "verify", "receipts/4.dsse.json", "--vkey", vkey, "--tiles", url)
    assert code == 0, err
    assert out.splitlines()[-1] == (f"OK tiles {url}: event 4 is in the served tree of size 600, which extends the "
                                    "receipt's checkpoint (size 300)")


@pytest.mark.parametrize("target", ["tile/0/001", "tile/1/000.p/2", "tile/entries/000", "tile/events/002.p/88"])
def test_a_tampered_tile_or_bundle_is_detected(published: tuple[Path, str, str], target: str) -> None:
    site, url, vkey = published
    path = site / target
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    code, out, err = tally("audit", "--tiles", url, "--vkey", vkey)
    assert code == 1 and out == "" and err.startswith("FAIL tiles:"), err


def test_a_tampered_tile_is_detected_by_the_receipt_check(published: tuple[Path, str, str]) -> None:
    site, url, vkey = published
    assert tally("receipt", "export", "4", "--out", "receipts", "--checkpoint", "cp-300.txt")[0] == 0
    path = site / "tile/entries/000"
    data = bytearray(path.read_bytes())
    data[2 + 3 * 34] ^= 0x01  # the first byte of entry 3 (seq 4)
    path.write_bytes(bytes(data))
    code, _, err = tally("receipt", "verify", "receipts/4.dsse.json", "--vkey", vkey, "--tiles", url)
    assert code == 1 and "entry 3" in err


def test_publishing_twice_writes_only_what_changed(workdir: Path) -> None:
    _append(workdir, 599)
    assert tally("checkpoint")[0] == 0
    code, out, _ = tally("tiles", "publish", "site", "--json")
    first = json.loads(out)
    assert code == 0 and first["kept"] == 0
    stamps = {p: p.stat().st_mtime_ns for p in (workdir / "site").rglob("*") if p.is_file()}
    code, out, _ = tally("tiles", "publish", "site", "--json")
    assert code == 0 and json.loads(out)["written"] == [] and not json.loads(out)["checkpoint_changed"]
    _append(workdir, 300)
    assert tally("checkpoint")[0] == 0
    code, out, _ = tally("tiles", "publish", "site", "--json")
    second = json.loads(out)
    assert sorted(second["written"]) == sorted([
        "tile/0/002", "tile/0/003.p/132", "tile/entries/002", "tile/entries/003.p/132", "tile/events/002",
        "tile/events/003.p/132", "tile/1/000.p/3", "checkpoint"])
    assert second["written"][-1] == "checkpoint"
    for path, stamp in stamps.items():  # nothing published before was rewritten
        assert path.stat().st_mtime_ns == stamp or path.name == "checkpoint"


def test_a_failed_publish_leaves_the_old_checkpoint_and_its_tiles(tmp_path: Path) -> None:
    """Atomic for readers: the checkpoint is replaced only after every tile it needs is in place."""
    signer = Signer.generate()
    data = [i.to_bytes(4, "big") for i in range(1000)]
    leaves = [merkle.hash_leaf(d) for d in data]

    def note(size: int) -> str:
        return notes.sign(Checkpoint(ORIGIN, size, merkle.root_from_leaves(leaves[:size])).text(), ORIGIN, signer)

    publish(tmp_path, leaves[:300], note(300), lambda s, e: data[s:e])
    before = (tmp_path / "checkpoint").read_bytes()

    def failing(start: int, end: int) -> list[bytes]:
        if start >= 512:
            raise OSError("disk full")
        return data[start:end]

    with pytest.raises(OSError):
        publish(tmp_path, leaves, note(1000), failing)
    assert (tmp_path / "checkpoint").read_bytes() == before
    vkey = notes.Verifier(ORIGIN, notes.SIG_ED25519, signer.public_raw)
    assert audit_tiles(TileSource(str(tmp_path)), [vkey], with_events=False).checkpoint.size == 300
    with pytest.raises(FormatError, match="not a prefix"):  # a tree that does not extend the published one
        other = [merkle.hash_leaf(b"x" + d) for d in data]
        publish(tmp_path, other, notes.sign(Checkpoint(ORIGIN, 1000, merkle.root_from_leaves(other)).text(), ORIGIN,
                                            signer), lambda s, e: data[s:e])


def test_publish_refuses_a_planted_symlink(workdir: Path) -> None:
    _append(workdir, 10)
    assert tally("checkpoint")[0] == 0
    (workdir / "site" / "tile").mkdir(parents=True)
    (workdir / "elsewhere").mkdir()
    os.symlink(workdir / "elsewhere", workdir / "site" / "tile" / "0")
    code, _, err = tally("tiles", "publish", "site")
    assert code == 2 and "symbolic link" in err
    assert list((workdir / "elsewhere").iterdir()) == []
