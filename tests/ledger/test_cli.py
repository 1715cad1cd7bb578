"""The ledger commands: exit codes, outputs, and bad input (one line, exit 2, nothing appended)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.store import Ledger

from .independent_checker import check_events_jsonl

runner = CliRunner()


def tally(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TALLY_DB", raising=False)
    monkeypatch.delenv("TALLY_KEY", raising=False)
    monkeypatch.delenv("TALLY_KEY_PASSPHRASE", raising=False)
    code, _, err = tally("init", "--origin", "tally.test/cli")
    assert code == 0, err
    return tmp_path


def size(workdir: Path) -> int:
    return Ledger.open(str(workdir / "tally.db")).size()


def test_init_creates_root_key_0600(workdir: Path) -> None:
    key = workdir / ".tally" / "root.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in key.read_bytes()
    code, out, _ = tally("keys", "list", "--json")
    keys = json.loads(out)
    assert code == 0 and len(keys) == 1
    assert keys[0]["roles"] == ["root"] and keys[0]["revoked_at_seq"] is None
    assert set(keys[0]) == {"id", "name", "roles", "revoked_at_seq"}


def test_append_log_show(workdir: Path) -> None:
    code, out, _ = tally("append", "note.added", "--stream", "notes", "--payload", '{"text": "hello"}')
    assert (code, out.strip()) == (0, "2")
    (workdir / "p.json").write_text('{"n": [1, 2, 3]}')
    code, out, _ = tally("append", "note.added", "--stream", "other", "--payload", "@p.json", "--json")
    stored = json.loads(out)
    assert code == 0 and stored["seq"] == 3 and stored["payload"] == {"n": [1, 2, 3]}
    assert set(stored) == {"v", "ledger", "seq", "prev", "stream", "type", "time", "actor", "payload", "hash", "sig"}
    code, out, _ = tally("log", "--json", "--stream", "notes")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [e["seq"] for e in lines] == [2]
    code, out, _ = tally("log", "--json", "--since", "1")
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [2, 3]
    code, out, _ = tally("log", "--type", "ledger.created")
    assert code == 0 and "ledger.created" in out and len(out.splitlines()) == 1
    code, out, _ = tally("show", "3", "--json")
    assert json.loads(out) == stored


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("nan", ["x.y", "--stream", "s", "--payload", '{"x": NaN}']),
        ("big_integer", ["x.y", "--stream", "s", "--payload", '{"x": 1152921504606846976}']),
        ("not_an_object", ["x.y", "--stream", "s", "--payload", "[1, 2]"]),
        ("not_json", ["x.y", "--stream", "s", "--payload", "{nope"]),
        ("missing_file", ["x.y", "--stream", "s", "--payload", "@nowhere.json"]),
        ("bad_type", ["Not A Type", "--stream", "s", "--payload", "{}"]),
    ],
)
def test_bad_payload_exit_2_nothing_appended(workdir: Path, name: str, args: list[str]) -> None:
    code, out, err = tally("append", *args)
    assert code == 2, (name, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert size(workdir) == 1


def test_over_one_mebibyte_refused(workdir: Path) -> None:
    (workdir / "big.json").write_text(json.dumps({"blob": "x" * (1 << 20)}))
    code, _, err = tally("append", "x.y", "--stream", "s", "--payload", "@big.json")
    assert code == 2 and "1 MiB" in err
    assert size(workdir) == 1


def test_keys_new_add_revoke(workdir: Path) -> None:
    code, out, _ = tally("keys", "new", "op1", "--json")
    made = json.loads(out)
    assert code == 0 and stat.S_IMODE(Path(made["path"]).stat().st_mode) == 0o600
    code, _, err = tally("keys", "new", "op1")
    assert code == 2 and "refusing to overwrite" in err
    code, out, _ = tally("keys", "add", made["public_key_path"], "--name", "op1", "--role", "signer")
    assert code == 0
    code, out, _ = tally("--key", made["path"], "append", "x.y", "--stream", "s", "--payload", "{}", "--json")
    assert code == 0 and json.loads(out)["actor"] == made["id"]
    code, _, err = tally("--key", made["path"], "keys", "revoke", made["id"], "--reason", "self")
    assert code == 1 and "root" in err
    code, _, _ = tally("keys", "revoke", made["id"][:12], "--reason", "rotated")
    assert code == 0
    code, _, err = tally("--key", made["path"], "append", "x.y", "--stream", "s", "--payload", "{}")
    assert code == 1 and "revoked" in err
    keys = json.loads(tally("keys", "list", "--json")[1])
    assert [k["revoked_at_seq"] for k in keys if k["id"] == made["id"]] == [4]
    code, _, err = tally("keys", "add", made["public_key_path"], "--name", "x", "--role", "wizard")
    assert code == 2 and "wizard" in err


def test_encrypted_key(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_KEY_PASSPHRASE", "correct horse")
    code, out, _ = tally("keys", "new", "secret", "--json")
    path = json.loads(out)["path"]
    assert b"ENCRYPTED" in Path(path).read_bytes()
    tally("keys", "add", path + ".pub", "--name", "secret", "--role", "signer")
    assert tally("--key", path, "append", "x.y", "--stream", "s", "--payload", "{}")[0] == 0
    monkeypatch.setenv("TALLY_KEY_PASSPHRASE", "wrong")
    code, _, err = tally("--key", path, "append", "x.y", "--stream", "s", "--payload", "{}")
    assert code == 2 and "passphrase" in err


def test_verify_and_export_checked_by_independent_verifier(workdir: Path) -> None:
    for i in range(5):
        tally("append", "note.added", "--stream", f"s{i % 2}", "--payload", json.dumps({"i": i, "é": [0.5, "ü"]}))
    code, out, _ = tally("verify", "--json")
    result = json.loads(out)
    assert code == 0 and result["ok"] and result["size"] == 6
    code, out, _ = tally("export", "bundle", "--json")
    assert code == 0
    manifest = json.loads((workdir / "bundle" / "manifest.json").read_text())
    assert manifest["events"] == 6 and manifest["origin"] == "tally.test/cli"
    assert check_events_jsonl(workdir / "bundle" / "events.jsonl") == (6, result["head"])
    code, _, err = tally("export", "bundle")
    assert code == 2 and "not an empty directory" in err


def test_verify_failure_names_seq_and_rule(workdir: Path) -> None:
    from sqlalchemy import text

    tally("append", "note.added", "--stream", "s", "--payload", '{"i": 1}')
    tally("append", "note.added", "--stream", "s", "--payload", '{"i": 2}')
    book = Ledger.open(str(workdir / "tally.db"))
    with book.engine.begin() as conn:
        conn.execute(text("UPDATE events SET type = 'note.removed' WHERE seq = 2"))
    code, out, _ = tally("verify", "--json")
    assert code == 1 and json.loads(out) | {"error": ""} == {"ok": False, "seq": 2, "rule": 4, "error": ""}
    code, _, err = tally("verify")
    assert code == 1 and "seq 2" in err and "rule 4" in err


def test_missing_ledger_and_bad_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = tally("--db", str(tmp_path / "none.db"), "log")
    assert code == 2 and "tally init" in err and not (tmp_path / "none.db").exists()
    code, _, err = tally("--db", "mysql://x@y/z", "log")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_unreachable_postgres_is_exit_3(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _, err = tally("--db", f"postgresql://nobody@127.0.0.1:{port}/none", "log")
    assert code == 3 and "did not answer" in err and "Traceback" not in err


def test_real_process_no_traceback(workdir: Path) -> None:
    tally_bin = Path(sys.executable).with_name("tally")
    proc = subprocess.run([str(tally_bin), "append", "x.y", "--stream", "s", "--payload", '{"x": Infinity}'],
                          capture_output=True, text=True, cwd=workdir, env=dict(os.environ))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "tally: payload.x: Infinity is not allowed"
    version = subprocess.run([str(tally_bin), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("tally ")
