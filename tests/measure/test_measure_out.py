"""``tally measure --out``: requests.jsonl and summary.json are never written through a planted symlink."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from runner.app import OutDir
from runner.sim import SimHandle


def _measure(server: SimHandle, family_file: Path, out: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["measure", "--url", server.url, "--family", str(family_file),
                                      "--requests", "2", "--max-tokens", "8", "--out", str(out), "--json"])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("name", ["requests.jsonl", "summary.json"])
def test_a_symlink_planted_at_a_measure_output_is_not_followed(server: SimHandle, family_file: Path,
                                                               tmp_path: Path, name: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    sent = server.truth()["next"]
    code, stdout, stderr = _measure(server, family_file, out)
    assert code == 2 and stdout == ""
    assert stderr == f"tally: --out: {out / name} is a symbolic link; refusing to write through it\n"
    assert victim.read_text() == "precious\n"
    assert (out / name).is_symlink() and server.truth()["next"] == sent  # refused before any request


def test_measure_outputs_are_whole_files_with_no_temporary_left(server: SimHandle, family_file: Path,
                                                                tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = _measure(server, family_file, out)
    assert code == 0, stderr
    assert sorted(p.name for p in out.iterdir()) == ["requests.jsonl", "summary.json"]
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["status"] for line in lines)
    assert json.loads((out / "summary.json").read_text()) == json.loads(stdout)


def test_a_symlink_planted_while_streaming_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    with OutDir.open(out) as directory, directory.stream("summary.json") as handle:
        handle.write(b"{}\n")
        (out / "summary.json").symlink_to(victim)  # planted after the check, before the rename
    assert victim.read_text() == "precious\n"
    assert not (out / "summary.json").is_symlink() and (out / "summary.json").read_bytes() == b"{}\n"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_a_growing_output_replaces_an_old_file_and_refuses_a_link_planted_before_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from ledger.errors import FormatError

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "requests.jsonl").write_bytes(b"old run\n")
    with OutDir.open(out) as directory, directory.growing("requests.jsonl") as handle:
        handle.write(b"{}\n")
        handle.flush()
        assert (out / "requests.jsonl").read_bytes() == b"{}\n"  # visible at its name while it grows
    real_unlink = os.unlink

    def unlink_then_plant(name: str, *, dir_fd: int) -> None:  # the race: a link appears after the removal
        real_unlink(name, dir_fd=dir_fd)
        (out / name).symlink_to(victim)

    monkeypatch.setattr(os, "unlink", unlink_then_plant)
    with pytest.raises(FormatError, match="is a symbolic link; refusing to write through it"), \
            OutDir.open(out) as directory, directory.growing("requests.jsonl"):
        pass
    assert victim.read_text() == "precious\n"


def test_a_streamed_output_that_fails_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), OutDir.open(out) as directory, directory.stream("requests.jsonl") as handle:
        handle.write(b"half")
        raise RuntimeError("the wave broke")
    assert list(out.iterdir()) == []
