"""The window lock file beside a SQLite ledger is never followed through a symlink, never truncates a foreign file.

The attack: a planted ``tally.db.window-<id>.lock -> victim`` made ``tally window run``
truncate the victim and write the runner's pid into it. Now each planted file (a symlink,
dangling or not, a hard link, a file that is not a lock file, a FIFO) is refused with one
line, exit 2, before any host is touched, and the victim is left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.errors import FormatError
from ledger.store import Ledger
from runner.execution.lock import window_lock

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "examples" / "seed000-production-policy.toml"
WINDOW = "pp4-win2-production-policy"
VICTIM = b"precious\nnot a lock file\n"


def tally(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    assert tally("init", "--origin", "tally.test/locks")[0] == 0
    assert tally("window", "register", str(PLAN))[0] == 0
    shutil.copytree(REPO / "examples" / "site-scripts", tmp_path / "site-scripts")
    shutil.copy(REPO / "examples" / "site-commands.toml", tmp_path / "site.toml")  # loading it contacts nothing
    return tmp_path


def lock_path(workdir: Path, window: str) -> Path:
    return workdir / f"tally.db.window-{hashlib.sha256(window.encode()).hexdigest()[:16]}.lock"


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[Path]:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = elsewhere / "victim"
    path.write_bytes(VICTIM)
    path.chmod(0o644)
    yield path
    assert path.read_bytes() == VICTIM and (path.stat().st_mode & 0o777) == 0o644


def events(workdir: Path) -> int:
    book = Ledger.open(str(workdir / "tally.db"))
    try:
        return book.size()
    finally:
        book.close()


@pytest.mark.parametrize("planted", ["symlink", "dangling-symlink", "hard-link", "foreign-file"])
def test_a_planted_window_lock_file_is_refused_and_the_victim_untouched(workdir: Path, victim: Path,
                                                                       planted: str) -> None:
    lock = lock_path(workdir, WINDOW)
    if planted == "symlink":
        lock.symlink_to(victim)
    elif planted == "dangling-symlink":
        lock.symlink_to(victim.parent / "created-through-the-link")
    elif planted == "hard-link":
        os.link(victim, lock)
    else:
        lock.write_bytes(VICTIM)  # a regular file of one link, but not what tally writes there
    before = events(workdir)
    # `window run` refuses the window (not admitted) before it reaches the lock; `window abort`, which needs no
    # admission, takes the lock first: the planted file is refused there
    code, out, err = tally("window", "run", WINDOW, "--site", "site.toml", "--execute")
    assert code == 1 and "is not admitted" in err, err
    code, out, err = tally("window", "abort", WINDOW, "--site", "site.toml")
    assert code == 2 and out == "", err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"tally: the window's lock file {lock.name} "), err
    assert events(workdir) == before
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim"]  # nothing created through a link
    assert not (workdir / "site-state").exists()  # no site command ran
    if planted == "foreign-file":
        assert lock.read_bytes() == VICTIM


def test_a_fifo_at_the_lock_name_is_refused_without_blocking(workdir: Path) -> None:
    lock = lock_path(workdir, WINDOW)
    os.mkfifo(lock)
    book = Ledger.open(str(workdir / "tally.db"))
    try:
        with pytest.raises(FormatError, match="is a FIFO, not a regular file"), window_lock(book, WINDOW):
            pass
    finally:
        book.close()


def test_an_old_lock_file_is_reused_and_stamped(workdir: Path) -> None:
    lock = lock_path(workdir, WINDOW)
    lock.write_bytes(b"99999999999\n")  # left by a runner that died
    book = Ledger.open(str(workdir / "tally.db"))
    try:
        with window_lock(book, WINDOW):
            assert lock.read_bytes() == f"{os.getpid()}\n".encode()
    finally:
        book.close()
