"""The one base64 helper: written standard and padded, read strictly (C2SP) or leniently (DSSE)."""

from __future__ import annotations

import pytest

from ledger import b64
from ledger.errors import FormatError

DATA = bytes(range(250, 256))  # encodes with '+' and '/' and needs padding


def test_written_standard_with_padding_and_read_back() -> None:
    text = b64.encode(DATA)
    assert text == "+vv8/f7/" and b64.decode(text, "x") == DATA
    assert b64.encode(b"ab") == "YWI="


@pytest.mark.parametrize("text", ["-vv8_f7_", "YWI", "YW I=", "\u00e9\u00e9\u00e9\u00e9"])
def test_the_strict_reader_refuses_what_is_not_standard_padded_base64(text: str) -> None:
    with pytest.raises(FormatError, match=r"^checkpoint root hash is not standard base64$"):
        b64.decode(text, "checkpoint root hash")


def test_the_lenient_reader_takes_url_safe_and_unpadded() -> None:
    assert b64.decode_lenient("-vv8_f7_", "DSSE sig") == DATA
    assert b64.decode_lenient("YWI", "DSSE sig") == b"ab"
    with pytest.raises(FormatError, match=r"^DSSE payload is not a base64 string$"):
        b64.decode_lenient(5, "DSSE payload")
    with pytest.raises(FormatError, match=r"^DSSE sig is not base64$"):
        b64.decode_lenient("Y!WI", "DSSE sig")
