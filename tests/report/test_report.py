"""report.html and report.md render for every outcome; the HTML embeds its figures and states the decision."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from runner.decide import compute
from runner.report import ReportPaths, build_document, render_html, render_markdown, write_report
from tests.decide.builders import Rep, same, win2_input

from .cases import CASES

# Figures are rendered for these only (each costs a few hundred ms); the others render text only.
PLOTTED = ("win2_win", "win2_inconclusive_missing_wave", "pp3_candidate", "pp3_no_promotion_missing_block",
           "pp3_no_requests")


class _Page(HTMLParser):
    """Collects what the test checks: the decision paragraph, images, list items, links, scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.decision = ""
        self.reasons: list[str] = []
        self.external: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag in ("script", "link", "iframe") or (tag == "img" and not (a.get("src") or "").startswith("data:")):
            self.external.append(tag)
        if tag == "p" and a.get("id") == "decision":
            self._in = "decision"
        if tag == "li":
            self._in = "li"
            self.reasons.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("p", "li"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "decision":
            self.decision += data
        elif self._in == "li":
            self.reasons[-1] += data


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


Rendered = tuple[dict[str, Any], dict[str, Any], ReportPaths]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Rendered]:
    """Each case rendered once per module (figures only for PLOTTED), shared by the tests below."""
    cache: dict[str, Rendered] = {}

    def get(name: str) -> Rendered:
        if name not in cache:
            data = CASES[name][0]()
            result = compute(data)
            out = tmp_path_factory.mktemp(name)
            cache[name] = (data, result, write_report(data, result, out, title=f"case {name}",
                                                      context={"window": name}, plots=name in PLOTTED))
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_report_renders_for_every_outcome(name: str, rendered: Callable[[str], Rendered]) -> None:
    _, result, paths = rendered(name)
    decision = CASES[name][1]
    assert result["decision"] == decision
    plots = name in PLOTTED
    page = _page(paths.html)
    assert page.decision == f"Decision: {decision} (rule {result['rule']})"
    assert page.reasons[:len(result["reasons"])] == result["reasons"]
    assert not page.external, "report.html must be self-contained"
    markdown = paths.markdown.read_text(encoding="utf-8")
    assert f"**Decision: {decision} (rule {result['rule']})**" in markdown
    for reason in result["reasons"]:
        assert f"- {reason}" in markdown
    if result["rule"] == "win2-v1":
        for cell, cell_result in result["cells"].items():
            assert f"Cell {cell}: {cell_result['verdict'] or 'not computed'}" in markdown
        assert "checklist_literal decision:" in markdown
        assert "archive day-to-day" in markdown
        # several metrics, one decision: which decide and which are reported only
        assert ("| metrics | decide: pooled_rate_tps (primary); guards accepted_per_round, decode_tps; reported only: "
                "ms_per_round, ttft_s |") in markdown
    else:
        assert "Small-family limit" in markdown
        assert ("| figures | decide: point gain (>= minimum gain), bootstrap lower bound (> 0); guards TTFT and "
                "p95 round-time change per usable pair") in markdown
        assert "reported only: per-family gains" in markdown
        for pair in result["per_pair"]:
            assert f"| {pair} |" in markdown
    if plots:
        expected = len(result["cells"]) if result["rule"] == "win2-v1" else 1
        assert len(page.images) == expected
        inline = [f for f in paths.figures if f.name.startswith("primary-")]  # drawn inside the page
        assert len(inline) == (sum(1 for c in result["cells"].values()
                                   if any(m["role"] == "primary" and m["point"] is not None
                                          for m in c["metrics"].values()))
                               if result["rule"] == "win2-v1" else 0)
        imaged = [f for f in paths.figures if f not in inline]
        assert len(imaged) == expected
        for figure in inline:
            assert f"]({figure.relative_to(paths.markdown.parent)})" in markdown
        for src, figure in zip(page.images, imaged, strict=True):
            assert src.startswith("data:image/svg+xml;base64,")
            svg = base64.b64decode(src.split(",", 1)[1], validate=True)
            assert svg == figure.read_bytes()  # report.md links the same figure
            assert b"<svg" in svg and b"</svg>" in svg
            assert f"]({figure.relative_to(paths.markdown.parent)})" in markdown
    else:
        assert page.images == [] and paths.figures == ()


