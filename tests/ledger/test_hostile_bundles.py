"""Hostile bundles (docs/format.md, export bundles): each attack refused with one line, none hangs or crashes.

Every fixture is named after its attack and is built from a clean export in
``tmp_path``. ``tally audit`` answers each with exactly one line on stderr and exit 1
(the check failed) or 2 (bad input); ``tally export`` refuses unsafe targets, unknown
streams and blob names that would be paths, and leaves nothing behind when writing fails.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import store
from ledger.bundle import MAX_EVENT_LINE_BYTES, export_bundle, verify_bundle
from ledger.canonical import MAX_DEPTH as PAYLOAD_MAX_DEPTH
from ledger.errors import FormatError, PayloadError, TallyError, VerificationError
from ledger.keys import Signer, key_entry
from ledger.signing import sign_checkpoint
from ledger.store import Blob, Ledger, NewEvent

from .helpers import sql

runner = CliRunner()
TALLY = str(Path(sys.executable).with_name("tally"))


@pytest.fixture
def book(ledger: Ledger, root: Signer) -> Ledger:
    op = Signer.generate("op")
    ledger.append("ledger", "key.added", key_entry(op.public_raw, "op", ["signer"]), root)
    records = Blob(b'{"request": 1}\n', "application/x-ndjson")
    ledger.append_many([NewEvent("runs/w1" if i % 2 else "notes", "note.added", {"i": i}) for i in range(6)], op)
    ledger.append("runs/w1", "gate.result", {"gate": "rng", "verdict": "PASS"}, op)
    ledger.append("runs/w1", "evidence.attached", {"records": records.ref()}, op, blobs=[records])
    ledger.append("notes", "note.added", {"j": 1}, op)
    return ledger


@pytest.fixture
def clean(book: Ledger, root: Signer, tmp_path: Path) -> Path:
    export_bundle(book, tmp_path / "clean", signer=root)
    return tmp_path / "clean"


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts a blocked open() or read()."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def lines_of(bundle: Path) -> list[bytes]:
    return (bundle / "events.jsonl").read_bytes().split(b"\n")[:-1]


def write_lines(bundle: Path, lines: list[bytes]) -> None:
    (bundle / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))


def line_number(bundle: Path, needle: bytes) -> int:
    """The 1-based number of the first events.jsonl line containing ``needle``."""
    return next(n for n, line in enumerate(lines_of(bundle), 1) if needle in line)


def edit_line(bundle: Path, needle: bytes, edit: Callable[[bytes], bytes]) -> int:
    lines = lines_of(bundle)
    number = line_number(bundle, needle)
    lines[number - 1] = edit(lines[number - 1])
    write_lines(bundle, lines)
    return number


def edit_manifest(bundle: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    edit(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def relist(bundle: Path, name: str) -> None:
    """Put the digest of ``name`` in the manifest, as an attacker who edits a file would."""
    digest = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    edit_manifest(bundle, lambda m: m["files"].__setitem__(name, digest))


def fails(bundle: Path, root: Signer) -> VerificationError:
    with pytest.raises(VerificationError) as info, within(20):
        verify_bundle(bundle, root_key=root.id)
    return info.value


def audit_cli(bundle: Path, *extra: str) -> tuple[int, str, str]:
    with within(30):
        result = runner.invoke(app, ["audit", str(bundle), *extra])
    return result.exit_code, result.stdout, result.stderr


def one_line(stderr: str) -> str:
    """The single stderr line of a refusal (no traceback, nothing more)."""
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert "Traceback" not in stderr
    return stderr.strip()


# ---------------------------------------------------------------------------
# Attacks on events.jsonl: each line must be the canonical bytes of its event.


def duplicate_verdict(bundle: Path) -> int:
    """A reader keeping the first of two members sees FAIL; the hash covers PASS."""
    return edit_line(bundle, b'"verdict":"PASS"', lambda line: line.replace(b'"verdict":"PASS"',
                                                                            b'"verdict":"FAIL","verdict":"PASS"'))


def test_audit_refuses_duplicate_members(clean: Path, root: Signer) -> None:
    original = lines_of(clean)[line_number(clean, b'"verdict":"PASS"') - 1]
    number = duplicate_verdict(clean)
    tampered = lines_of(clean)[number - 1]
    assert json.loads(tampered) == json.loads(original)  # a last-member-wins reader sees the hashed event
    error = fails(clean, root)
    assert error.rule == "bundle" and f"events.jsonl line {number}" in str(error) and "twice" in str(error)


NON_CANONICAL: dict[str, tuple[bytes, Callable[[bytes], bytes]]] = {
    "whitespace": (b'"i":2}', lambda line: line.replace(b'{"actor":', b'{ "actor": ')),
    "1.0": (b'"i":1}', lambda line: line.replace(b'"i":1}', b'"i":1.0}')),
    "-0": (b'"i":0}', lambda line: line.replace(b'"i":0}', b'"i":-0}')),
    "escaped key": (b'"i":3}', lambda line: line.replace(b'"actor":', b'"\\u0061ctor":')),
    "CRLF": (b'"i":4}', lambda line: line + b"\r"),
}


@pytest.mark.parametrize("attack", sorted(NON_CANONICAL))
def test_audit_refuses_non_canonical_lines(attack: str, clean: Path, root: Signer) -> None:
    needle, edit = NON_CANONICAL[attack]
    number = line_number(clean, needle)
    original = lines_of(clean)[number - 1]
    edit_line(clean, needle, edit)
    tampered = lines_of(clean)[number - 1]
    assert tampered != original and json.loads(tampered) == json.loads(original)  # the same event, other bytes
    error = fails(clean, root)
    assert error.rule == "bundle" and error.seq == json.loads(original)["seq"]
    assert f"events.jsonl line {number} is not the canonical form" in str(error)


def deep_nesting(bundle: Path) -> int:
    depth = 100_000
    return edit_line(bundle, b'"i":5}', lambda line: line.replace(b'"i":5}', b'"i":' + b"[" * depth + b"]" * depth
                                                                   + b"}"))


def test_audit_refuses_deep_nesting(clean: Path, root: Signer) -> None:
    number = deep_nesting(clean)
    with pytest.raises(TallyError) as info, within(20):
        verify_bundle(clean, root_key=root.id)
    assert isinstance(info.value, VerificationError | FormatError)
    assert f"events.jsonl line {number}" in str(info.value) and "levels deep" in str(info.value)
    code, stdout, stderr = audit_cli(clean)
    assert code in (1, 2) and stdout == ""
    assert f"events.jsonl line {number}" in one_line(stderr)


def overlong_line(bundle: Path) -> int:
    padding = b" " * MAX_EVENT_LINE_BYTES
    return edit_line(bundle, b'"i":2}', lambda line: line[:-1] + padding + b"}")


def test_audit_refuses_an_overlong_line(clean: Path, root: Signer) -> None:
    number = overlong_line(clean)
    error = fails(clean, root)
    assert error.rule == "bundle" and f"events.jsonl line {number} is longer than {MAX_EVENT_LINE_BYTES}" in str(error)


def replayed_line(bundle: Path) -> int:
    lines = lines_of(bundle)
    lines.insert(5, lines[4])  # line 6 repeats seq 5
    write_lines(bundle, lines)
    return 6


def test_replayed_line_is_blamed_on_its_own_line(clean: Path, book: Ledger, root: Signer, tmp_path: Path) -> None:
    assert replayed_line(clean) == 6
    error = fails(clean, root)
    assert (error.seq, error.rule) == (5, 1) and "events.jsonl line 6 repeats seq 5 of line 5" in str(error)

    again = tmp_path / "again"
    export_bundle(book, again, signer=root)
    lines = lines_of(again)
    write_lines(again, [*lines, lines[2]])  # seq 3 replayed at the end
    error = fails(again, root)
    assert (error.seq, error.rule) == (3, 1) and f"line {len(lines) + 1} repeats seq 3 of line 3" in str(error)

    partial = tmp_path / "partial"
    export_bundle(book, partial, stream="runs/w1", signer=root)
    lines = lines_of(partial)
    replayed = json.loads(lines[3])["seq"]
    write_lines(partial, [*lines[:4], lines[3], *lines[4:]])
    error = fails(partial, root)
    assert (error.seq, error.rule) == (replayed, "bundle") and f"line 5 repeats seq {replayed} of line 4" in str(error)


# ---------------------------------------------------------------------------
# Attacks on the files: regular files only, bounded.


def symlinked_blob(bundle: Path) -> int:
    (blob,) = (bundle / "blobs").iterdir()
    blob.unlink()
    blob.symlink_to("/dev/zero")
    return 0


def fifo_checkpoint(bundle: Path) -> int:
    (bundle / "checkpoint.txt").unlink()
    os.mkfifo(bundle / "checkpoint.txt")
    return 0


def test_audit_refuses_a_symlinked_blob(clean: Path, root: Signer, tmp_path: Path) -> None:
    (blob,) = (clean / "blobs").iterdir()
    good = tmp_path / "copy"
    shutil.copy(blob, good)
    symlinked_blob(clean)
    error = fails(clean, root)
    assert error.rule == "blob" and f"blobs/{blob.name} is a symbolic link" in str(error)
    blob.unlink()
    blob.symlink_to(good)  # even to the right bytes: a bundle holds regular files only
    error = fails(clean, root)
    assert error.rule == "blob" and "symbolic link" in str(error)


def test_audit_refuses_a_fifo_checkpoint(clean: Path, root: Signer) -> None:
    fifo_checkpoint(clean)
    error = fails(clean, root)  # within 20 s: opening a FIFO must not wait for a writer
    assert error.rule == "bundle" and "checkpoint.txt is a FIFO, not a regular file" in str(error)


HOSTILE_FILES: dict[str, tuple[Callable[[Path], object], str, str]] = {
    "directory as checkpoint": (lambda b: ((b / "checkpoint.txt").unlink(), (b / "checkpoint.txt").mkdir()),
                                "bundle", "checkpoint.txt is a directory"),
    "symlinked events": (lambda b: ((b / "events.jsonl").rename(b.parent / "ev"),
                                    (b / "events.jsonl").symlink_to(b.parent / "ev")),
                         "bundle", "events.jsonl is a symbolic link"),
    "symlinked blobs directory": (lambda b: ((b / "blobs").rename(b.parent / "bl"),
                                             (b / "blobs").symlink_to(b.parent / "bl")),
                                  "bundle", "blobs is a symbolic link"),
    "huge manifest": (lambda b: (b / "manifest.json").write_bytes(b" " * (1 << 20) + b"{}"),
                      "bundle", "manifest.json is 1048578 bytes, over the 1048576-byte limit"),
    "blob not named by a digest": (lambda b: (b / "blobs" / "README").write_text("hi"),
                                   "blob", "blobs/'README' is not named by a SHA-256 digest"),
    "unreferenced blob": (lambda b: (b / "blobs" / hashlib.sha256(b"x").hexdigest()).write_bytes(b"x"),
                          "blob", "is not referenced by any event"),
    "blob bigger than declared": (lambda b: next((b / "blobs").iterdir()).write_bytes(b'{"request": 1}\n' * 1000),
                                  "blob", "over the 15-byte size its reference declares"),
    "truncated last line": (lambda b: (b / "events.jsonl").write_bytes((b / "events.jsonl").read_bytes()[:-1]),
                            "bundle", "does not end with a newline"),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE_FILES))
def test_audit_refuses_hostile_files(attack: str, clean: Path, root: Signer) -> None:
    plant, rule, message = HOSTILE_FILES[attack]
    plant(clean)
    error = fails(clean, root)
    assert error.rule == rule and message in str(error)


# ---------------------------------------------------------------------------
# The manifest says what the bundle holds.


def forged_origin(bundle: Path) -> int:
    edit_manifest(bundle, lambda m: m.__setitem__("origin", "evil.example/ledger"))
    return 0


MANIFEST_LIES: dict[str, tuple[Callable[[Path], object], str]] = {
    "origin": (forged_origin, 'says origin "evil.example/ledger", the bundle holds "tally.test/ledger"'),
    "ledger id": (lambda b: edit_manifest(b, lambda m: m.__setitem__("ledger", "0" * 32)), "says ledger"),
    "events": (lambda b: edit_manifest(b, lambda m: m.__setitem__("events", m["events"] + 1)), "says events"),
    "first_seq": (lambda b: edit_manifest(b, lambda m: m.__setitem__("first_seq", 2)), "says first_seq 2"),
    "last_seq": (lambda b: edit_manifest(b, lambda m: m.__setitem__("last_seq", 99)), "says last_seq 99"),
    "checkpoint_size": (lambda b: edit_manifest(b, lambda m: m.__setitem__("checkpoint_size", 3)),
                        "says checkpoint_size 3"),
    "ledger_size": (lambda b: edit_manifest(b, lambda m: m.__setitem__("ledger_size", 99)), "says ledger_size 99"),
    "ledger_head": (lambda b: edit_manifest(b, lambda m: m.__setitem__("ledger_head", "0" * 64)), "says ledger_head"),
    "blobs": (lambda b: edit_manifest(b, lambda m: m.__setitem__("blobs", 0)), "says blobs 0"),
    "partial": (lambda b: edit_manifest(b, lambda m: m.__setitem__("partial", True)), "a partial bundle names"),
    "a count's type": (lambda b: edit_manifest(b, lambda m: m.__setitem__("events", True)),
                       "'events' is not a integer"),
    "a file digest": (lambda b: edit_manifest(b, lambda m: m["files"].__setitem__("checkpoint.txt", "0" * 64)),
                      "checkpoint.txt does not match its digest in manifest.json"),
    "an unlisted file": (lambda b: edit_manifest(b, lambda m: m["files"].pop("events.jsonl")),
                         "events.jsonl is in the bundle but not listed in manifest.json"),
    "a listed, absent file": (lambda b: edit_manifest(b, lambda m: m["files"].__setitem__("notes.txt", "0" * 64)),
                              "manifest.json lists 'notes.txt', which is absent from the bundle"),
    "a stray file": (lambda b: ((b / "notes.txt").write_text("hi"), relist(b, "notes.txt")),
                     "the bundle holds 'notes.txt', which is not a file of a full bundle"),
    "duplicate member": (lambda b: (b / "manifest.json").write_text(
        (b / "manifest.json").read_text().replace('"blobs": 1,', '"blobs": 1, "blobs": 1,')), "twice"),
}


@pytest.mark.parametrize("lie", sorted(MANIFEST_LIES))
def test_audit_checks_the_manifest(lie: str, clean: Path, root: Signer) -> None:
    verify_bundle(clean, root_key=root.id)  # clean: the manifest says what the bundle holds
    plant, message = MANIFEST_LIES[lie]
    plant(clean)
    error = fails(clean, root)
    assert error.rule == "bundle" and message in str(error), str(error)


def test_an_edited_file_relisted_is_still_caught_by_its_content(clean: Path, root: Signer) -> None:
    """The manifest is checked last: an edited event is blamed on its seq and rule, not on a digest."""
    number = line_number(clean, b'"i":2}')
    lines = lines_of(clean)
    lines[number - 1] = lines[number - 1].replace(b'"i":2}', b'"i":7}')
    write_lines(clean, lines)
    error = fails(clean, root)
    assert (error.seq, error.rule) == (json.loads(lines[number - 1])["seq"], 4)


# ---------------------------------------------------------------------------
# Export: blob names are digests, targets are real directories, streams exist, failures leave nothing.


def leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


def plant_reference(book: Ledger, signer: Signer, name: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """A payload reference whose name is a path, and a blob row of that name (SQL).

    Today's append API refuses such a reference; a ledger written before it did (or by a
    writer holding a key and bypassing the API) may still hold one, so the reference check
    is switched off for the planting.
    """
    payload = {"records": {"blob": f"sha256:{name}", "size": 3, "media_type": "text/plain"}}
    with pytest.raises(PayloadError, match="not a blob reference"):
        book.append("runs/w1", "evidence.attached", payload, signer)
    with monkeypatch.context() as patched:
        patched.setattr(store, "blob_references", lambda _payload: {})
        event = book.append("runs/w1", "evidence.attached", payload, signer)
    sql(book, "INSERT INTO blobs (sha256, size, media_type, data) VALUES (:s, 3, 'text/plain', :d)",
        s=name, d=b"pwn")
    return event.seq


@pytest.mark.parametrize("kind", ["relative", "absolute", "uppercase"])
def test_export_blob_name_cannot_escape_the_bundle(kind: str, book: Ledger, root: Signer, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out" / "b"
    out.parent.mkdir()
    escape = {"relative": "../../x", "absolute": str(tmp_path / "abs-escape"), "uppercase": "AB" * 32}[kind]
    seq = plant_reference(book, root, escape, monkeypatch)
    assert book.blob(escape) is not None  # the old export would have written it to blobs/<name>
    with pytest.raises(VerificationError) as info:
        export_bundle(book, out, signer=root)
    assert (info.value.seq, info.value.rule) == (seq, "blob") and "is not a blob reference" in str(info.value)
    assert not out.exists() and leftovers(out.parent, "b") == []
    assert not (out.parent / "x").exists() and not (tmp_path / "x").exists() and not (tmp_path / "abs-escape").exists()
    code, stdout, stderr = export_cli(book, root, tmp_path, str(out))
    assert code == 1 and stdout == "" and "is not a blob reference" in one_line(stderr)
    assert not out.exists() and not (tmp_path / "abs-escape").exists()


def export_cli(book: Ledger, root: Signer, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    key = tmp_path / "root.pem"
    if not key.exists():
        key.write_bytes(root.private_pem())
        key.chmod(0o600)  # an open private key file is refused
    result = runner.invoke(app, ["--db", book.url, "--key", str(key), "export", *args])
    return result.exit_code, result.stdout, result.stderr


def test_export_refuses_a_symlinked_directory(book: Ledger, root: Signer, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(FormatError, match="link is a symbolic link"):
        export_bundle(book, tmp_path / "link", signer=root)  # the target itself
    with pytest.raises(FormatError, match="link is a symbolic link"):
        export_bundle(book, tmp_path / "link" / "b", signer=root)  # its parent
    assert list(real.iterdir()) == [] and leftovers(tmp_path, "link") == []
    for target in ("link", "link/b"):
        code, stdout, stderr = export_cli(book, root, tmp_path, str(tmp_path / target))
        assert code == 2 and stdout == "" and "is a symbolic link" in one_line(stderr)
    assert list(real.iterdir()) == []


def test_export_of_an_unknown_stream_is_refused(book: Ledger, root: Signer, tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="stream 'nosuch' has no events"):
        export_bundle(book, tmp_path / "b", stream="nosuch", signer=root)
    assert not (tmp_path / "b").exists() and leftovers(tmp_path, "b") == []
    code, stdout, stderr = export_cli(book, root, tmp_path, str(tmp_path / "b"), "--stream", "nosuch")
    assert code == 2 and stdout == "" and "has no events" in one_line(stderr)
    assert not (tmp_path / "b").exists()
    assert export_cli(book, root, tmp_path, str(tmp_path / "b"), "--stream", "runs/w1")[0] == 0


def test_export_out_of_space_leaves_no_partial_bundle(book: Ledger, root: Signer, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import ledger.receipt

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ledger.receipt, "write_bundle_proofs", full_disk)  # after events.jsonl and blobs/
    with pytest.raises(FormatError, match="No space left on device; nothing was written"):
        export_bundle(book, tmp_path / "b", signer=root)
    assert not (tmp_path / "b").exists() and leftovers(tmp_path, "b") == []
    code, stdout, stderr = export_cli(book, root, tmp_path, str(tmp_path / "b"))
    assert code == 2 and stdout == "" and "No space left on device" in one_line(stderr)
    (tmp_path / "empty").mkdir()  # an empty directory given as the target stays as it was
    with pytest.raises(FormatError):
        export_bundle(book, tmp_path / "empty", signer=root)
    assert (tmp_path / "empty").is_dir() and list((tmp_path / "empty").iterdir()) == []


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


def test_export_write_error_from_the_kernel_is_one_line(book: Ledger, root: Signer, tmp_path: Path) -> None:
    book.append_many([NewEvent("notes", "note.added", {"pad": "x" * 200, "k": k}) for k in range(20)],
                     root)
    sign_checkpoint(book, root)  # the export then writes nothing to the database
    out = tmp_path / "b"
    proc = subprocess.run([TALLY, "--db", book.url, "export", str(out)], capture_output=True, text=True,
                          preexec_fn=_small_files, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert "File too large" in one_line(proc.stderr) and "nothing was written" in proc.stderr
    assert not out.exists() and leftovers(tmp_path, "b") == []


# ---------------------------------------------------------------------------
# The CLI: one stderr line and the right exit code for every attack.


AUDIT_ATTACKS: dict[str, Callable[[Path], object]] = {
    "duplicate members": duplicate_verdict,
    "non-canonical line": lambda b: edit_line(b, b'"i":1}', lambda line: line.replace(b'"i":1}', b'"i":1.0}')),
    "symlinked blob": symlinked_blob,
    "fifo checkpoint": fifo_checkpoint,
    "deep nesting": deep_nesting,
    "overlong line": overlong_line,
    "forged origin": forged_origin,
    "replayed line": replayed_line,
    "unlisted file": lambda b: edit_manifest(b, lambda m: m["files"].pop("checkpoint.txt")),
    "control characters in a message": lambda b: edit_line(  # a canonical line whose ledger id breaks lines
        b, b'"i":3}', lambda line: line.replace(b'"ledger":"', b'"ledger":"\\n\\u001b[2J\\r')),
}


@pytest.mark.parametrize("attack", sorted(AUDIT_ATTACKS))
def test_cli_audit_answers_each_attack_with_one_line(attack: str, clean: Path) -> None:
    code, stdout, stderr = audit_cli(clean)
    assert (code, stderr) == (0, "") and "OK cryptographic checks" in stdout
    AUDIT_ATTACKS[attack](clean)
    code, stdout, stderr = audit_cli(clean)
    assert code == 1 and stdout == ""
    assert one_line(stderr).startswith("FAIL cryptographic checks:")
    assert stderr[:-1].isprintable()  # no control character reaches the terminal
    code, stdout, _ = audit_cli(clean, "--json")
    assert code == 1 and json.loads(stdout)["first_failure"]["check"] == "crypto"


def test_cli_audit_of_bad_input_is_exit_2(tmp_path: Path, clean: Path, book: Ledger, root: Signer) -> None:
    for target in (tmp_path / "nowhere", clean / "manifest.json"):
        code, stdout, stderr = audit_cli(target)
        assert code == 2 and stdout == "" and "is not a bundle directory" in one_line(stderr)
    code, _, stderr = audit_cli(clean, "--vkey", "not-a-vkey")
    assert code == 2 and one_line(stderr)


def deepest_payload() -> dict[str, Any]:
    """A payload nested as deep as the payload rules allow (the payload object is level 0)."""
    value: Any = []
    for _ in range(PAYLOAD_MAX_DEPTH - 2):
        value = [value]
    return {"deep": value}


def test_valid_but_unusual_lines_are_canonical(book: Ledger, root: Signer, tmp_path: Path) -> None:
    """No false alarm: the canonical check accepts every line the exporter writes, however unusual."""
    book.append("notes", "note.added", {"f": 0.1, "e": 1e-7, "big": 1e21, "neg": -0.0, "int": -(2**53 - 1),
                                        "s": "é\u2028\x7f\x01\"\\/\t", "k\u00e9y": 1, "\U0001f600": [True, None],
                                        "\U0001f600a": {}, "\ue000": "x"}, root)
    book.append("notes", "note.added", deepest_payload(), root)
    with pytest.raises(FormatError):
        book.append("notes", "note.added", {"deeper": deepest_payload()}, root)
    export_bundle(book, tmp_path / "b", signer=root)
    verified = verify_bundle(tmp_path / "b", root_key=root.id)
    assert len(verified.events) == book.size()
    assert [e.line() for e in verified.events] == [e.line() for e in book.events()]
