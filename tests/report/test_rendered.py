"""The report as a reader sees it: rendered by headless Chromium at 1280x800, asserted on the page.

The decision in plain words is the page's first heading, coloured, and fully visible above
the fold; the primary metric's plot has an axis range that holds its interval and its bar
(read from the plot's own tick labels in the page) and is scaled to them; no console errors.
Skips where Chromium is absent, unless ``TALLY_REQUIRE_CHROMIUM=1`` (set by ``.ci/run``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.decide import compute
from runner.report import write_report

from . import chromium
from .cases import CASES

PAGE = """JSON.stringify((() => {
  const heading = document.querySelector("h1, h2, h3, h4, h5, h6");
  const box = heading.getBoundingClientRect();
  const style = getComputedStyle(heading);
  const hit = document.elementFromPoint(box.left + 5, box.top + box.height / 2);
  const figures = [...document.querySelectorAll("figure.inline svg")].map(svg => ({
    caption: svg.parentElement.querySelector("figcaption").textContent,
    ticks: [...svg.querySelectorAll('g[id$="matplotlib.axis_1"] g[id*="xtick_"] text')].map(t => t.textContent),
    width: svg.getBoundingClientRect().width,
  }));
  return {tag: heading.tagName, text: heading.innerText, classes: [...heading.classList], top: box.top,
          bottom: box.bottom, fold: window.innerHeight, width: window.innerWidth, visible: style.visibility,
          display: style.display, background: style.backgroundColor, hitInside: heading.contains(hit),
          figures};
})())"""


@pytest.fixture(scope="module")
def browser() -> Iterator[chromium.Browser]:
    reason = chromium.available()
    if reason is not None:
        if os.environ.get("TALLY_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"Chromium is required here but unavailable: {reason}")
        pytest.skip(reason)
    with chromium.Browser() as started:
        yield started


def _render(browser: chromium.Browser, name: str, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    data = CASES[name][0]()
    result = compute(data)
    paths = write_report(data, result, tmp_path / name, title=f"case {name}", context={"window": name})
    before = len(browser.console_errors())
    session = browser.open(paths.html.resolve().as_uri(), 1280, 800)
    page = json.loads(browser.evaluate(session, PAGE))
    assert browser.console_errors()[before:] == []
    return result, page


def _number(label: str) -> float:
    return float(label.replace("\u2212", "-"))


@pytest.mark.parametrize(("name", "words", "tone"), [
    ("win2_win", "Promote the candidate", "promote"),
    ("win2_no_change", "Keep production", "keep"),
    ("win2_loss", "Keep production: the candidate is worse", "keep"),
    ("win2_inconclusive_clock", "No decision", "none"),
    ("pp3_candidate", "Promote the candidate", "promote"),
])
def test_rendered_report_leads_with_the_decision_in_plain_words_above_the_fold(
        browser: chromium.Browser, tmp_path: Path, name: str, words: str, tone: str) -> None:
    result, page = _render(browser, name, tmp_path)
    assert page["tag"] == "H1" and page["text"].startswith(words), page["text"]
    assert tone in page["classes"] and page["background"] not in ("rgba(0, 0, 0, 0)", "transparent")
    assert page["visible"] == "visible" and page["display"] != "none" and page["hitInside"]
    assert 0 <= page["top"] < page["bottom"] <= page["fold"] == 800  # whole, above the fold at 1280x800
    assert page["width"] == 1280
    if result["rule"] == "win2-v1" and result["decision"] != "INCONCLUSIVE":
        primary = result["cells"]["short-b1"]["metrics"]["pooled_rate_tps"]
        assert f"[{primary['low']:+.2%}, {primary['high']:+.2%}]" in page["text"]  # why, in the heading


def test_rendered_primary_plot_holds_its_interval_and_bar_on_a_fitted_scale(browser: chromium.Browser,
                                                                           tmp_path: Path) -> None:
    result, page = _render(browser, "win2_win", tmp_path)
    bar = result["params"]["bar"] * 100
    assert len(page["figures"]) == len(result["cells"])
    for cell, figure in zip(result["cells"], page["figures"], strict=True):
        m = result["cells"][cell]["metrics"]["pooled_rate_tps"]
        low, high = m["low"] * 100, m["high"] * 100
        ticks = [_number(t) for t in figure["ticks"]]
        assert len(ticks) >= 3 and figure["width"] > 300, figure
        assert min(ticks) <= min(low, -bar) and max(ticks) >= max(high, bar), (cell, ticks, low, high, bar)
        span = max(ticks) - min(ticks)
        assert span <= 1.5 * (max(high, bar) - min(low, -bar))  # scaled to them, not stretched by other metrics
        assert cell in figure["caption"]
