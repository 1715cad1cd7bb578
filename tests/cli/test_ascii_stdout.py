"""ASCII stdout: with ``LC_ALL=POSIX PYTHONUTF8=0`` every command prints without crashing.

There Python's stdout is strict ASCII. ``tally checkpoint`` and ``tally witness cosign``
crashed with a UnicodeEncodeError on the em dash of the note, after the checkpoint was
stored or the witness state advanced (exit 1, a traceback, the note lost). Now text for
people is escaped (``\\u2014``) and machine output (notes, ``--json``, event lines) is
written as its UTF-8 bytes: the same bytes as in a UTF-8 locale, so a note saved from an
ASCII terminal still verifies. Each command runs in a subprocess under that locale; a
window's progress output that cannot be written (a closed pipe) never stops the window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.note import parse_note
from ledger.store import Ledger

TALLY = str(Path(sys.executable).with_name("tally"))
STREAM = "notes/é"  # a stream name no ASCII stdout can print as it is


def ascii_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LC_", "TALLY_")) and k not in ("LANG", "LANGUAGE", "PYTHONIOENCODING", "PYTHONUTF8")}
    return env | {"LC_ALL": "POSIX", "PYTHONUTF8": "0", "TALLY_DB": str(tmp_path / "tally.db")}


def tally(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run([TALLY, *args], env=env or ascii_env(tmp_path), cwd=tmp_path, capture_output=True,
                          timeout=120, check=False)
    assert b"Traceback" not in done.stderr and b"UnicodeEncodeError" not in done.stderr, done.stderr.decode()
    return done


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    probe = tally(tmp_path, "--version")
    assert probe.returncode == 0
    check = subprocess.run([sys.executable, "-c", "import sys; print(sys.stdout.encoding)"],
                           env=ascii_env(tmp_path), capture_output=True, text=True, check=True)
    assert check.stdout.strip() == "ascii"  # the locale really is an ASCII one here
    assert tally(tmp_path, "init", "--origin", "tally.test/ascii").returncode == 0
    # Non-ASCII arguments need a UTF-8 locale (below, an ASCII one passes them as undecodable bytes).
    assert tally(tmp_path, "append", "note.added", "--stream", STREAM, "--payload", '{"text": "naïve — ok"}',
                 env=utf8_env(tmp_path)).returncode == 0
    return tmp_path


def utf8_env(tmp_path: Path) -> dict[str, str]:
    return ascii_env(tmp_path) | {"LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"}


def test_checkpoint_prints_on_an_ascii_stdout(ledger_dir: Path) -> None:
    done = tally(ledger_dir, "checkpoint")
    assert done.returncode == 0, done.stderr
    stored = Ledger.open(str(ledger_dir / "tally.db")).checkpoint_notes()
    assert [size for size, _ in stored] == [2]
    assert done.stdout == stored[0][1].encode("utf-8")  # the note, byte for byte: it still verifies
    assert parse_note(done.stdout.decode("utf-8")).signatures
    shown = tally(ledger_dir, "checkpoint", "show")
    assert shown.returncode == 0 and shown.stdout == done.stdout
    as_json = tally(ledger_dir, "checkpoint", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["note"] == stored[0][1]


def test_witness_cosign_prints_on_an_ascii_stdout(ledger_dir: Path) -> None:
    note = tally(ledger_dir, "checkpoint").stdout
    (ledger_dir / "cp.txt").write_bytes(note)
    vkey = tally(ledger_dir, "keys", "vkey").stdout.decode("ascii").strip()
    assert tally(ledger_dir, "keys", "new", "w1", "--out", "w1.pem").returncode == 0
    done = tally(ledger_dir, "witness", "cosign", "cp.txt", "--key", "w1.pem", "--state", "wstate",
                 "--vkey", vkey)
    assert done.returncode == 0, done.stderr
    cosigned = done.stdout.decode("utf-8")
    assert cosigned.startswith(note.decode("utf-8")) and cosigned.count("\u2014 ") == 2
    state = next((ledger_dir / "wstate").rglob("checkpoint")).read_text(encoding="utf-8")
    assert state == cosigned  # what was printed is what the witness remembers
    again = tally(ledger_dir, "witness", "cosign", "cp.txt", "--key", "w1.pem", "--state", "wstate", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["old_size"] == 2


def test_append_log_and_show_print_on_an_ascii_stdout(ledger_dir: Path) -> None:
    (ledger_dir / "payload.json").write_text('{"text": "€"}', encoding="utf-8")  # files are read as UTF-8
    appended = tally(ledger_dir, "append", "note.added", "--stream", "notes", "--payload", "@payload.json", "--json")
    assert appended.returncode == 0
    line = appended.stdout.decode("utf-8").strip()
    book = Ledger.open(str(ledger_dir / "tally.db"))
    assert line == book.get(3).line()  # the canonical line, UTF-8 as stored
    plain = tally(ledger_dir, "append", "note.added", "--stream", "notes", "--payload", "{}")
    assert plain.returncode == 0 and plain.stdout == b"4\n"
    log = tally(ledger_dir, "log")
    assert log.returncode == 0 and log.stdout.isascii()
    assert b"notes/\\xe9" in log.stdout  # escaped for people, not dropped
    show = tally(ledger_dir, "show", "2")
    assert show.returncode == 0 and show.stdout.isascii() and b"na\\xefve \\u2014 ok" in show.stdout
    lines = tally(ledger_dir, "log", "--json").stdout.decode("utf-8").splitlines()
    assert lines == [event.line() for event in book.events()]


def test_a_utf8_locale_prints_the_same_machine_bytes(ledger_dir: Path) -> None:
    for args in (["log", "--json"], ["show", "2", "--json"], ["checkpoint"], ["checkpoint", "show", "--json"]):
        ascii_run = tally(ledger_dir, *args).stdout
        assert tally(ledger_dir, *args, env=utf8_env(ledger_dir)).stdout == ascii_run, args


def test_a_non_ascii_argument_in_an_ascii_locale_is_one_line(ledger_dir: Path) -> None:
    """The terminal's UTF-8 bytes arrive undecoded (surrogates): refused with one line, nothing appended."""
    done = tally(ledger_dir, "append", "note.added", "--stream", STREAM, "--payload", "{}")
    assert done.returncode == 2 and b"contains a surrogate" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert Ledger.open(str(ledger_dir / "tally.db")).size() == 2


