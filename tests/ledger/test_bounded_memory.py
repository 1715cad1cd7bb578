"""Bounded means bounded in memory too: the nesting guard and the ledger's readers under RLIMIT_AS.

The guard (``strictjson.nesting_depth``) once cost about 125 bytes per input byte of a
long string: a 30 MiB string ended in a MemoryError well inside the 64 MiB bound. Each
test here reads a document exactly at a documented bound (named after its constant) in
a child process whose address space is capped at a small constant per input byte
(``tests/memlimit.py``); a reader that needed more fails there. ``bench/strict.py``
measures the cost per byte of every shape, structure-dense ones included.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import strictjson
from ledger.bundle import MAX_EVENT_LINE_BYTES, MAX_SMALL_FILE_BYTES, export_bundle
from ledger.canonical import MAX_BODY_BYTES
from ledger.keys import Signer
from ledger.store import Ledger
from ledger.strictjson import MAX_DOCUMENT_BYTES, nesting_depth
from ledger.stricttoml import MAX_TOML_BYTES

from ..memlimit import MIB, SLACK, run_limited


def reference_depth(text: str) -> int:
    """The nesting depth as a JSON reader sees it, one character at a time (stops where JSON would)."""
    depth = deepest = 0
    inside = escaped = False
    for char in text:
        if inside:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                inside = False
        elif char == '"':
            inside = True
        elif char == "\\":
            break  # not JSON from here on: a parser refuses the text at this character
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


JSONISH = st.text(alphabet=st.sampled_from([*'[]{}"\\a,:1 é', "\U0001F600", "\ud800"]), max_size=60)


@given(text=JSONISH, chunk=st.sampled_from([1, 2, 3, 7, 64]))
def test_nesting_depth_is_what_a_json_reader_sees(text: str, chunk: int) -> None:
    saved = strictjson.SCAN_CHUNK
    strictjson.SCAN_CHUNK = chunk  # every chunk boundary: inside strings, escapes and bracket runs
    try:
        got = nesting_depth(text)
    finally:
        strictjson.SCAN_CHUNK = saved
    stop = re.search(r'\\', re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: "_" * len(m.group()), text))
    if stop is None:
        assert got == reference_depth(text)
    else:  # after a backslash outside a string the text is not JSON: the count may only be higher
        assert got >= reference_depth(text[:stop.start()])


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ("[]", 1), ('{"a": [1, {"b": "]]]}}"}]}', 3), ('["\\"[[[", [[]]]', 3), ('"[[[', 0),
    ('["unterminated [[[[', 1), ("[" * 5000 + "]" * 5000, 5000),
])
def test_nesting_depth_examples(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


def string_document(size: int, char: str = "x") -> bytes:
    """A JSON object of exactly ``size`` bytes holding one long string of ``char``."""
    head, tail = b'{"s": "', b'"}'
    count = (size - len(head) - len(tail)) // len(char.encode())
    body = head + char.encode() * count + tail
    return body + b" " * (size - len(body))


PER_BYTE = 6  # the budget: bytes of address space per input byte (the file's bytes, its text, its value)

JSON_BOUNDS = [
    ("strictjson.MAX_DOCUMENT_BYTES", MAX_DOCUMENT_BYTES, "x"),  # every JSON file tally reads (64 MiB)
    ("strictjson.MAX_DOCUMENT_BYTES, non-BMP", MAX_DOCUMENT_BYTES, "\U0001F600"),  # text of 4 bytes a character
    ("bundle.MAX_EVENT_LINE_BYTES", MAX_EVENT_LINE_BYTES, "x"),  # an events.jsonl line
    ("bundle.MAX_SMALL_FILE_BYTES", MAX_SMALL_FILE_BYTES, "x"),  # manifest.json
]


@pytest.mark.parametrize(("bound", "size", "char"), JSON_BOUNDS, ids=[b[0] for b in JSON_BOUNDS])
def test_read_json_at_the_bound_under_a_memory_limit(tmp_path: Path, bound: str, size: int, char: str) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(string_document(size, char))
    setup = f"""
        from ledger.strictfile import read_limited
        from ledger.strictjson import read_json
        read_json(b'{{"warm": ["up", {{"x": 1}}]}}', "warm-up")
        path, size = {str(path)!r}, {size}
    """
    work = """
        value = read_json(read_limited(path, "doc", size), "doc", max_bytes=size)
        print(len(value["s"]))
    """
    done = run_limited(setup, work, PER_BYTE * size + SLACK)
    assert done.returncode == 0 and not done.out_of_memory, done.stderr[-2000:]
    assert int(done.stdout) == (size - 9) // len(char.encode())


def test_the_old_guard_fails_under_the_same_limit(tmp_path: Path) -> None:
    """The limit is tight enough to catch the regression: the guard this replaced needs ~125 bytes a byte."""
    size = 8 * MIB
    path = tmp_path / "doc.json"
    path.write_bytes(string_document(size))
    setup = f"""
        import re
        from itertools import accumulate
        _S, _B = re.compile(r'"(?:[^"\\\\]|\\\\.)*"', re.S), re.compile(r"[\\[\\]{{}}]")
        def old_nesting_depth(text):
            return max(accumulate([1 if c in "[{{" else -1 for c in _B.findall(_S.sub("", text))]), default=0)
        old_nesting_depth('["warm-up"]')
        text = open({str(path)!r}).read()
    """
    done = run_limited(setup, "print(old_nesting_depth(text))", PER_BYTE * size + SLACK)
    assert done.out_of_memory, (done.returncode, done.stdout, done.stderr[-500:])


@pytest.mark.parametrize("char", ["x", "\\n"], ids=["string", "escapes"])
def test_read_toml_at_the_bound_under_a_memory_limit(tmp_path: Path, char: str) -> None:
    """stricttoml.MAX_TOML_BYTES (plans, site files, simulator configurations: 16 MiB)."""
    size = MAX_TOML_BYTES
    head, tail = b'a = "', b'"\n'
    count = (size - len(head) - len(tail)) // len(char)
    doc = head + char.encode() * count + tail
    path = tmp_path / "doc.toml"
    path.write_bytes(doc)
    setup = f"""
        from ledger.strictfile import read_limited
        from ledger.stricttoml import read_toml
        read_toml(b'warm = [1, {{x = "up"}}]', "warm-up")
        path, size = {str(path)!r}, {size}
    """
    work = """
        value = read_toml(read_limited(path, "doc", size), "doc")
        print(len(value["a"]))
    """
    done = run_limited(setup, work, PER_BYTE * size + SLACK)
    assert done.returncode == 0 and not done.out_of_memory, done.stderr[-2000:]
    assert int(done.stdout) == count


def test_bundle_audit_of_an_event_line_at_the_bound_under_a_memory_limit(tmp_path: Path) -> None:
    """bundle.MAX_EVENT_LINE_BYTES: a bundle whose event line is as long as an event may be (1 MiB + 4 KiB)."""
    root = Signer.generate("root")
    book = Ledger(f"sqlite:///{tmp_path / 'tally.db'}")
    book.init("tally.test/memory", root)
    big = book.append("notes", "note.added", {"text": "x" * (MAX_BODY_BYTES - 1024)}, root)
    export_bundle(book, tmp_path / "bundle", signer=root)
    book.close()
    line = (tmp_path / "bundle" / "events.jsonl").read_bytes().split(b"\n")[big.seq - 1]
    assert MAX_BODY_BYTES - 1024 < len(line) <= MAX_EVENT_LINE_BYTES
    setup = f"""
        from ledger.bundle import verify_bundle
        bundle, root = {str(tmp_path / "bundle")!r}, {root.id!r}
    """
    work = """
        verified = verify_bundle(bundle, root_key=root)
        print(len(verified.events))
    """
    done = run_limited(setup, work, PER_BYTE * MAX_EVENT_LINE_BYTES * 2 + SLACK)
    assert done.returncode == 0 and not done.out_of_memory, done.stderr[-2000:]
    assert int(done.stdout) == 2


def test_read_toml_of_a_wide_array_under_a_memory_limit(tmp_path: Path) -> None:
    """The depth walk after tomllib keeps one iterator per open array, not every element of a wide one.

    At the full 16 MiB bound tomllib alone takes about 40 s here for this shape, so the test
    reads 2 MiB; ``bench/strict.py`` measures the cost per byte at 16 MiB. The walk this
    replaced pushed every element (about 42 bytes per input byte here, against 6 now).
    """
    size = 2 * MIB
    doc = b"a = [" + b"1," * ((size - 7) // 2) + b"]\n"
    path = tmp_path / "wide.toml"
    path.write_bytes(doc)
    setup = f"""
        from ledger.strictfile import read_limited
        from ledger.stricttoml import read_toml
        read_toml(b'warm = [1, [2]]', "warm-up")
        path = {str(path)!r}
    """
    work = """
        print(len(read_toml(read_limited(path, "doc", 16 << 20), "doc")["a"]))
    """
    done = run_limited(setup, work, 12 * size + SLACK)
    assert done.returncode == 0 and not done.out_of_memory, done.stderr[-2000:]
    assert int(done.stdout) == (size - 7) // 2
