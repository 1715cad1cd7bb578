"""Render a report document as Markdown; figures are linked as ``plots/<name>.svg`` beside the file.

Every text of the document (titles, paragraphs, reasons, table cells, captions) can carry
the input's own strings (cell, metric, arm, family and gate names, reasons quoting them),
so each is written as *text*, never as markup (:func:`text`):

- a ``<`` that could open a tag, a comment or an autolink (before a letter, ``/``, ``!``
  or ``?``) becomes ``&lt;`` (no raw HTML, no autolink, in any renderer), and an ``&``
  that would begin an entity reference becomes ``&amp;``;
- the characters that open inline markup are backslash-escaped: backslash, backticks,
  ``*``, ``~``, ``$`` (math), an ``_`` that could open or close emphasis (one inside a
  word, ``start_config``, never does: it stays), and a ``]`` followed by ``(`` or ``[``
  (no link or image can form);
- line breaks become spaces, so no text starts a block of its own, and a text that
  begins a line cannot start one: leading blanks are dropped and a heading, quote, list,
  rule or link-definition marker there is escaped.

The rest (``<= 0``, ``>=``, ``[-1.2%, +3.4%]``, ``a & b``) stays as written, readable in the raw file.
"""

from __future__ import annotations

import re

from .document import Bullets, Document, Figure, Para, Table

__all__ = ["figure_path", "render_markdown", "text"]

_ENTITIES = {"&": "&amp;", "<": "&lt;"}
_INLINE = re.compile(r"[\\`*~$]|<(?=[A-Za-z/!?])|&(?=#?[A-Za-z0-9]+;)|\](?=[(\[])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_IN_BRACKETS = re.compile(_INLINE.pattern + r"|[\[\]|]")
_LINE_BREAK = re.compile(r"\r\n|[\r\n\u2028\u2029\x0b\x0c\x85]")
_BLOCK_START = re.compile(r"[#>+=\[-]|\d{1,9}(?=[.)])")  # a heading, quote, list, rule or link definition


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    return _ENTITIES.get(char, "\\" + char)


def text(value: str) -> str:
    """``value`` as literal Markdown text, on one line (see the module)."""
    return _INLINE.sub(_escape, _LINE_BREAK.sub(" ", value))


def _bracketed(value: str) -> str:
    """``value`` as literal text inside tally's own brackets (an image's alt): every bracket and pipe escaped too."""
    return _IN_BRACKETS.sub(_escape, _LINE_BREAK.sub(" ", value))


def _line(value: str) -> str:
    """``value`` as literal text that begins a line: also no block marker at its start.

    Leading blanks are dropped (four would make an indented code block); a marker is
    escaped (``\\#``, ``\\-``; ``1\\.`` for an ordered list's number).
    """
    escaped = text(value).lstrip()
    match = _BLOCK_START.match(escaped)
    if match is None:
        return escaped
    if match.group(0).isdigit():
        return f"{match.group(0)}\\{escaped[match.end():]}"
    return "\\" + escaped


def figure_path(figure: Figure) -> str:
    return f"plots/{figure.name}.svg"


def _cell(value: str) -> str:
    return text(value).replace("|", "\\|")


def _block(block: object) -> str:
    if isinstance(block, Para):
        if block.kind in ("decision", "ending", "power"):  # no blank inside the delimiters, or no emphasis
            return f"**{text(block.text).strip()}**"
        return f"_{text(block.text).strip()}_" if block.kind == "note" else _line(block.text)
    if isinstance(block, Bullets):
        return "\n".join(f"- {_line(item)}" for item in block.items)
    if isinstance(block, Table):
        lines = [f"_{text(block.caption).strip()}_", ""] if block.caption else []
        lines += ["| " + " | ".join(_cell(h) for h in block.header) + " |",
                 "|" + "---|" * len(block.header)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows]
        return "\n".join(lines)
    if isinstance(block, Figure):
        return f"![{_bracketed(block.caption)}]({figure_path(block)})\n\n_{text(block.caption).strip()}_"
    raise TypeError(f"unknown block {block!r}")


def render_markdown(doc: Document) -> str:
    parts = [f"# {text(doc.headline)}", f"_{text(doc.title).strip()}_"] if doc.headline else [f"# {text(doc.title)}"]
    for section in doc.sections:
        parts.append(f"## {text(section.title)}")
        parts.extend(_block(b) for b in section.blocks)
    return "\n\n".join(parts) + "\n"
