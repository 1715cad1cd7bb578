"""A neutral report document: sections of paragraphs, bullet lists, tables and figures.

``sections.py`` builds it from a rule's input and result; ``html.py`` and ``markdown.py``
render it, so both files always say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Block", "Bullets", "Document", "Figure", "Para", "Section", "Table", "Tone"]


@dataclass(frozen=True)
class Para:
    text: str
    kind: Literal["text", "note", "decision", "power", "ending"] = "text"


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    """An SVG image; ``name`` is its file stem (``plots/<name>.svg`` beside report.md)."""

    name: str
    svg: bytes
    caption: str
    inline: bool = False  # drawn inside the HTML page (its text readable there), not as an image


Block = Para | Bullets | Table | Figure


@dataclass(frozen=True)
class Section:
    title: str
    blocks: tuple[Block, ...]


Tone = Literal["promote", "keep", "none", ""]


@dataclass(frozen=True)
class Document:
    """``headline``: the decision in plain words (the page's first heading, coloured by ``tone``: promote,
    keep production, or no decision); empty: the title is the first heading."""

    title: str
    rule: str
    decision: str
    sections: tuple[Section, ...] = field(default=())
    headline: str = ""
    tone: Tone = ""

    def figures(self) -> list[Figure]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Figure)]
