"""How an existing archive's rows become tally's: the mapping of ``tally archive import --map``.

An operator's ``control-archive.jsonl`` names its cells and fields its own way (seed 000's
runner writes ``pp4rt-production-policy-short`` rows with its own field names); a plan's
cells are named otherwise (``short-b1``). A mapping file says, once, how one becomes the
other, and the import applies it to every row before checking the row as any imported row
is checked (:func:`runner.state.archive.validate_import_row`)::

    # archive-map.toml
    [fields]                       # tally's field = the source row's field ("a.b": nested)
    window = "window_id"
    start = "start"
    clock_cap_mhz = "clock_mhz"
    figures.pooled_rate_tps = "tok_s"   # figures: the start's rate, and any other
    per_repeat.pooled_rate_tps = "repeat_tok_s"   # its rate per repeat: what the spread compares

    [cells.pp4rt-production-policy-short]   # one table per source cell
    cell = "short-b1"              # the plan's cell its rows count for
    max_tokens = 512               # constants for what the source rows do not carry
    control_config_digest = "cf3875b0..."

A row whose cell has no table refuses the whole file (the refusal names every such cell);
a field the mapping does not name is left out (the source file is kept whole as a blob);
a mapped field missing from a row refuses the file, naming the line. Pure: a parsed TOML
document and JSON rows in, rows out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledger.errors import FormatError

__all__ = ["IMPORT_ROW_FIELDS", "ArchiveMapping", "UnmappedCell", "parse_archive_mapping"]

IMPORT_ROW_FIELDS = ("window", "start", "role", "cell", "max_tokens", "clock_cap_mhz", "control_config_digest",
              "production_commit", "commit", "dial_back", "nominal_clock_cap_mhz")
"""The fields of an imported row (besides ``figures.<name>``) a mapping may fill."""

_CELL_CONSTANTS = tuple(f for f in IMPORT_ROW_FIELDS if f not in ("window", "start"))
_FIGURE = re.compile(r"figures\.[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
                     r"|per_repeat\.(pooled_rate_tps|accepted_per_round|decode_tps)")
_NESTED = ("figures", "per_repeat")
_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}(\.[A-Za-z0-9_][A-Za-z0-9_-]{0,99}){0,7}")
_MAX_CELLS = 1000


@dataclass(frozen=True)
class ArchiveMapping:
    """A parsed mapping: where each tally field is read in a source row, and each source cell's constants."""

    fields: Mapping[str, str]                   # tally field (or figures.X) -> dotted path in the source row
    cells: Mapping[str, Mapping[str, Any]]      # source cell -> {"cell": plan cell, constants...}
    source_cell: str = "cell"                   # the source row's field that names its cell

    def apply(self, row: Any, line: int) -> dict[str, Any]:
        """One source row as an import row (not yet checked: the import checks it next)."""
        if not isinstance(row, Mapping):
            raise FormatError(f"control archive line {line}: must be a JSON object")
        name = _lookup(row, self.source_cell)
        if not isinstance(name, str):
            raise FormatError(f"control archive line {line}: {self.source_cell} (the source cell) must be a "
                              f"string, got {str(name)[:80]!r}")
        cell = self.cells.get(name)
        if cell is None:
            raise UnmappedCell(name)
        out: dict[str, Any] = {}
        figures: dict[str, Any] = {}
        per_repeat: dict[str, Any] = {}
        for field, path in self.fields.items():
            value = _lookup(row, path)
            if value is _MISSING:
                if field in cell:
                    continue          # the cell's constant stands in for it
                raise FormatError(f"control archive line {line}: the mapping reads {field} from {path!r}, "
                                  f"which the row does not have")
            if field.startswith("figures."):
                figures[field.removeprefix("figures.")] = value
            elif field.startswith("per_repeat."):
                per_repeat[field.removeprefix("per_repeat.")] = value
            else:
                out[field] = value
        for field, value in cell.items():
            if field.startswith("figures."):
                figures.setdefault(field.removeprefix("figures."), value)
            else:
                out.setdefault(field, value)
        out["cell"] = cell["cell"]
        out["figures"] = figures
        if per_repeat:
            out["per_repeat"] = per_repeat
        return out

    def to_json(self) -> dict[str, Any]:
        return {"fields": dict(self.fields), "cells": {k: dict(v) for k, v in self.cells.items()},
                "source_cell": self.source_cell}


