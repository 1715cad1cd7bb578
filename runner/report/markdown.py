"""Render a report document as Markdown; figures are linked as ``plots/<name>.svg`` beside the file."""

from __future__ import annotations

from .document import Bullets, Document, Figure, Para, Table

__all__ = ["figure_path", "render_markdown"]


def figure_path(figure: Figure) -> str:
    return f"plots/{figure.name}.svg"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _block(block: object) -> str:
    if isinstance(block, Para):
        if block.kind == "decision":
            return f"**{block.text}**"
        return f"_{block.text}_" if block.kind == "note" else block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Table):
        lines = ["| " + " | ".join(_cell(h) for h in block.header) + " |",
                 "|" + "---|" * len(block.header)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows]
        return "\n".join(lines)
    if isinstance(block, Figure):
        return f"![{_cell(block.caption)}]({figure_path(block)})\n\n_{block.caption}_"
    raise TypeError(f"unknown block {block!r}")


def render_markdown(doc: Document) -> str:
    parts = [f"# {doc.title}"]
    for section in doc.sections:
        parts.append(f"## {section.title}")
        parts.extend(_block(b) for b in section.blocks)
    return "\n\n".join(parts) + "\n"
