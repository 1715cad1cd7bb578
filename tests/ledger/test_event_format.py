"""The verifier enforces the whole body format (docs/format.md, the body): one test per rule.

Each attack is a correctly chained event, signed by the root key, whose ``time``,
``type``, ``stream`` or ``ledger`` breaks the format: written to the database directly
(``helpers.forge_row``), as the store refuses it. ``verify`` fails it with its seq and
rule 4; ``tally append`` refuses the same values with exit 2 and appends nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import verify
from ledger.bundle import export_bundle, verify_bundle
from ledger.errors import FormatError, VerificationError
from ledger.event import Event, member_problem
from ledger.keys import Signer
from ledger.store import Ledger
from ledger.stored import verify_ledger
from ledger.verify import verify_events

from .helpers import forge_row, insert_event, sql
from .independent_checker import CheckFailed, check_events_jsonl

runner = CliRunner()

# (attack, member, value, what the refusal says)
ATTACKS = [
    ("not_a_time", "time", "not a time", "is not a UTC time"),
    ("time_without_six_fraction_digits", "time", "2026-12-01T10:00:00.123Z", "is not a UTC time"),
    ("time_with_an_offset", "time", "2026-12-01T10:00:00.000000+01:00", "is not a UTC time"),
    ("time_on_february_30", "time", "2026-02-30T10:00:00.000000Z", "is not a UTC time"),
    ("time_at_hour_24", "time", "2026-12-01T24:00:00.000000Z", "is not a UTC time"),
    ("time_with_a_leap_second", "time", "2016-12-31T23:59:60.000000Z", "is not a UTC time"),
    ("time_in_unicode_digits", "time", "２０２６-12-01T10:00:00.000000Z", "is not a UTC time"),
    ("undotted_type", "type", "NotDotted", "is not dotted lowercase words"),
    ("one_word_type", "type", "note", "is not dotted lowercase words"),
    ("type_with_an_empty_word", "type", "note..added", "is not dotted lowercase words"),
    ("type_with_a_trailing_newline", "type", "note.added\n", "is not dotted lowercase words"),
    ("empty_stream", "stream", "", "stream is empty"),
    ("stream_with_a_newline", "stream", "a\nb", "control character (U+000A)"),
    ("stream_with_del", "stream", "a\x7fb", "control character (U+007F)"),
    ("stream_with_u0085", "stream", "a\x85b", "control character (U+0085)"),
    ("stream_with_a_lone_surrogate", "stream", "a\udcffb", "a surrogate (U+DCFF)"),
]


def ids(attacks: list[tuple[str, str, str, str]]) -> list[str]:
    return [attack[0] for attack in attacks]


@pytest.fixture
def book(ledger: Ledger, root: Signer) -> Ledger:
    for i in range(3):
        ledger.append("notes", "note.added", {"i": i}, root)
    return ledger


def forge(book: Ledger, root: Signer, member: str, value: str) -> int:
    fields = {"stream": "notes", "type_": "note.added", "time": None}
    fields["type_" if member == "type" else member] = value
    row = forge_row(book, root, fields["stream"], str(fields["type_"]), {"forged": member}, time=fields["time"])
    insert_event(book, row)
    return int(row["seq"])


@pytest.mark.parametrize(("attack", "member", "value", "says"), ATTACKS, ids=ids(ATTACKS))
def test_verify_refuses_a_malformed_member(book: Ledger, root: Signer, attack: str, member: str, value: str,
                                           says: str) -> None:
    if "surrogate" in attack:  # no UTF-8 database can hold it; an event read from elsewhere can
        events = list(book.events())
        last = events[-1]
        seq = last.seq + 1
        events.append(Event(last.ledger, seq, last.hash, value, "note.added", last.time, root.id, "{}", "0" * 64, ""))
        with pytest.raises(VerificationError) as info:
            verify_events(events)
        assert (info.value.seq, info.value.rule) == (seq, 4) and says in str(info.value)
        return
    seq = forge(book, root, member, value)
    with pytest.raises(VerificationError) as info:
        verify_ledger(book)
    assert (info.value.seq, info.value.rule) == (seq, 4), attack
    assert says in str(info.value)


def test_a_malformed_ledger_id_fails_rule_4(book: Ledger, root: Signer) -> None:
    sql(book, "UPDATE events SET ledger = 'NOT-HEX'")  # every event: rule 3 holds, the syntax does not
    with pytest.raises(VerificationError) as info:
        verify_ledger(book)
    assert (info.value.seq, info.value.rule) == (1, 4)
    assert "32 lowercase hex" in str(info.value)


def test_the_format_rules_are_those_of_the_writer() -> None:
    from ledger.event import format_time

    assert member_problem("time", format_time()) is None
    assert member_problem("time", "2024-02-29T23:59:59.999999Z") is None  # a leap day
    assert member_problem("type", "gate.result") is None and member_problem("type", "a_1.b_2.c3") is None
    assert member_problem("stream", "window/w-1 é 中") is None  # any other character may appear
    assert member_problem("stream", "a\xa0b") is None  # U+00A0 is not a control character


@pytest.mark.parametrize("stream", [None, "notes"], ids=["full", "partial"])
def test_a_malformed_member_fails_the_bundle_audit(book: Ledger, root: Signer, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch, stream: str | None) -> None:
    seq = forge(book, root, "type", "NotDotted")
    bundle = tmp_path / "bundle"
    with monkeypatch.context() as old_tally:  # exported as the verifier did before it checked the syntax
        old_tally.setattr(verify, "body_problem", lambda _event: None)
        export_bundle(book, bundle, stream=stream, signer=root)
    with pytest.raises(VerificationError) as info:
        verify_bundle(bundle, root_key=root.id)
    assert (info.value.seq, info.value.rule) == (seq, 4)
    if stream is None:  # a verifier written from docs/format.md alone agrees
        with pytest.raises(CheckFailed) as independent:
            check_events_jsonl(bundle / "events.jsonl")
        assert (independent.value.seq, independent.value.rule) == (seq, 4)


STORE_ATTACKS = [a for a in ATTACKS if a[1] != "time"]  # the store writes the time itself


@pytest.mark.parametrize(("attack", "member", "value", "says"), STORE_ATTACKS, ids=ids(STORE_ATTACKS))
def test_the_store_refuses_what_verify_would(book: Ledger, root: Signer, attack: str, member: str, value: str,
                                             says: str) -> None:
    stream, type_ = (value, "note.added") if member == "stream" else ("notes", value)
    size = book.size()
    with pytest.raises(FormatError, match=re.escape(says)):
        book.append(stream, type_, {"i": 9}, root)
    assert book.size() == size


@pytest.mark.parametrize(("attack", "member", "value", "says"), STORE_ATTACKS, ids=ids(STORE_ATTACKS))
def test_tally_append_refuses_what_verify_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attack: str,
                                                member: str, value: str, says: str) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    assert runner.invoke(app, ["init", "--origin", "tally.test/format"]).exit_code == 0
    stream, type_ = (value, "note.added") if member == "stream" else ("notes", value)
    result = runner.invoke(app, ["append", type_, "--stream", stream, "--payload", "{}"])
    assert result.exit_code == 2, result.output
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert Ledger.open(str(tmp_path / "tally.db")).size() == 1
