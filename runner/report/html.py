"""Render a report document as one self-contained HTML page (inline CSS, SVG figures as data URIs)."""

from __future__ import annotations

import base64
import re
from html import escape

from .document import Bullets, Document, Figure, Para, Section, Table

__all__ = ["render_html"]

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
h1.headline { font-size: 1.6em; margin: .2em 0 .3em; padding: .45em .7em; border-radius: 6px; border-left: 10px solid; }
h1.promote { background: #dafbe1; border-color: #1a7f37; color: #0f5323; }
h1.keep { background: #fff1d6; border-color: #bc4c00; color: #7a2e00; }
h1.none { background: #eaeef2; border-color: #57606a; color: #24292f; }
.subtitle { color: #555; margin: 0 0 .6em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .85em; }
caption { text-align: left; font-weight: bold; padding: .2em 0; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
table.reported { color: #555; border-style: dashed; } table.reported th { background: #fafafa; font-style: italic; }
.decision { font-size: 1.1em; font-weight: bold; padding: .3em .6em; display: inline-block; border-radius: 4px; }
.WIN, .CANDIDATE { background: #d9f2d9; } .LOSS, .REJECT { background: #f8d7d7; }
.NO_CHANGE, .NO_PROMOTION, .INCONCLUSIVE { background: #eee; }
.ending { font-weight: bold; }
.power { border: 2px solid #0969da; background: #f0f6ff; color: #0a3069; padding: .4em .7em; border-radius: 4px;
         display: inline-block; }
.note { color: #555; font-size: .9em; }
figure { margin: 1em 0; } figure img, figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .85em; }
"""

_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|xlink:href="#|href="#)([^)"]+)')


def _inline_svg(figure: Figure) -> str:
    """The figure's SVG inside the page, its ids prefixed with the figure's name so that no two figures' ids meet."""
    text = figure.svg.decode("utf-8")
    text = text[text.index("<svg"):]  # no XML declaration or DOCTYPE inside HTML
    prefix = escape(figure.name)
    text = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    return _REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)


def _figure_src(figure: Figure) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(figure.svg).decode("ascii")


def _block(block: object, decision: str) -> str:
    if isinstance(block, Para):
        if block.kind == "decision":
            return f'<p class="decision {escape(decision)}" id="decision">{escape(block.text)}</p>'
        css = f' class="{block.kind}"' if block.kind in ("note", "power", "ending") else ""
        return f"<p{css}>{escape(block.text)}</p>"
    if isinstance(block, Bullets):
        items = "".join(f"<li>{escape(item)}</li>" for item in block.items)
        return f'<ul class="reasons">{items}</ul>'
    if isinstance(block, Table):
        head = "".join(f"<th>{escape(h)}</th>" for h in block.header)
        rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in block.rows)
        caption = f"<caption>{escape(block.caption)}</caption>" if block.caption else ""
        css = ' class="reported"' if block.caption.startswith("Reported only") else ""
        return f"<table{css}>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(block, Figure) and block.inline:
        return (f'<figure id="{escape(block.name)}" class="inline">{_inline_svg(block)}'
                f"<figcaption>{escape(block.caption)}</figcaption></figure>")
    if isinstance(block, Figure):
        return (f'<figure id="{escape(block.name)}"><img alt="{escape(block.caption)}" src="{_figure_src(block)}">'
                f"<figcaption>{escape(block.caption)}</figcaption></figure>")
    raise TypeError(f"unknown block {block!r}")


def _section(section: Section, decision: str) -> str:
    return f"<section><h2>{escape(section.title)}</h2>" + "".join(_block(b, decision) for b in section.blocks) + \
        "</section>"


def render_html(doc: Document) -> str:
    body = "\n".join(_section(s, doc.decision) for s in doc.sections)
    if doc.headline:  # the decision in plain words is the first heading; the title under it
        top = (f'<h1 class="headline {doc.tone or "none"}" id="headline">{escape(doc.headline)}</h1>'
               f'<p class="subtitle">{escape(doc.title)}</p>')
    else:
        top = f"<h1>{escape(doc.title)}</h1>"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(doc.title)}</title><style>{_CSS}</style></head>\n"
            f"<body>{top}\n{body}\n</body></html>\n")
