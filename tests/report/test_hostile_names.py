"""Input markup reaches a report as text: report.md escapes it, plots draw every name literally.

The attack: ``tally verdict report`` copied an input's ``<script>`` raw into report.md, and a
cell named ``$\\foo{x$`` crashed it with a matplotlib traceback (exit 1). Here every text
field of a rule's input that reaches a report (cell, family and context names, excluded
waves, smoke failures, failures, incomplete conditions, the title) carries hostile markup;
report.md is rendered by a CommonMark parser (markdown-it, with tables) and must hold no
HTML, link, code or emphasis that tally did not write, while showing every value
literally; report.html escapes; each figure draws the names as they are.
"""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from cli.app import app
from runner.report.document import Bullets, Document, Figure, Para, Section, Table
from runner.report.markdown import render_markdown

from .cases import CASES

HOSTILE = [
    "<script>alert(1)</script>",
    "$\\foo{x$",
    "[click](javascript:alert(1))",
    "![pixel](http://evil.example/p.png)",
    "*bold* _em_ `code` ~~gone~~",
    "<img src=x onerror=alert(2)>",
    "&lt;b&gt; &#60;i&#62;",
    "# heading",
    "> quoted",
    "1. listed",
    "    indented code",
    "line\nbreak\n<div>block</div>",
    "pipe | in | cell",
    "back\\slash\\",
    "$x^2$ and $$y$$",
    "<!-- comment --> <?php ?>",
    "[ref]: http://evil.example/",
    "<http://evil.example/autolink>",
]


