"""The samples of a ``/metrics`` text: prometheus_client's reading, without its cost on plain text.

prometheus_client's text parser reads a line a character at a time in Python; a vLLM
scrape (some 600 lines) costs it about 10 ms of CPU, twice per wave, which was half of
the runner's own time in a simulated window. :func:`samples` reads the lines servers
actually print (``# HELP`` and ``# TYPE`` lines with a plain name, samples with plain
names, unescaped label values separated by commas and one value) with one regular
expression each, and follows the parser's family rules (a counter family not named
``..._total`` names its samples ``..._total``; a sample outside the current family is
an untyped family of its own). Any line in any other form (escapes, timestamps, tabs,
quoted names, other comments, a reserved or repeated label) and the whole text is read
by prometheus_client instead, so that what is read, and what is refused, is the
parser's in every case.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["samples"]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_VALUE = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|Inf|inf|NaN|nan)"
_SAMPLE = re.compile(rf"({_NAME})(?:\{{({_LABEL}(?:,{_LABEL})*)\}})? ({_VALUE})", re.ASCII)
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"', re.ASCII)
_COMMENT = re.compile(rf"# (HELP|TYPE) ({_NAME})(?: (.*))?", re.ASCII | re.DOTALL)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_SUFFIXES = {"counter": ("",), "gauge": ("",), "summary": ("_count", "_sum", ""),
             "histogram": ("_count", "_sum", "_bucket")}
_KINDS = frozenset({*_SUFFIXES, "untyped"})

Sample = tuple[str, Mapping[str, str], float]


class _Unplain(Exception):
    """A line the plain reading does not take: the parser reads the whole text."""


def samples(text: str) -> Iterator[Sample]:
    """Every sample of the text: (name, labels, value), as prometheus_client reads them.

    ``ValueError``, ``TypeError`` or ``IndexError`` (the parser's own) when it is not
    exposition text.
    """
    try:
        found = _plain(text)
    except _Unplain:
        return _parsed(text)
    return iter(found)


def _parsed(text: str) -> Iterator[Sample]:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield sample.name, sample.labels, sample.value


def _value(token: str) -> float:
    return int(token) if _INTEGER.fullmatch(token) else float(token)


def _plain(text: str) -> list[Sample]:
    found: list[Sample] = []
    family = ""
    kind = "untyped"
    allowed: tuple[str, ...] = ()
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            comment = _COMMENT.fullmatch(line)
            if comment is None or '"' in line or "\\" in line:
                raise _Unplain
            what, name, rest = comment.groups()
            if what == "HELP":
                if name != family:
                    family, kind, allowed = name, "untyped", (name,)
                continue
            if rest not in _KINDS or (rest == "counter" and name == "_total"):
                raise _Unplain   # (a counter named ``_total`` leaves its family no name: the parser refuses it)
            if name != family:
                family = name
            kind = rest
            allowed = tuple(family + suffix for suffix in _SUFFIXES.get(kind, ("",)))
            continue
        sample = _SAMPLE.fullmatch(line)
        if sample is None:
            raise _Unplain
        name, pairs, token = sample.groups()
        labels: dict[str, str] = {}
        if pairs is not None:
            for label, value in _PAIR.findall(pairs):
                if label in labels:
                    raise _Unplain
                labels[label] = value
        try:
            value = _value(token)
        except ValueError:
            raise _Unplain from None
        if name in allowed:
            if kind == "counter" and not family.endswith("_total"):
                name += "_total"
        else:
            family, kind, allowed = "", "untyped", ()
        found.append((name, labels, value))
    return found
