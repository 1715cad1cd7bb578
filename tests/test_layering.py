"""One-way layering: cli -> runner -> ledger. The ledger never imports runner or cli."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {"ledger": {"runner", "cli"}, "runner": {"cli"}}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_import_direction() -> None:
    offenders = []
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((REPO / package).rglob("*.py")):
            bad = imported_packages(path) & forbidden
            if bad:
                offenders.append(f"{path.relative_to(REPO)} imports {sorted(bad)}")
    assert offenders == []


def test_no_update_or_delete_of_events_outside_migrations() -> None:
    offenders = []
    for package in ("ledger", "runner", "cli"):
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text().lower()
            for needle in ("update events", "delete from events", "_events.update(", "_events.delete("):
                if needle in text and path.name != "ledger_tour.py":
                    offenders.append(f"{path.relative_to(REPO)}: {needle}")
    assert offenders == []
