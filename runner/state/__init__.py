"""State by replay: the pure fold of events into what the runner acts on, and its ledger edge.

::

    from runner.state import replay

    state = replay(ledger)                 # every event folded (no I/O in the fold, no clock)
    state = replay(ledger, state)          # only the events appended since
    state.windows["w1"].phase, state.marker, state.hold

- ``fold``: ``fold(state, events) -> state``, ``admission_blockers``;
- ``replay``: ``replay(ledger[, state])``, the fold over a ledger's (new) events;
- ``archive``: the control archive's rows and their comparability key;
- ``archive_map``: how an existing archive's cells and fields become tally's (``archive import --map``);
- ``touched``: may a window have changed the hosts (so that its ending must restore)?
"""

from __future__ import annotations

from .archive import (
    ARCHIVE_TYPES,
    MAX_IMPORT_ROWS,
    ArchiveKey,
    ArchiveRow,
    archive_rows,
    comparability_key,
    day_to_day_rows,
    production_commit,
    validate_import_row,
)
from .archive_map import IMPORT_ROW_FIELDS, ArchiveMapping, UnmappedCell, parse_archive_mapping
from .fold import ENGINE_REPORTS, State, WaveKeys, WindowState, admission_blockers, fold, typed_payload
from .replay import replay
from .touched import touched

__all__ = [
    "ARCHIVE_TYPES",
    "ENGINE_REPORTS",
    "IMPORT_ROW_FIELDS",
    "MAX_IMPORT_ROWS",
    "ArchiveKey",
    "ArchiveMapping",
    "ArchiveRow",
    "State",
    "UnmappedCell",
    "WaveKeys",
    "WindowState",
    "admission_blockers",
    "archive_rows",
    "comparability_key",
    "day_to_day_rows",
    "fold",
    "parse_archive_mapping",
    "production_commit",
    "replay",
    "touched",
    "typed_payload",
    "validate_import_row",
]