def _markup(markdown: str) -> tuple[list[str], str]:
    """The markup tokens a CommonMark renderer makes of ``markdown`` (besides text), and all its text."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    kinds: list[str] = []
    texts: list[str] = []

    def walk(items: list[Any]) -> None:
        for token in items:
            if token.type in ("text", "softbreak", "inline"):
                if token.type == "text":
                    texts.append(token.content)
            elif token.type == "image":
                kinds.append(f"image {token.attrs.get('src')}")
                texts.append(token.content)
            else:
                kinds.append(token.type)
            if token.children:
                walk(token.children)

    walk(tokens)
    return kinds, "".join(texts)


ALLOWED = {"heading_open", "heading_close", "paragraph_open", "paragraph_close", "bullet_list_open",
           "bullet_list_close", "list_item_open", "list_item_close", "table_open", "table_close", "thead_open",
           "thead_close", "tbody_open", "tbody_close", "tr_open", "tr_close", "th_open", "th_close", "td_open",
           "td_close", "strong_open", "strong_close", "em_open", "em_close"}


def _assert_no_foreign_markup(markdown: str) -> str:
    kinds, text = _markup(markdown)
    foreign = [k for k in kinds if k not in ALLOWED and not re.fullmatch(r"image plots/[\w.-]+\.svg", k)]
    assert not foreign, foreign
    return text


def test_every_block_kind_escapes_markup() -> None:
    doc = Document(HOSTILE[0], "win2-v1", "WIN", tuple(
        Section(name, (Para(name), Para(name, "note"), Para(name, "decision"), Bullets((name, name)),
                       Table((name, "h"), ((name, name),)), Figure("f", b"<svg/>", name)))
        for name in HOSTILE))
    markdown = render_markdown(doc)
    text = _assert_no_foreign_markup(markdown)
    kinds, _ = _markup(markdown)
    assert kinds.count("strong_open") == len(HOSTILE) and kinds.count("em_open") == 2 * len(HOSTILE)  # tally's own
    for name in HOSTILE:  # each value is shown, as its text (line breaks as spaces; leading blanks dropped)
        shown = " ".join(name.split("\n")).strip()
        assert text.count(shown) >= 8, (name, shown)


def _win2(names: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(CASES["win2_win"][0]())  # the cases share their archive
    cells = {"short-b1": names[0], "32k-b1": names[1]}
    families = {"filings": names[2], "opinions": names[3]}
    data["decision_cells"] = [cells[c] for c in data["decision_cells"]]
    for wave in data["waves"]:
        wave["cell"], wave["family"] = cells[wave["cell"]], families[wave["family"]]
    for entry in data.get("archive", []):
        entry["cell"] = cells[entry["cell"]]
    data["excluded_waves"] = [names[4]]
    data["smoke_failures"] = [names[5]]
    return data


def _pp3(names: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(CASES["pp3_candidate"][0]())
    families = {"f1": names[0], "f2": names[1]}
    contexts = {"short": names[2], "32k": names[3], "150k": names[4]}
    for request in data["requests"]:
        request["family"], request["context"] = families[request["family"]], contexts[request["context"]]
    data["failures"] = [names[5]]
    data["incomplete"] = [names[6]]
    data["smoke_missing"] = [names[7]]
    return data


def _svg_text(path: Path) -> str:
    return "".join(ET.parse(path).getroot().itertext())


@pytest.mark.parametrize(("rule", "build", "shift"), [("win2", _win2, 0), ("win2", _win2, 6), ("pp3", _pp3, 0),
                                                      ("pp3", _pp3, 8)])
def test_verdict_report_with_hostile_names_in_every_text_field(tmp_path: Path, rule: str, build: Any,
                                                               shift: int) -> None:
    names = [n.replace("/", "|") for n in HOSTILE[shift:] + HOSTILE[:shift]]  # pp3 pairs are "family/context"
    source = tmp_path / "input.json"
    source.write_text(json.dumps(build(names)))
    out = tmp_path / "report"
    title = HOSTILE[(shift + 9) % len(HOSTILE)]
    result = CliRunner().invoke(app, ["verdict", "report", str(source), "--out", str(out), "--title", title,
                                      "--json"])
    assert result.exit_code == 0, result.output
    written = json.loads(result.stdout)
    markdown = (out / "report.md").read_text(encoding="utf-8")
    text = _assert_no_foreign_markup(markdown)
    # every value that reaches the report is shown as its text (win2's family names do not reach it)
    used = [names[0], names[1], names[4], names[5]] if rule == "win2" else names[:8]
    missing = [n for n in [*used, title] if " ".join(n.split("\n")).strip() not in text]
    assert not missing, missing
    html = (out / "report.html").read_text(encoding="utf-8")
    for name in used:
        assert "<script>" not in html and "<img src=x" not in html and "<div>" not in html
        if name in (names[0], names[1]):
            assert escape(name) in html or escape(name.replace("\n", " ")) in html
    figures = [Path(p) for p in written["figures"]]
    assert figures and len(set(figures)) == len(figures)
    drawn = "".join(_svg_text(p) for p in figures)
    if rule == "win2":  # each cell's figure is titled with its cell name, drawn literally (mathtext off)
        for cell in names[:2]:
            assert cell.split("\n")[0] in drawn, cell
    else:  # the pairs' tick labels: family/context, literally
        assert f"{names[0]}|{names[2]}".split("\n")[0] in drawn or names[0].split("\n")[0] in drawn


def test_a_cell_named_like_mathtext_is_drawn_literally(tmp_path: Path) -> None:
    names = ["$\\foo{x$", "a$b$c", *HOSTILE[2:6]]
    source = tmp_path / "input.json"
    source.write_text(json.dumps(_win2(names)))
    result = CliRunner().invoke(app, ["verdict", "report", str(source), "--out", str(tmp_path / "r"), "--json"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    figures = json.loads(result.stdout)["figures"]
    drawn = [_svg_text(Path(p)) for p in figures]
    assert any("$\\foo{x$" in d for d in drawn) and any("a$b$c" in d for d in drawn)


@pytest.mark.parametrize("build", [_win2, _pp3])
def test_verdict_compute_prints_names_that_look_like_console_markup(tmp_path: Path, build: Any) -> None:
    names = ["[/x]", "[bold]b[/bold]", "[link=http:||evil.example]l[|link]", "[red",
             *(n.replace("/", "|") for n in HOSTILE[:5])]  # a pp3 family or context has no "/"
    if build is _pp3:
        names[0], names[1] = "[bold]b", "[red on white]r"  # opening tags only: no "/" in a pp3 name
    source = tmp_path / "input.json"
    source.write_text(json.dumps(build(names)))
    result = CliRunner().invoke(app, ["verdict", "compute", str(source)], env={"COLUMNS": "200"})  # names unwrapped
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    if build is _pp3:  # the table's pair labels: family/context
        assert f"{names[0]}/{names[2]}" in result.stdout and f"{names[1]}/{names[3]}" in result.stdout
    else:  # the tables' titles: the cells
        assert f"{names[0]}: " in result.stdout and f"{names[1]}: " in result.stdout