def test_html_figures_show_what_the_issue_lists(rendered: Callable[[str], Rendered]) -> None:
    _, _, paths = rendered("win2_win")
    page = _page(paths.html)
    texts = [base64.b64decode(src.split(",", 1)[1]).decode("utf-8") for src in page.images]
    for cell, svg in zip(("short-b1", "32k-b1"), texts, strict=True):
        assert f"{cell}: WIN" in svg
        for label in ("s1 control", "s2 candidate", "s3 control", "control spread", "+/- bar 2.0%", "95% interval",
                      "pooled_rate_tps", "accepted_per_round", "decode_tps", "in-window OFF/OFF"):
            assert label in svg, (cell, label)
    assert "archive day-to-day 8.00%" in texts[0]            # short-b1 has three archive entries
    assert "archive: fewer than two entries" in texts[1]     # 32k-b1 has none


def test_pp3_figure_shows_bootstrap_and_guards(rendered: Callable[[str], Rendered]) -> None:
    _, _, paths = rendered("pp3_candidate")
    svg = paths.figures[0].read_text(encoding="utf-8")
    for label in ("gain per pair", "lower bound +8.00%", "3 distinct values", "TTFT", "p95 round time",
                  "regression limit +5%", "f2/150k"):
        assert label in svg, label


def test_rendering_is_deterministic(rendered: Callable[[str], Rendered], tmp_path: Path) -> None:
    data, result, a = rendered("pp3_candidate")
    b = write_report(data, result, tmp_path, title="case pp3_candidate", context={"window": "pp3_candidate"})
    assert a.html.read_bytes() == b.html.read_bytes()
    assert a.markdown.read_bytes() == b.markdown.read_bytes()


def test_context_is_shown_and_escaped() -> None:
    make, _ = CASES["win2_no_change"]
    data = make()
    doc = build_document(data, compute(data), title="<w1> & co", context={"window": "w1<script>",
                                                                        "ledger_seqs": [4, 5, 9]}, plots=False)
    html = render_html(doc)
    assert "<script>" not in html and "w1&lt;script&gt;" in html and "&lt;w1&gt; &amp; co" in html
    assert "[4, 5, 9]" in render_markdown(doc)
    assert re.search(r"<td>ledger_seqs</td><td>\[4, 5, 9\]</td>", html)


def test_unwritable_out_dir_is_a_format_error(tmp_path: Path) -> None:
    from ledger.errors import FormatError

    make, _ = CASES["win2_no_change"]
    data: Any = make()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FormatError, match="cannot write the report"):
        write_report(data, compute(data), blocker / "sub", plots=False)


def test_several_primaries_say_which_decide_and_the_correction(tmp_path: Path) -> None:
    """A plan deciding on two primaries with Holm: the report names both, the guard left, what is reported
    only, the correction registered and applied, and each primary's p against its threshold (text and HTML)."""
    from tests.decide.test_primaries import X_TINY, Y_WIN, _reps

    data = win2_input({"short-b1": {"s1": same(Rep()), "s2": _reps(X_TINY, Y_WIN), "s3": same(Rep())}},
                      params={"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2,
                              "primaries": ["pooled_rate_tps", "decode_tps"], "decide": "any", "correction": "holm"})
    result = compute(data)
    assert result["decision"] == "WIN"
    paths = write_report(data, result, tmp_path, title="two primaries", plots=False)
    markdown = paths.markdown.read_text(encoding="utf-8")
    html = paths.html.read_text(encoding="utf-8")
    roles = ("decide: pooled_rate_tps, decode_tps (primary); guards accepted_per_round; reported only: "
             "ms_per_round, ttft_s")
    correction = "registered holm; applied: holm (alpha 0.05)"
    for text in (markdown, html):
        assert roles in text and correction in text
        assert "pooled_rate_tps, decode_tps: decide any (WIN when a primary wins and passes its corrected threshold)" \
            in text
        assert "p (corrected threshold)" in text
        assert "(rank 2, threshold 0.05: passed)" in text and "(rank 1, threshold 0.025: passed)" in text
    # a plan without the members: no correction rows, no p column
    plain_input = win2_input({"short-b1": {"s1": same(Rep()), "s2": same(Rep()), "s3": same(Rep())}})
    plain = write_report(plain_input, compute(plain_input), tmp_path / "plain", title="plain", plots=False)
    plain_md = plain.markdown.read_text(encoding="utf-8")
    assert "| correction |" not in plain_md and "p (corrected threshold)" not in plain_md
