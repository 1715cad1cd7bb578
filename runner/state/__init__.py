"""State by replay: the pure fold of events into what the runner acts on, and its ledger edge.

::

    from runner.state import replay

    state = replay(ledger)                 # every event folded (no I/O in the fold, no clock)
    state = replay(ledger, state)          # only the events appended since
    state.windows["w1"].phase, state.marker, state.hold

- ``fold``: ``fold(state, events) -> state``, ``Folding`` (events fed one at a time),
  ``admission_blockers``;
- ``window``: the state's frozen values (``WindowState`` and its parts: gates, starts,
  host actions, the engine, the decision, the clock; the HOLD, the marker, placeholders);
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
from .causes import ending_causes
from .fold import Folding, State, TypedPayload, WaveKeys, admission_blockers, fold, typed_payload
from .replay import replay
from .touched import touched
from .window import (
    ENGINE_REPORTS,
    BudgetEntry,
    ChainAbort,
    Clock,
    DecisionView,
    EngineView,
    FinishedAction,
    GateView,
    Hold,
    Interruption,
    JSONValue,
    Marker,
    MeasurementEnd,
    OpenAction,
    PlaceholderUp,
    Priming,
    RestoreView,
    StartView,
    ThermalEntry,
    Warmup,
    WatchView,
    WindowState,
)

__all__ = [
    "ARCHIVE_TYPES",
    "ENGINE_REPORTS",
    "IMPORT_ROW_FIELDS",
    "MAX_IMPORT_ROWS",
    "ArchiveKey",
    "ArchiveMapping",
    "ArchiveRow",
    "BudgetEntry",
    "ChainAbort",
    "Clock",
    "DecisionView",
    "EngineView",
    "FinishedAction",
    "Folding",
    "GateView",
    "Hold",
    "Interruption",
    "JSONValue",
    "Marker",
    "MeasurementEnd",
    "OpenAction",
    "PlaceholderUp",
    "Priming",
    "RestoreView",
    "StartView",
    "State",
    "ThermalEntry",
    "TypedPayload",
    "UnmappedCell",
    "Warmup",
    "WatchView",
    "WaveKeys",
    "WindowState",
    "admission_blockers",
    "archive_rows",
    "comparability_key",
    "day_to_day_rows",
    "ending_causes",
    "fold",
    "parse_archive_mapping",
    "production_commit",
    "replay",
    "touched",
    "typed_payload",
    "validate_import_row",
]
