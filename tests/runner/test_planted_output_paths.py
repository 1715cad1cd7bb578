"""Outputs tally creates (report directories, demo directories, family files) never follow a planted symlink.

One test per kind of path the ``--out`` tests (``tests/ledger/test_cli_robustness.py``)
do not already cover: the report writer itself (the CLI stages it in a private directory,
``tally demo`` does not), the demo's ``--dir`` (with and without ``--force``), and
``write_family``. Each planted link is refused with one line, the victim left as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.errors import FormatError
from runner.decide import compute
from runner.measure import synthetic_family, write_family
from runner.report import write_report
from tests.report.cases import CASES

VICTIM = b"precious\n"


def tally(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    directory = tmp_path / "victims"
    directory.mkdir()
    path = directory / "victim"
    path.write_bytes(VICTIM)
    return path


def untouched(victim: Path) -> None:
    assert victim.read_bytes() == VICTIM
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim"]


@pytest.mark.parametrize("planted", ["report.md", "report.html", "plots", "out"])
def test_the_report_writer_refuses_a_planted_symlink(tmp_path: Path, victim: Path, planted: str) -> None:
    data: Any = CASES["win2_no_change"][0]()
    out = tmp_path / "out"
    if planted == "out":
        out.symlink_to(victim.parent)
    else:
        out.mkdir()
        (out / planted).symlink_to(victim.parent if planted == "plots" else victim)
    with pytest.raises(FormatError, match="is a symbolic link; refusing to follow it") as caught:
        write_report(data, compute(data), out, plots=planted == "plots")
    assert "\n" not in str(caught.value)
    untouched(victim)


def test_the_report_writer_never_writes_through_its_old_temporary_name(tmp_path: Path, victim: Path) -> None:
    data: Any = CASES["win2_no_change"][0]()
    out = tmp_path / "out"
    out.mkdir()
    for name in (".report.md.tmp", ".report.html.tmp"):  # the names it used to write before renaming
        (out / name).symlink_to(victim)
    paths = write_report(data, compute(data), out, plots=False)
    assert paths.markdown.read_text().startswith("# ") and not paths.markdown.is_symlink()
    untouched(victim)


def test_demo_dir_through_a_symlink_is_refused(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "demo"
    link.symlink_to(victim.parent)
    code, out, err = tally("demo", "--scenario", "ledger", "--dir", str(link), "--force")
    assert code == 2 and out == "" and err.count("\n") == 1 and "symbolic link" in err, err
    untouched(victim)


def test_demo_force_removes_planted_links_without_following_them(tmp_path: Path, victim: Path) -> None:
    directory = tmp_path / "demo"
    directory.mkdir()
    (directory / "tally.db").symlink_to(victim)
    (directory / "bundle").symlink_to(victim.parent)
    code, _, err = tally("demo", "--scenario", "ledger", "--dir", str(directory), "--force")
    assert code == 0, err
    assert not (directory / "tally.db").is_symlink() and not (directory / "bundle").is_symlink()
    untouched(victim)


def test_write_family_refuses_a_planted_symlink(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "family.jsonl"
    link.symlink_to(victim)
    with pytest.raises(FormatError, match=r"family file .* is a symbolic link"):
        write_family(link, synthetic_family("opinions", short=1, long=0))
    untouched(victim)


@pytest.mark.parametrize("dangling", [True, False])
def test_init_refuses_a_database_path_that_is_a_symlink(tmp_path: Path, victim: Path, dangling: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "tally.db").symlink_to(victim.parent / "new.db" if dangling else victim)
    code, out, err = tally("init", "--origin", "tally.test/planted")
    assert code == 2 and out == "" and err.count("\n") == 1 and "is a symbolic link" in err, err
    untouched(victim)  # no ledger (and no .tally key) created beside the link's target
    assert not (tmp_path / ".tally").exists()