def test_verify_and_keys_print_on_an_ascii_stdout(ledger_dir: Path) -> None:
    assert tally(ledger_dir, "checkpoint").returncode == 0
    for args in (["verify"], ["verify", "--json"], ["keys", "list"], ["checkpoint", "show", "--json"]):
        done = tally(ledger_dir, *args)
        assert done.returncode == 0, (args, done.stderr)


def _window_world(tmp_path: Path) -> tuple[object, dict[str, str]]:
    from runner.demo.scenarios import pass_chain_gate
    from runner.gates.admission import admit

    from ..execution.worlds import gate_all, window, world

    w = world(tmp_path, [window("seed000-controlled.toml", "ascii", chain="none")])
    gate_all(w)
    pass_chain_gate(w.book, w.root, "ascii", lambda _t: None)
    admit(w.book, w.root, "ascii")
    env = ascii_env(tmp_path) | {"TALLY_KEY": str(tmp_path / ".tally" / "root.pem")}
    return w, env


def _ended(book: Ledger) -> list[str]:
    return [e.type for e in book.events(stream="window/ascii") if e.type in ("window.closed", "decision.recorded")]


def test_window_run_prints_on_an_ascii_stdout(tmp_path: Path) -> None:
    from ..execution.worlds import close

    w, env = _window_world(tmp_path)
    try:
        done = subprocess.run([TALLY, "window", "run", "ascii", "--site", str(tmp_path / "site.toml"), "--execute"],
                              env=env, cwd=tmp_path, capture_output=True, timeout=300, check=False)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode()
        assert done.stdout.isascii() and b"ending restored" in done.stdout
        assert _ended(w.book) == ["window.closed", "decision.recorded"]
    finally:
        close(w)  # type: ignore[arg-type]


def test_a_closed_stdout_never_stops_a_window(tmp_path: Path) -> None:
    """Nobody reads the terminal any more (a closed pipe): the window still runs to its restore and decision."""
    from ..execution.worlds import close

    w, env = _window_world(tmp_path)
    try:
        proc = subprocess.Popen([TALLY, "window", "run", "ascii", "--site", str(tmp_path / "site.toml"),
                                 "--execute"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the first progress line meets a broken pipe
        err = proc.stderr.read()
        assert proc.wait(timeout=300) == 0 and b"Traceback" not in err, err.decode()
        assert _ended(w.book) == ["window.closed", "decision.recorded"]
        production = [e.payload for e in w.book.events(stream="window/ascii", types=["production.state"])]
        assert production[-1]["state"] == "up"  # production restored
    finally:
        close(w)  # type: ignore[arg-type]
