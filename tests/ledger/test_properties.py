"""Property tests: arbitrary payloads hash identically after store, load and export; bad ones are refused."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.app import app
from ledger.canonical import MAX_INT
from ledger.errors import PayloadError
from ledger.keys import Signer
from ledger.store import Ledger

from .test_canonical import json_objects

BODY = ("v", "ledger", "seq", "prev", "stream", "type", "time", "actor", "payload")


@pytest.fixture(scope="module")
def memory_ledger() -> tuple[Ledger, Signer]:
    root = Signer.generate("root")
    book = Ledger("sqlite://")
    book.init("tally.test/props", root)
    return book, root


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=json_objects)
def test_payload_hash_survives_store_load_export(memory_ledger: tuple[Ledger, Signer], payload: dict) -> None:
    book, root = memory_ledger
    appended = book.append("props", "prop.checked", payload, root)
    loaded = book.get(appended.seq)
    assert loaded == appended and loaded.computed_hash() == appended.hash
    exported = json.loads(loaded.line())  # what events.jsonl holds
    body = {name: exported[name] for name in BODY}
    assert hashlib.sha256(rfc8785.dumps(body)).hexdigest() == appended.hash
    assert rfc8785.dumps(exported["payload"]) == rfc8785.dumps(payload)


invalid_payloads = st.one_of(
    st.dictionaries(st.text(max_size=3), st.sampled_from([math.nan, math.inf, -math.inf]), min_size=1, max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(min_value=MAX_INT + 1, max_value=2**70), min_size=1, max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(max_value=-MAX_INT - 1, min_value=-(2**70)), min_size=1, max_size=2),
    st.lists(st.integers(0, 5), max_size=3),
    st.text(max_size=5).map(json.dumps),
    st.integers(),
)


def test_invalid_payloads_refused_by_library(memory_ledger: tuple[Ledger, Signer]) -> None:
    book, root = memory_ledger
    before = book.size()
    for payload in ({"x": math.nan}, {"x": 2**60}, [1], "s", {"x": "y" * (1 << 20)}):
        with pytest.raises(PayloadError):
            book.append("props", "prop.checked", payload, root)  # type: ignore[arg-type]
    assert book.size() == before


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=invalid_payloads)
def test_invalid_payloads_exit_2_nothing_appended(tmp_path_factory: pytest.TempPathFactory, payload: object) -> None:
    workdir = _cli_ledger(tmp_path_factory)
    runner = CliRunner()
    text = json.dumps(payload, allow_nan=True) if not isinstance(payload, str) else payload
    result = runner.invoke(app, ["--db", str(workdir / "tally.db"), "--key", str(workdir / ".tally/root.pem"),
                                 "append", "prop.bad", "--stream", "s", "--payload", text])
    assert result.exit_code == 2, (payload, result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1
    assert Ledger.open(str(workdir / "tally.db")).size() == 1


_CLI_LEDGER: list[Path] = []


def _cli_ledger(factory: pytest.TempPathFactory) -> Path:
    if not _CLI_LEDGER:
        workdir = factory.mktemp("cli-props")
        result = CliRunner().invoke(app, ["--db", str(workdir / "tally.db"), "init", "--origin", "tally.test/p"])
        assert result.exit_code == 0, result.stderr
        _CLI_LEDGER.append(workdir)
    return _CLI_LEDGER[0]
