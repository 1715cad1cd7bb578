"""An attacker's inputs to the CLI: one stderr line, the right exit code, nothing appended, nothing written astray.

Each test names one finding of "Sign only what you verified; bound everything you read":
key files (``keys new``, key modes, the last root key), deep JSON and TOML, huge numbers,
permanent database faults (exit 2, never 3 "retry"), read-only ledgers, ``--out``
through symlinks, and ``window run`` on an unknown window.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.errors import FormatError, PolicyError
from ledger.keys import Signer, key_entry
from ledger.store import Ledger, NewEvent
from tests.report.cases import CASES

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "examples" / "seed000-production-policy.toml"
WINDOW = "pp4-win2-production-policy"
HUGE = "123456789012345678901234567890"  # 30 digits: far past 2^63-1


def tally(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


def one_line(err: str) -> str:
    """The single stderr line (asserting there is exactly one and no traceback)."""
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.endswith("\n"), repr(err)
    return err.strip()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = tally("init", "--origin", "tally.test/robust")
    assert code == 0, err
    return tmp_path


@pytest.fixture
def window(workdir: Path) -> str:
    """The example plan registered in the workdir ledger."""
    code, _, err = tally("window", "register", str(PLAN))
    assert code == 0, err
    return WINDOW


def size(workdir: Path) -> int:
    book = Ledger.open(str(workdir / "tally.db"))
    try:
        return book.size()
    finally:
        book.close()


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ---------------------------------------------------------------------------- keys


@pytest.mark.parametrize("existing", ["public", "private"])
def test_keys_new_refuses_an_existing_public_key(workdir: Path, existing: str) -> None:
    keys = workdir / "keys"
    keys.mkdir()
    taken = keys / ("k.pem.pub" if existing == "public" else "k.pem")
    taken.write_bytes(b"stale key from another life\n")
    code, out, err = tally("keys", "new", "k", "--out", str(keys / "k.pem"))
    assert code == 2 and out == ""
    assert f"{taken} exists" in one_line(err)
    assert listing(keys) == [taken.name]  # nothing written beside it
    assert taken.read_bytes() == b"stale key from another life\n"


@pytest.mark.parametrize("which", ["private", "public"])
@pytest.mark.parametrize("dangling", [True, False])
def test_keys_new_refuses_a_dangling_symlink(workdir: Path, which: str, dangling: bool) -> None:
    keys = workdir / "keys"
    keys.mkdir()
    elsewhere = workdir / "elsewhere"
    if not dangling:
        elsewhere.write_bytes(b"precious")
    link = keys / ("k.pem" if which == "private" else "k.pem.pub")
    link.symlink_to(elsewhere)
    code, out, err = tally("keys", "new", "k", "--out", str(keys / "k.pem"))
    assert code == 2 and out == ""
    assert "symbolic link" in one_line(err)
    assert listing(keys) == [link.name] and link.is_symlink()
    if dangling:
        assert not elsewhere.exists()  # the key was not written through the link
    else:
        assert elsewhere.read_bytes() == b"precious"


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``fill(directory, after=N)``: os.write to files in ``directory`` fails with ENOSPC after N writes."""
    real_write = os.write

    def fill(directory: Path, after: int = 0) -> None:
        budget = [after]
        root = str(directory.resolve())

        def write(fd: int, data: Any) -> int:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.startswith(root + os.sep):
                if budget[0] <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                budget[0] -= 1
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to tell which file a write goes to")
    return fill


@pytest.mark.parametrize("after", [0, 1], ids=["private-key-write", "public-key-write"])
def test_keys_new_leaves_no_partial_file_on_enospc(workdir: Path, full_disk: Any, after: int) -> None:
    keys = workdir / "keys"
    keys.mkdir()
    full_disk(keys, after=after)
    code, out, err = tally("keys", "new", "k", "--out", str(keys / "k.pem"))
    assert code == 2 and out == ""
    assert "No space left on device" in one_line(err)
    assert listing(keys) == []  # no key, no .pub, no 0-byte file, no temporary file


