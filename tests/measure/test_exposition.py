"""The plain reading of /metrics text: exactly prometheus_client's samples, at a fraction of the cost."""

from __future__ import annotations

import math
import random
from pathlib import Path

import httpx
import pytest

from runner.measure import exposition
from runner.measure.exposition import samples
from runner.measure.metrics import parse_metrics
from runner.sim import SimHandle

FIXTURES = Path(__file__).parent / "fixtures"


def _exact(found: list[exposition.Sample]) -> list[tuple[str, dict[str, str], str, str]]:
    """Samples compared with their value's type (an int stays an int) and NaN equal to NaN."""
    return [(name, dict(labels), type(value).__name__, "nan" if math.isnan(value) else repr(value))
            for name, labels, value in found]


def _parser(text: str) -> list[exposition.Sample]:
    return list(exposition._parsed(text))


def _outcome(read: object, text: str) -> object:
    try:
        return _exact(list(read(text)))  # type: ignore[operator]
    except (ValueError, TypeError, IndexError) as exc:
        return type(exc).__name__


def _texts(server: SimHandle) -> list[str]:
    return [httpx.get(f"{server.url}/metrics").text, *(p.read_text() for p in sorted(FIXTURES.glob("*_metrics.txt")))]


def test_servers_metrics_are_read_plainly_and_as_the_parser_reads_them(server: SimHandle) -> None:
    texts = _texts(server)
    assert len(texts) >= 5
    values = []
    for text in texts:
        plain = exposition._plain(text)  # the real servers' text takes the fast reading...
        assert _exact(plain) == _exact(_parser(text))  # ...and reads exactly as the parser reads it
        values += [v for _n, _l, v in plain]
    assert any(isinstance(v, int) for v in values) and any(isinstance(v, float) for v in values)


def test_counter_family_names_its_samples_total_and_strays_are_their_own_family() -> None:
    text = ("# HELP reqs Requests.\n# TYPE reqs counter\nreqs 3\nreqs_total 4\n"
            "# TYPE lat histogram\nlat_bucket{le=\"+Inf\"} 2\nlat_sum 0.5\nlat_count 2\nlat 9\n"
            "# TYPE done_total counter\ndone_total 1.5e3\n")
    assert [(n, v) for n, _l, v in exposition._plain(text)] == [
        ("reqs_total", 3), ("reqs_total", 4), ("lat_bucket", 2), ("lat_sum", 0.5), ("lat_count", 2), ("lat", 9),
        ("done_total", 1500.0)]
    assert _exact(exposition._plain(text)) == _exact(_parser(text))


@pytest.mark.parametrize("line", [
    'x{a="q\\"uote"} 1',            # an escaped label value
    "x 1 1700000000000",             # a timestamp
    "x\t1",                          # a tab
    'x{a="1",} 1',                   # a trailing comma
    'x{a="1",a="2"} 1',              # a repeated label
    'x{__name__="y"} 1',             # a reserved label
    "# EOF",                         # another comment
    '# HELP x a "quoted" help',      # quotes in a comment
    "x 1_000",                       # not a value
    "x 0x10",
    "x{a=\"1\"}  2",                 # two spaces
    "x 1" + "0" * 5000,              # an integer too long for int()
    "# TYPE _total counter",         # a counter family whose name is all suffix (the parser refuses it)
])
def test_other_forms_are_left_to_the_parser(line: str) -> None:
    text = f"# TYPE x gauge\n{line}\nplain 1\n"
    with pytest.raises(exposition._Unplain):
        exposition._plain(text)
    assert _outcome(samples, text) == _outcome(_parser, text)


def test_garbled_metrics_read_as_the_parser_reads_them(server: SimHandle) -> None:
    """Lines with characters dropped, doubled or replaced: the same samples, or the same refusal."""
    lines = httpx.get(f"{server.url}/metrics").text.split("\n")[:120]
    rng = random.Random(22)
    alphabet = '{}=",# \t\\._:aZ09+-eE\r'
    for _ in range(200):
        garbled = list(lines)
        i = rng.randrange(len(garbled))
        line = garbled[i]
        j = rng.randrange(len(line) + 1)
        garbled[i] = rng.choice([line[:j] + line[j + 1:], line[:j] + rng.choice(alphabet) + line[j:],
                                 line[:j] + rng.choice(alphabet) + line[j + 1:]])
        text = "\n".join(garbled)
        assert _outcome(samples, text) == _outcome(_parser, text), garbled[i]


def test_parse_metrics_still_refuses_what_is_not_exposition() -> None:
    from ledger.errors import FormatError

    with pytest.raises(FormatError, match="not Prometheus exposition"):
        parse_metrics('x{a="1" 2\n')
    assert parse_metrics("# TYPE reqs counter\nreqs 3\n").values == {"reqs_total": 3}
