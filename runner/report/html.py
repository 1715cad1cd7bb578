"""Render a report document as one self-contained HTML page (inline CSS, SVG figures as data URIs)."""

from __future__ import annotations

import base64
from html import escape

from .document import Bullets, Document, Figure, Para, Section, Table

__all__ = ["render_html"]

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .85em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.decision { font-size: 1.4em; font-weight: bold; padding: .4em .7em; display: inline-block; border-radius: 4px; }
.WIN, .CANDIDATE { background: #d9f2d9; } .LOSS, .REJECT { background: #f8d7d7; }
.NO_CHANGE, .NO_PROMOTION, .INCONCLUSIVE { background: #eee; }
.note { color: #555; font-size: .9em; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; } figcaption { color: #555; font-size: .85em; }
"""


def _figure_src(figure: Figure) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(figure.svg).decode("ascii")


def _block(block: object, decision: str) -> str:
    if isinstance(block, Para):
        if block.kind == "decision":
            return f'<p class="decision {escape(decision)}" id="decision">{escape(block.text)}</p>'
        css = ' class="note"' if block.kind == "note" else ""
        return f"<p{css}>{escape(block.text)}</p>"
    if isinstance(block, Bullets):
        items = "".join(f"<li>{escape(item)}</li>" for item in block.items)
        return f'<ul class="reasons">{items}</ul>'
    if isinstance(block, Table):
        head = "".join(f"<th>{escape(h)}</th>" for h in block.header)
        rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in block.rows)
        caption = f"<caption>{escape(block.caption)}</caption>" if block.caption else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(block, Figure):
        return (f'<figure id="{escape(block.name)}"><img alt="{escape(block.caption)}" src="{_figure_src(block)}">'
                f"<figcaption>{escape(block.caption)}</figcaption></figure>")
    raise TypeError(f"unknown block {block!r}")


def _section(section: Section, decision: str) -> str:
    return f"<section><h2>{escape(section.title)}</h2>" + "".join(_block(b, decision) for b in section.blocks) + \
        "</section>"


def render_html(doc: Document) -> str:
    body = "\n".join(_section(s, doc.decision) for s in doc.sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(doc.title)}</title><style>{_CSS}</style></head>\n"
            f"<body><h1>{escape(doc.title)}</h1>\n{body}\n</body></html>\n")