def test_keys_new_is_all_or_nothing_when_the_second_name_fails(workdir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    keys = workdir / "keys"
    keys.mkdir()
    real_link = os.link

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(dst).endswith(".pub"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", link)
    code, _, err = tally("keys", "new", "k", "--out", str(keys / "k.pem"))
    assert code == 2 and "Read-only file system" in one_line(err)
    assert listing(keys) == []  # the private key that was already in place is gone again


def test_keys_new_writes_both_files_whole(workdir: Path) -> None:
    code, out, err = tally("keys", "new", "k", "--out", str(workdir / "keys" / "k.pem"), "--json")
    assert code == 0, err
    made = json.loads(out)
    assert listing(workdir / "keys") == ["k.pem", "k.pem.pub"]
    assert stat.S_IMODE((workdir / "keys" / "k.pem").stat().st_mode) == 0o600
    assert b"PUBLIC KEY" in Path(made["public_key_path"]).read_bytes()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_key_file_with_open_mode_is_refused(workdir: Path, mode: int) -> None:
    key = workdir / ".tally" / "root.pem"
    key.chmod(mode)
    before = size(workdir)
    code, out, err = tally("append", "note.added", "--stream", "s", "--payload", "{}")
    assert code == 2 and out == ""
    line = one_line(err)
    assert f"mode {mode:04o}" in line and f"chmod 600 {key}" in line
    assert size(workdir) == before
    key.chmod(0o400)  # owner-only modes are fine
    code, _, err = tally("append", "note.added", "--stream", "s", "--payload", "{}")
    assert code == 0, err


def test_last_root_key_cannot_be_revoked(workdir: Path) -> None:
    before = size(workdir)
    code, out, err = tally("keys", "revoke", "root", "--reason", "oops")
    assert code == 1 and out == ""
    assert "last active root key" in one_line(err)
    assert size(workdir) == before
    # A second root key first; then the first one may go, and the second is the last.
    assert tally("keys", "new", "root-2", "--out", "root-2.pem")[0] == 0
    code, _, err = tally("keys", "add", "root-2.pem.pub", "--name", "root-2", "--role", "root")
    assert code == 0, err
    code, _, err = tally("keys", "revoke", "root", "--reason", "rotated")
    assert code == 0, err
    code, _, err = tally("--key", "root-2.pem", "keys", "revoke", "root-2", "--reason", "oops")
    assert code == 1 and "last active root key" in one_line(err)
    # A signer key is not a root key: revoking it is fine while a root remains.
    assert tally("keys", "new", "s1", "--out", "s1.pem")[0] == 0
    assert tally("--key", "root-2.pem", "keys", "add", "s1.pem.pub", "--name", "s1", "--role", "signer")[0] == 0
    code, _, err = tally("--key", "root-2.pem", "keys", "revoke", "s1", "--reason", "done")
    assert code == 0, err


def test_last_root_key_check_counts_the_batch(ledger: Ledger, root: Signer) -> None:
    new_root = Signer.generate("root-2")
    # Rotation in one append: add the new root, then revoke the old one.
    ledger.append_many([NewEvent("ledger", "key.added", key_entry(new_root.public_raw, "root-2", ["root"])),
                        NewEvent("ledger", "key.revoked", {"id": root.id, "reason": "rotated"})], root)
    other = Signer.generate("root-3")
    ledger.append("ledger", "key.added", key_entry(other.public_raw, "root-3", ["root"]), new_root)
    size = ledger.size()
    with pytest.raises(PolicyError, match="last active root key"):
        ledger.append_many([NewEvent("ledger", "key.revoked", {"id": other.id, "reason": "a"}),
                            NewEvent("ledger", "key.revoked", {"id": new_root.id, "reason": "b"})], new_root)
    assert ledger.size() == size


# ---------------------------------------------------------------------------- deep documents

DEEP_ARRAY = "[" * 1000 + "]" * 1000
DEEP_OBJECT = '{"a":' * 1000 + "0" + "}" * 1000


def _deep_family_plan(workdir: Path, line: str) -> Path:
    """A copy of the example plan whose first family file holds ``line`` (sha256 updated)."""
    import hashlib

    target = workdir / "plan"
    shutil.copytree(PLAN.parent / "families", target / "families")
    data = (line + "\n").encode()
    (target / "families" / "opinions.jsonl").write_bytes(data)
    text = PLAN.read_text().replace("b40dec6e9e19fa6010b8414227551de23877c73c75528673e0b5da06b95dfd99",
                                    hashlib.sha256(data).hexdigest())
    (target / "plan.toml").write_text(text)
    return target / "plan.toml"


def _deep_args(workdir: Path, case: str, document: str) -> list[str]:
    deep = workdir / "deep.json"
    deep.write_text(document)
    if case == "append-inline":
        return ["append", "note.added", "--stream", "s", "--payload", document]
    if case == "append-file":
        return ["append", "note.added", "--stream", "s", "--payload", f"@{deep}"]
    if case == "receipt-envelope":
        (workdir / "deep.tlog-proof").write_text("c2sp.org/tlog-proof@v1\nindex 0\n\n")
        vkey = tally("keys", "vkey")[1].strip()
        return ["receipt", "verify", str(deep), "--vkey", vkey]
    if case == "receipt-event":
        envelope = workdir / "r.dsse.json"
        envelope.write_text('{"payload": "", "payloadType": "x", "signatures": []}')
        (workdir / "r.tlog-proof").write_text("c2sp.org/tlog-proof@v1\nindex 0\n\n")
        vkey = tally("keys", "vkey")[1].strip()
        return ["receipt", "verify", str(envelope), "--vkey", vkey, "--event", str(deep)]
    if case == "verdict-compute":
        return ["verdict", "compute", str(deep)]
    if case == "verdict-report":
        return ["verdict", "report", str(deep), "--out", str(workdir / "report")]
    if case == "standard-spec":
        assert tally("window", "register", str(PLAN))[0] == 0
        return ["gate", "standard-spec", WINDOW, "--start", "s1", "--config", f"@{deep}"]
    if case == "family-file":
        return ["window", "register", str(_deep_family_plan(workdir, document))]
    if case in ("rng-receipt", "admission", "admission-dsse-payload"):
        import base64

        assert tally("window", "register", str(PLAN))[0] == 0
        fine = workdir / "fine.json"
        fine.write_text("{}")
        if case == "admission-dsse-payload":
            deep.write_text(json.dumps({"payloadType": "application/vnd.in-toto+json",
                                        "payload": base64.b64encode(document.encode()).decode(), "signatures": []}))
        if case == "rng-receipt":
            return ["gate", "rng", WINDOW, "--receipt", str(deep), "--admission", str(fine)]
        return ["gate", "qualification", WINDOW, "--repo", str(workdir), "--qualified-commit", "0" * 40,
                "--admission", str(deep)]
    raise AssertionError(case)


DEEP_JSON_CASES = ["append-inline", "append-file", "receipt-envelope", "receipt-event", "verdict-compute",
                   "verdict-report", "standard-spec", "family-file", "rng-receipt", "admission",
                   "admission-dsse-payload"]


@pytest.mark.parametrize("document", [DEEP_ARRAY, DEEP_OBJECT], ids=["arrays", "objects"])
@pytest.mark.parametrize("case", DEEP_JSON_CASES)
def test_deep_json_is_one_line(workdir: Path, case: str, document: str) -> None:
    args = _deep_args(workdir, case, document)
    before = size(workdir)
    code, out, err = tally(*args)
    assert code == 2 and out == "", err
    assert "nests 1000 levels deep" in one_line(err)
    assert size(workdir) == before
    assert not (workdir / "report").exists()


def test_non_utf8_payload_file_is_one_line(workdir: Path) -> None:
    (workdir / "p.json").write_bytes(b'{"text": "\xff\xfe"}')
    before = size(workdir)
    code, _, err = tally("append", "note.added", "--stream", "s", "--payload", "@p.json")
    assert code == 2 and "not UTF-8" in one_line(err)
    assert size(workdir) == before


DEEP_TOML = {
    "arrays": "a = " + "[" * 500 + "]" * 500 + "\n",
    "inline-tables": "a = " + "{ a = " * 500 + "1" + " }" * 500 + "\n",
    "dotted-header": "[" + ".".join(["a"] * 500) + "]\nb = 1\n",
    "just-over-the-bound": "a = " + "[" * 65 + "]" * 65 + "\n",  # parses; refused by the depth bound
}


@pytest.mark.parametrize("document", list(DEEP_TOML.values()), ids=list(DEEP_TOML))
@pytest.mark.parametrize("target", ["plan", "site", "sim-config"])
def test_deep_toml_is_one_line(workdir: Path, window: str, monkeypatch: pytest.MonkeyPatch,
                               target: str, document: str) -> None:
    deep = workdir / "deep.toml"
    deep.write_text(document)
    if target == "plan":
        args = ["window", "register", str(deep)]
    elif target == "site":
        args = ["window", "run", window, "--site", str(deep), "--dry-run"]
    else:
        import runner.sim

        def no_serve(*_args: Any, **_kwargs: Any) -> None:
            raise AssertionError("a deep config must be refused before serving")

        monkeypatch.setattr(runner.sim, "serve", no_serve)
        args = ["sim", "serve", "--config", str(deep)]
    before = size(workdir)
    code, out, err = tally(*args)
    assert code == 2 and out == "", err
    assert "nests deeper than 64 levels" in one_line(err)
    assert size(workdir) == before


def test_deep_json_sim_config_is_one_line(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import runner.sim

    monkeypatch.setattr(runner.sim, "serve", lambda *a, **k: None)
    (workdir / "deep.json").write_text(DEEP_ARRAY)
    code, _, err = tally("sim", "serve", "--config", str(workdir / "deep.json"))
    assert code == 2 and "nests 1000 levels deep" in one_line(err)


# ---------------------------------------------------------------------------- huge numbers


@pytest.mark.parametrize("args", [
    ["show", HUGE],
    ["log", "--since", HUGE],
    ["prove", "inclusion", HUGE],
    ["prove", "inclusion", "1", "--size", HUGE],
    ["prove", "consistency", "1", HUGE],
    ["prove", "consistency", HUGE, HUGE],
    ["receipt", "export", HUGE, "--out", "r"],
    ["checkpoint", "show", "--size", HUGE],
    ["show", str(2**63)],
    ["show", "0"],
], ids=lambda a: " ".join(a).replace(HUGE, "HUGE"))
def test_huge_seq_is_one_line(workdir: Path, args: list[str]) -> None:
    before = size(workdir)
    code, out, err = tally(*args)
    assert code == 2 and out == ""
    assert "out of range" in one_line(err)
    assert size(workdir) == before
    assert not (workdir / "r").exists()


def test_huge_seq_is_refused_by_the_store_too(ledger: Ledger) -> None:
    for call in (lambda: ledger.get(10**30), lambda: list(ledger.events(10**30)),
                 lambda: list(ledger.events(0, until=10**30))):
        with pytest.raises(FormatError, match="out of range"):
            call()


# ---------------------------------------------------------------------------- database faults


def _fault(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "directory":
        (tmp_path / "a-dir").mkdir()
        return str(tmp_path / "a-dir")
    if kind == "text-file":
        (tmp_path / "notes.txt").write_text("not a database\n" * 10)
        return str(tmp_path / "notes.txt")
    if kind == "read-only":
        ledger = tmp_path / "ro.db"
        book = Ledger(str(ledger))
        book.init("tally.test/ro", Signer.generate("root"))
        book.close()
        ledger.chmod(0o444)
        return str(ledger)
    if kind == "missing-postgres-database":
        cluster = request.getfixturevalue("pg_cluster")
        return str(cluster.dsn("no_such_database_here"))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["directory", "text-file", "read-only", "missing-postgres-database"])
@pytest.mark.parametrize("command", ["append", "log", "init"])
def test_permanent_database_faults_are_not_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 request: pytest.FixtureRequest, kind: str, command: str) -> None:
    monkeypatch.chdir(tmp_path)
    db = _fault(kind, tmp_path, request)
    key = tmp_path / "k.pem"
    assert tally("keys", "new", "k", "--out", str(key))[0] == 0
    args = {"append": ["append", "note.added", "--stream", "s", "--payload", "{}"], "log": ["log"],
            "init": ["init", "--origin", "tally.test/fault"]}[command]
    code, _out, err = tally("--db", db, "--key", str(key), *args)
    if kind == "read-only" and command == "log":
        assert code == 0, err  # reading a read-only ledger works
        return
    expected = 1 if kind == "read-only" and command == "init" else 2  # a read-only ledger already holds one
    assert code in (expected, 2), err
    assert code != 3
    one_line(err)
    if kind == "read-only":
        assert "read-only" in err or "already holds a ledger" in err
    if kind == "missing-postgres-database":
        assert "does not exist" in err


def test_init_refuses_a_foreign_events_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "foreign.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE events (x INTEGER)")
        conn.execute("INSERT INTO events VALUES (42)")
    code, out, err = tally("--db", str(db), "init", "--origin", "tally.test/foreign")
    assert code == 1 and out == ""
    assert "events that tally did not create" in one_line(err)
    assert not (tmp_path / ".tally").exists()  # no key was created
    with sqlite3.connect(db) as conn:
        tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        assert tables == ["events"] and conn.execute("SELECT x FROM events").fetchall() == [(42,)]


def test_init_refuses_a_foreign_events_table_postgres(pg_url: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    monkeypatch.chdir(tmp_path)
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE events (x integer)")
        conn.execute("INSERT INTO events VALUES (42)")
    code, out, err = tally("--db", pg_url, "init", "--origin", "tally.test/foreign")
    assert code == 1 and out == ""
    assert "events that tally did not create" in one_line(err)
    assert not (tmp_path / ".tally").exists()
    with psycopg.connect(dsn) as conn:
        tables = sorted(r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall())
        assert tables == ["events"]
        assert conn.execute("SELECT x FROM events").fetchall() == [(42,)]


def test_read_only_ledger_verifies(workdir: Path) -> None:
    for i in range(3):
        assert tally("append", "note.added", "--stream", "s", "--payload", json.dumps({"i": i}))[0] == 0
    assert tally("checkpoint")[0] == 0
    with sqlite3.connect(workdir / "tally.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    media = workdir / "media"
    media.mkdir()
    shutil.copy(workdir / "tally.db", media / "tally.db")
    (media / "tally.db").chmod(0o444)
    media.chmod(0o555)
    try:
        data = (media / "tally.db").read_bytes()
        db = str(media / "tally.db")
        code, out, err = tally("--db", db, "verify", "--json")
        assert code == 0, err
        report = json.loads(out)
        assert report["ok"] is True and report["size"] == 4 and len(report["checkpoints"]) == 1
        assert tally("--db", db, "show", "4")[0] == 0
        assert tally("--db", db, "prove", "inclusion", "2")[0] == 0  # against the stored checkpoint
        key = str(workdir / ".tally" / "root.pem")
        code, _, err = tally("--db", db, "--key", key, "append", "note.added", "--stream", "s", "--payload", "{}")
        assert code == 2 and "read-only" in one_line(err)
        code, _, err = tally("--db", db, "--key", key, "checkpoint")
        assert code == 2 and "read-only" in one_line(err)
        # Nothing was written: no -wal/-shm beside it (as root, SQLite would happily create them), same bytes.
        assert listing(media) == ["tally.db"]
        assert (media / "tally.db").read_bytes() == data
        book = Ledger.open(db)
        assert book.read_only and book.size() == 4
        book.close()
    finally:
        media.chmod(0o755)


# ---------------------------------------------------------------------------- --out and symlinks


def _decided_window(workdir: Path) -> None:
    """Register the example plan and record a decision for it (what window report reads)."""
    from ledger.keys import load_signer
    from runner.decide import compute

    assert tally("window", "register", str(PLAN))[0] == 0
    data = CASES["pp3_reject"][0]()
    book = Ledger.open(str(workdir / "tally.db"))
    from runner.plan import registered_plan

    reg = registered_plan(book, WINDOW)
    book.append(f"window/{WINDOW}", "decision.recorded",
                {"window": WINDOW, "plan_sha256": reg.plan_sha256, "rule": data["rule"],
                 "params": data.get("params", {}), "input": data, "result": compute(data), "inputs_digest": "0" * 64},
                load_signer(workdir / ".tally" / "root.pem"))
    book.close()


def _out_case(workdir: Path, case: str) -> tuple[list[str], Path, str]:
    """(args, the --out path, the name inside it that matters) for each writer with an --out."""
    out = workdir / "out"
    if case == "receipt-export":
        assert tally("window", "register", str(PLAN))[0] == 0
        _code, stdout, _ = tally("gate", "budget", WINDOW, "--json")  # a FAIL is a receipt too
        seq = json.loads(stdout)["seq"]
        return ["receipt", "export", str(seq), "--out", str(out)], out, f"{seq}.dsse.json"
    if case == "blob-get":
        assert tally("window", "register", str(PLAN))[0] == 0
        book = Ledger.open(str(workdir / "tally.db"))
        digest = sorted(book.blob_digests())[0]
        book.close()
        return ["blob", "get", digest, "--out", str(out)], out, ""
    if case == "verdict-report":
        source = workdir / "input.json"
        source.write_text(json.dumps(CASES["pp3_reject"][0]()))
        return ["verdict", "report", str(source), "--out", str(out)], out, "report.html"
    if case == "window-report":
        _decided_window(workdir)
        return ["window", "report", WINDOW, "--out", str(out)], out, "report.md"
    if case == "rehearse":
        return ["rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", str(out)], out, "responses.jsonl"
    if case == "sim-families":
        return ["sim", "families", str(out)], out, "opinions.jsonl"
    raise AssertionError(case)


OUT_CASES = ["receipt-export", "blob-get", "verdict-report", "window-report", "rehearse", "sim-families"]


@pytest.mark.parametrize("planted", ["out-is-a-symlink", "file-is-a-symlink", "file-is-a-dangling-symlink"])
@pytest.mark.parametrize("case", OUT_CASES)
def test_out_never_follows_a_symlink(workdir: Path, case: str, planted: str) -> None:
    args, out, name = _out_case(workdir, case)
    victim_dir = workdir / "victim"
    victim_dir.mkdir()
    victim = victim_dir / "precious"
    victim.write_bytes(b"precious")
    victim.chmod(0o640)
    if planted == "out-is-a-symlink":
        out.symlink_to(victim if case == "blob-get" else victim_dir)
    elif case == "blob-get":
        out.symlink_to(victim if planted == "file-is-a-symlink" else victim_dir / "missing")
    else:
        out.mkdir()
        (out / name).symlink_to(victim if planted == "file-is-a-symlink" else victim_dir / "missing")
    before = size(workdir)
    code, stdout, err = tally(*args)
    assert code == 2 and stdout == "", err
    assert "symbolic link" in one_line(err)
    assert size(workdir) == before
    assert listing(victim_dir) == ["precious"]  # nothing created through a dangling link
    assert victim.read_bytes() == b"precious" and stat.S_IMODE(victim.stat().st_mode) == 0o640


@pytest.mark.parametrize("case", [c for c in OUT_CASES if c not in ("rehearse", "blob-get")])
def test_out_writes_whole_files_and_replaces_planted_regular_files(workdir: Path, case: str) -> None:
    args, out, name = _out_case(workdir, case)
    out.mkdir()
    (out / name).write_text("old")
    code, _, err = tally(*args)
    assert code == 0, err
    assert (out / name).read_text() != "old"
    assert not [p for p in out.rglob("*.tmp")]  # no temporary file left


def test_receipt_export_to_a_file_is_one_line(workdir: Path) -> None:
    args, out, _ = _out_case(workdir, "receipt-export")
    out.write_text("a file, not a directory")
    code, _, err = tally(*args)
    assert code == 2 and "not a directory" in one_line(err)
    assert out.read_text() == "a file, not a directory"


def test_receipt_export_on_enospc_leaves_nothing(workdir: Path, full_disk: Any) -> None:
    args, out, _ = _out_case(workdir, "receipt-export")
    out.mkdir()
    full_disk(out, after=1)  # the envelope is written, the proof is not
    code, _, err = tally(*args)
    assert code == 2 and "No space left on device" in one_line(err)
    assert all(not p.name.endswith(".tmp") for p in out.iterdir())
    assert all(p.stat().st_size > 0 for p in out.iterdir())  # whole files or none, never a 0-byte one


def test_blob_get_refuses_a_directory_as_out(workdir: Path) -> None:
    args, out, _ = _out_case(workdir, "blob-get")
    out.mkdir()
    code, _, err = tally(*args)
    assert code == 2 and "is a directory" in one_line(err)


# ---------------------------------------------------------------------------- window run


@pytest.fixture
def listening() -> Iterator[tuple[int, list[Any]]]:
    """A TCP port that records every connection made to it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    seen: list[Any] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            seen.append(conn)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1], seen
    stop.set()
    thread.join()
    sock.close()


@pytest.mark.parametrize("args", [["run", "--dry-run"], ["run", "--execute"], ["resume"], ["abort"]],
                         ids=lambda a: " ".join(a))
def test_window_run_unknown_window_touches_no_site(window: str, workdir: Path,
                                                   listening: tuple[int, list[Any]], args: list[str]) -> None:
    port, seen = listening
    site = workdir / "site.toml"
    site.write_text(f'kind = "sim"\nurl = "http://127.0.0.1:{port}"\n')
    before = size(workdir)
    verb, *flags = args
    code, out, err = tally("window", verb, "no-such-window", "--site", str(site), *flags)
    assert code == 2 and out == ""
    assert "window no-such-window is not registered" in one_line(err)
    assert seen == []  # the site was never contacted
    assert size(workdir) == before
    # Not even read: a site file that does not exist is not what is reported.
    code, _, err = tally("window", verb, "no-such-window", "--site", str(workdir / "nowhere.toml"), *flags)
    assert code == 2 and "is not registered" in one_line(err)
