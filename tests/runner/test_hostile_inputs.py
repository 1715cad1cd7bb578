"""Files a gate reads or writes are hostile: receipts and simulator configs are bounded, the
rehearsal's outputs never write through a planted symlink."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ledger.errors import FormatError
from runner.gates.receipts import MAX_RECEIPT_BYTES, read_admission_receipt, read_rng_receipt
from runner.rehearsal.rehearsal import Rehearsal, write_rehearsal
from runner.sim.config import load_config


@pytest.mark.parametrize("reader", [read_admission_receipt, read_rng_receipt])
@pytest.mark.parametrize(("body", "says"), [
    (b"[" * 5000 + b"]" * 5000, "nest"),
    (b'{"verdict": "FAIL", "verdict": "PASS"}', "twice"),
    (b'{"a": "' + b"x" * (MAX_RECEIPT_BYTES + 1) + b'"}', "limit"),
])
def test_a_hostile_receipt_is_one_line(tmp_path: Path, reader: object, body: bytes, says: str) -> None:
    path = tmp_path / "receipt.json"
    path.write_bytes(body)
    with pytest.raises(FormatError) as caught:
        reader(path)  # type: ignore[operator]
    assert says in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("name", "body", "says"), [
    ("deep.toml", b"a = " + b"[" * 600 + b"]" * 600, "nests deeper than"),
    ("deep.json", b"[" * 5000 + b"]" * 5000, "nests 5000 levels deep"),
    ("twice.json", b'{"seed": 1, "seed": 2}', "twice"),
    ("list.json", b"[1, 2]", "expected a table of settings"),
])
def test_a_hostile_simulator_config_is_one_line(tmp_path: Path, name: str, body: bytes, says: str) -> None:
    path = tmp_path / name
    path.write_bytes(body)
    with pytest.raises(FormatError) as caught:
        load_config(path)
    assert "simulator config" in str(caught.value) and says in str(caught.value), caught.value


def test_rehearsal_outputs_refuse_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    victim.chmod(0o644)
    out = tmp_path / "out"
    out.mkdir()
    (out / "responses.jsonl").symlink_to(victim)
    rehearsal = Rehearsal("http://127.0.0.1:1", 2, (), (), (), (), False, ())
    with pytest.raises(FormatError, match=r"responses\.jsonl is a symbolic link; refusing to follow it"):
        write_rehearsal(rehearsal, out)
    assert victim.read_text() == "keep me\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert sorted(p.name for p in out.iterdir()) == ["responses.jsonl"]  # nothing else, no temporary left
    (out / "responses.jsonl").unlink()
    summary, responses, _ = write_rehearsal(rehearsal, out)
    for path in (summary, responses):
        assert not path.is_symlink() and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in out.iterdir()) == ["rehearsal.json", "responses.jsonl"]
    link = tmp_path / "link"
    link.symlink_to(out)
    with pytest.raises(FormatError, match=r"--out .*link is a symbolic link; refusing to follow it"):
        write_rehearsal(rehearsal, link)
