"""The attacks of a long string on every named reader, through the real commands, under RLIMIT_AS.

A 30 MiB string in ``verdict compute``, ``append --payload @FILE`` or a receipt's event
file, or a 24 MiB family line, ended in a MemoryError traceback (the nesting guard cost
about 125 bytes per byte; a 60 MiB family line took 7.6 GB) although every one is inside
its documented bound: ``runner.app.files.MAX_INPUT_BYTES`` (64 MiB, every JSON file the CLI
reads) and ``runner.measure.family.MAX_FAMILY_BYTES`` (256 MiB). Each test runs the
command in a child whose address space is capped at a few bytes per input byte
(``tests/memlimit.py``) after a warm-up run on a small input: the command must answer
as for any bad input (one line, its exit code), never run out of memory.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from ledger.keys import Signer
from ledger.note import SIG_ED25519, vkey
from ledger.store import Ledger
from runner.app.files import MAX_INPUT_BYTES
from runner.measure.family import MAX_FAMILY_BYTES

from ..memlimit import MIB, SLACK, TALLY, run_limited

PER_BYTE = 6  # bytes of address space per input byte: the file's bytes, its text, its value, one copy more


def string_file(path: Path, size: int, member: str = "text", extra: dict[str, object] | None = None) -> Path:
    """A JSON object of about ``size`` bytes: ``extra`` members and one long string under ``member``."""
    head = json.dumps(extra or {})[:-1].encode()
    head += (b", " if extra else b"") + json.dumps(member).encode() + b': "'
    path.write_bytes(head + b"x" * (size - len(head) - 2) + b'"}')
    return path


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr[-2000:]
    return lines[0]


def run_tally(tmp_path: Path, warm: list[str], attack: list[str], size: int) -> tuple[int, str]:
    """Run ``tally *warm`` (imports paid), cap the address space, run ``tally *attack``; (exit code, stderr)."""
    setup = TALLY + f"\nos.chdir({str(tmp_path)!r})\ntally(*{warm!r})\nsys.stderr.write('--- attack\\n')\n"
    done = run_limited(setup, f"os._exit(tally(*{attack!r}))", PER_BYTE * size + SLACK, cwd=str(tmp_path))
    assert not done.out_of_memory and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, done.stderr.split("--- attack\n", 1)[1]


@pytest.mark.parametrize("size", [30 * MIB, MAX_INPUT_BYTES], ids=["30 MiB attack", "MAX_INPUT_BYTES"])
def test_a_30_mib_string_in_verdict_compute_is_refused_within_memory(tmp_path: Path, size: int) -> None:
    (tmp_path / "small.json").write_text('{"rule": "win2-v1"}')
    big = string_file(tmp_path / "big.json", size, "notes", {"rule": "win2-v1"})
    code, err = run_tally(tmp_path, ["verdict", "compute", "small.json"], ["verdict", "compute", big.name], size)
    assert code == 2 and "decision_cells: required" in one_line(err)  # read whole, then refused by the schema


def test_a_30_mib_string_in_append_payload_file_is_refused_within_memory(tmp_path: Path) -> None:
    root = Signer.generate("root")
    (tmp_path / ".tally").mkdir()
    (tmp_path / ".tally" / "root.pem").write_bytes(root.private_pem())
    (tmp_path / ".tally" / "root.pem").chmod(0o600)
    Ledger(f"sqlite:///{tmp_path / 'tally.db'}").init("tally.test/memory", root)
    size = 30 * MIB
    string_file(tmp_path / "payload.json", size)
    code, err = run_tally(tmp_path, ["append", "note.added", "--stream", "s", "--payload", '{"warm": 1}'],
                          ["append", "note.added", "--stream", "s", "--payload", "@payload.json"], size)
    assert code == 2 and "over the 1 MiB limit" in one_line(err)
    assert Ledger.open(str(tmp_path / "tally.db")).size() == 2  # the genesis and the warm-up: nothing else


def test_a_30_mib_string_in_a_receipt_event_file_is_refused_within_memory(tmp_path: Path) -> None:
    key = vkey("tally.test/memory", Signer.generate("log").public_raw, SIG_ED25519)
    (tmp_path / "1.dsse.json").write_text(json.dumps({"payloadType": "x", "payload": base64.b64encode(b"{}").decode(),
                                                      "signatures": []}))
    (tmp_path / "small.event.json").write_text("{}")
    size = 30 * MIB
    string_file(tmp_path / "big.event.json", size, "payload")
    code, err = run_tally(tmp_path, ["receipt", "verify", "1.dsse.json", "--vkey", key, "--event", "small.event.json"],
                          ["receipt", "verify", "1.dsse.json", "--vkey", key, "--event", "big.event.json"], size)
    # The event file is read whole (strict JSON, bounded) before the missing proof file is noticed.
    assert code == 2 and "tlog-proof" in one_line(err)


def family_file(path: Path, size: int) -> Path:
    head = b'{"id": "long", "prompt": "'
    path.write_bytes(b'{"id": "short", "prompt": "hi"}\n' + head + b"x" * (size - len(head) - 35) + b'"}\n')
    return path


@pytest.mark.parametrize("size", [24 * MIB], ids=["24 MiB line"])
def test_a_24_mib_family_line_is_read_within_memory(tmp_path: Path, size: int) -> None:
    (tmp_path / "small.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    family_file(tmp_path / "big.jsonl", size)
    url = "http://127.0.0.1:9/v1"  # nothing listens: the family is read whole before the first request
    code, err = run_tally(tmp_path, ["measure", "--url", url, "--family", "small.jsonl"],
                          ["measure", "--url", url, "--family", "big.jsonl"], size)
    assert code == 3 and "127.0.0.1:9" in one_line(err)


def test_a_family_file_at_the_bound_is_read_within_memory(tmp_path: Path) -> None:
    """runner.measure.family.MAX_FAMILY_BYTES (256 MiB) in four lines each at the line's own bound.

    A line is one JSON document (``strictjson.MAX_DOCUMENT_BYTES``, 64 MiB): four lines of
    64 MiB with their newlines fill the file's 256 MiB exactly. Read by ``load_family`` as
    ``tally window register`` and ``tally measure`` read it; the prompts it returns hold
    the file's text (256 MiB), on top of its bytes.
    """
    line = MAX_FAMILY_BYTES // 4  # with its newline
    path = tmp_path / "huge.jsonl"
    text = 0
    with path.open("wb") as out:
        for number in range(4):
            head = b'{"id": "p%d", "prompt": "' % number
            out.write(head + b"x" * (line - len(head) - 3) + b'"}\n')
            text += line - len(head) - 3
    assert path.stat().st_size == MAX_FAMILY_BYTES
    setup = f"""
        from runner.measure.family import load_family
        path = {str(path)!r}
    """
    work = """
        family = load_family(path)
        print(len(family.prompts), sum(len(p.text) for p in family.prompts))
    """
    done = run_limited(setup, work, 4 * MAX_FAMILY_BYTES + SLACK, timeout=600)
    assert done.returncode == 0 and not done.out_of_memory, done.stderr[-2000:]
    assert done.stdout.split() == ["4", str(text)]


def test_a_family_line_over_the_document_bound_is_one_line_of_refusal(tmp_path: Path) -> None:
    family_file(tmp_path / "long.jsonl", MAX_INPUT_BYTES + 64)
    setup = """
        from ledger.errors import FormatError
        from runner.measure.family import load_family
    """
    work = f"""
        try:
            load_family({str(tmp_path / "long.jsonl")!r})
        except FormatError as exc:
            print(exc)
    """
    done = run_limited(setup, work, PER_BYTE * MAX_INPUT_BYTES + SLACK)
    assert done.returncode == 0 and not done.out_of_memory, done.stderr[-2000:]
    assert "line 2: is over the 67108864-byte limit" in done.stdout
