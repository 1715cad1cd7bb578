"""Family files and the synthetic generator: frozen order, sha256, bad lines named."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.errors import FormatError
from runner.measure import Prompt, family_bytes, load_family, parse_family, synthetic_family, write_family


def test_synthetic_families_are_deterministic(tmp_path: Path) -> None:
    a = synthetic_family("opinions", seed=3)
    assert a == synthetic_family("opinions", seed=3)
    assert a != synthetic_family("opinions", seed=4)
    assert a != synthetic_family("filings", seed=3)
    assert [p.kind for p in a] == ["short"] * 4 + ["long"] * 2
    assert len(a[-1].text.split()) > 1000 > len(a[0].text.split())
    sha = write_family(tmp_path / "o.jsonl", a)
    assert sha == hashlib.sha256((tmp_path / "o.jsonl").read_bytes()).hexdigest()
    assert write_family(tmp_path / "again.jsonl", synthetic_family("opinions", seed=3)) == sha


def test_load_round_trip(tmp_path: Path) -> None:
    prompts = synthetic_family("filings", short=2, long=1, long_words=(50, 60))
    path = tmp_path / "filings.jsonl"
    sha = write_family(path, prompts)
    family = load_family(path)
    assert family.name == "filings" and family.prompts == prompts and family.sha256 == sha


def test_chat_messages_and_default_ids() -> None:
    data = b'{"prompt": "hello"}\n\n{"id": "c1", "messages": [{"role": "user", "content": "hi"}]}\n'
    family = parse_family(data, "mixed")
    assert family.prompts[0].id == "mixed-1"
    assert family.prompts[1].chat_messages() == [{"role": "user", "content": "hi"}]
    assert family.prompts[0].chat_messages() == [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(("data", "message"), [
    (b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": \n', "line 2: not valid JSON"),
    (b'["x"]\n', "line 1: must be a JSON object"),
    (b'{"id": "a", "prompt": ""}\n', "line 1.prompt: must be a non-empty string"),
    (b'{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "line 2: duplicate id 'a' \\(first on line 1\\)"),
    (b'{"messages": []}\n', "line 1.messages: must be a non-empty list"),
    (b"\n\n", "holds no prompts"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_malformed_family_names_the_line(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        parse_family(data, "f", "f.jsonl")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read family file"):
        load_family(tmp_path / "absent.jsonl")


@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=40)
                          .filter(lambda s: s.strip())), min_size=1, max_size=6, unique_by=lambda t: t[0]))
def test_bytes_round_trip(items: list[tuple[str, str]]) -> None:
    prompts = tuple(Prompt(pid, text) for pid, text in items)
    assert parse_family(family_bytes(prompts), "h").prompts == prompts
