"""Witness state and saved checkpoints are never used through a planted symlink or over a foreign file.

The attack (a kind of path of "every path the runner creates is created safely"): a
symlink planted at ``STATE/<sha256(origin)>`` (the directory), at its ``.lock``, or at
one of its state files (``checkpoint``, ``vkeys``, ``origin``) used to be followed: the
lock and the state were written through it. Each is refused with one line, exit 2, the
victim unchanged and the state not advanced.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.keys import generate_key_file

ORIGIN = "tally.test/witness-planted"
VICTIM = b"precious\n"


def tally(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    assert tally("init", "--origin", ORIGIN)[0] == 0
    generate_key_file(tmp_path / "w1.pem", "w1")
    (tmp_path / "cp.txt").write_text(tally("checkpoint")[1])
    return tmp_path


@pytest.mark.parametrize("planted", ["directory", ".lock", "checkpoint", "vkeys", "origin", "dangling-checkpoint"])
def test_a_planted_symlink_in_the_witness_state_is_refused(workdir: Path, planted: str) -> None:
    victims = workdir / "victims"
    victims.mkdir()
    victim = victims / "victim"
    victim.write_bytes(VICTIM)
    state = workdir / "ws" / hashlib.sha256(ORIGIN.encode()).hexdigest()
    state.parent.mkdir()
    if planted == "directory":
        state.symlink_to(victims)
    else:
        state.mkdir()
        name = "checkpoint" if planted == "dangling-checkpoint" else planted
        (state / name).symlink_to(victims / "made-through-the-link" if planted.startswith("dangling") else victim)
    vkey = tally("keys", "vkey")[1].strip()
    code, out, err = tally("witness", "cosign", "cp.txt", "--key", "w1.pem", "--state", "ws", "--vkey", vkey)
    assert code == 2 and out == "", err
    assert "Traceback" not in err and err.count("\n") == 1
    assert "witness state" in err and "is a symbolic link; refusing to follow it" in err
    assert victim.read_bytes() == VICTIM
    assert sorted(p.name for p in victims.iterdir()) == ["victim"]
    checkpoint = state / "checkpoint"
    assert checkpoint.is_symlink() or not checkpoint.exists()  # the state did not advance


def test_a_clean_state_directory_is_created_and_advanced(workdir: Path) -> None:
    vkey = tally("keys", "vkey")[1].strip()
    code, _, err = tally("witness", "cosign", "cp.txt", "--key", "w1.pem", "--state", "ws", "--vkey", vkey)
    assert code == 0, err
    state = workdir / "ws" / hashlib.sha256(ORIGIN.encode()).hexdigest()
    assert sorted(p.name for p in state.iterdir()) == [".lock", "checkpoint", "origin", "vkeys"]  # no temp left


def test_verify_since_never_reads_a_saved_checkpoint_through_a_symlink(workdir: Path) -> None:
    assert tally("verify", "--since", "cp.txt")[0] == 0
    (workdir / "link.txt").symlink_to(workdir / "cp.txt")
    code, out, err = tally("verify", "--since", "link.txt")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "the saved checkpoint link.txt is a symbolic link; refusing to follow it" in err