class UnmappedCell(FormatError):
    """A source row whose cell the mapping has no table for (the import collects them all)."""

    def __init__(self, cell: str) -> None:
        super().__init__(f"source cell {cell[:100]!r} is not in the mapping")
        self.cell = cell


_MISSING: Any = object()


def _lookup(row: Mapping[str, Any], path: str) -> Any:
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _flat_figures(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``figures.x = ...`` (TOML's dotted key: a nested ``figures`` table) as the key ``figures.x``; the same
    for ``per_repeat.x``."""
    flat = {k: v for k, v in table.items() if k not in _NESTED}
    for nested in _NESTED:
        inner = table.get(nested)
        if inner is not None:
            if not isinstance(inner, Mapping):
                raise FormatError(f"{where}.{nested} must be a table ({nested}.<name> = ...)")
            flat.update({f"{nested}.{name}": value for name, value in inner.items()})
    return flat


def parse_archive_mapping(doc: Mapping[str, Any], where: str) -> ArchiveMapping:
    """Check a mapping document (parsed TOML); ``FormatError`` naming the key otherwise."""
    unknown = sorted(set(doc) - {"fields", "cells", "source_cell"})
    if unknown:
        raise FormatError(f"{where}: unknown table or key {unknown[0][:80]!r} (known: fields, cells, source_cell)")
    source_cell = doc.get("source_cell", "cell")
    if not isinstance(source_cell, str) or not _PATH.fullmatch(source_cell):
        raise FormatError(f"{where}: source_cell must be a field name of the source rows")
    fields_doc = doc.get("fields", {})
    if not isinstance(fields_doc, Mapping):
        raise FormatError(f"{where}: [fields] must be a table")
    fields: dict[str, str] = {}
    for field, path in _flat_figures(fields_doc, f"{where}: fields").items():
        if field == "cell":
            raise FormatError(f"{where}: fields.cell: a row's cell comes from [cells] (source_cell names the "
                              f"source field)")
        if field not in IMPORT_ROW_FIELDS and not _FIGURE.fullmatch(field):
            raise FormatError(f"{where}: fields.{str(field)[:80]}: not a row field (known: "
                              f"{', '.join(f for f in IMPORT_ROW_FIELDS if f != 'cell')}, figures.<name>)")
        if not isinstance(path, str) or not _PATH.fullmatch(path):
            raise FormatError(f"{where}: fields.{field} must be a source field name (dotted for nesting)")
        fields[field] = path
    for needed in ("window", "start"):
        if needed not in fields:
            raise FormatError(f"{where}: [fields] must say where each row's {needed} is read")
    cells_doc = doc.get("cells")
    if not isinstance(cells_doc, Mapping) or not cells_doc:
        raise FormatError(f"{where}: [cells] must map at least one source cell")
    if len(cells_doc) > _MAX_CELLS:
        raise FormatError(f"{where}: at most {_MAX_CELLS} cells")
    cells: dict[str, dict[str, Any]] = {}
    for name, table in cells_doc.items():
        if not isinstance(table, Mapping):
            raise FormatError(f"{where}: cells.{str(name)[:80]} must be a table")
        if not isinstance(table.get("cell"), str):
            raise FormatError(f"{where}: cells.{str(name)[:80]}.cell must name the plan's cell")
        table = _flat_figures(table, f"{where}: cells.{str(name)[:80]}")
        for key, value in table.items():
            if key.startswith("per_repeat."):
                raise FormatError(f"{where}: cells.{str(name)[:80]}.{key}: per-repeat values are read from the "
                                  f"rows ([fields]), not set per cell")
            if key not in _CELL_CONSTANTS and not _FIGURE.fullmatch(key):
                raise FormatError(f"{where}: cells.{str(name)[:80]}.{str(key)[:80]}: not a row field "
                                  f"(known: {', '.join(_CELL_CONSTANTS)}, figures.<name>)")
            if isinstance(value, Mapping | list):
                raise FormatError(f"{where}: cells.{str(name)[:80]}.{key} must be a value, not a table or list")
        cells[str(name)] = dict(table)
    return ArchiveMapping(fields, cells, source_cell)
