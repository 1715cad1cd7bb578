"""`tally archive import --map`: an archive operators already have, in its own names, counted as native rows."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runner.audit.full import run_audit
from runner.gates.power import archive_noise, archive_spreads, power_gate, replay_power_gate
from runner.plan.parse import read_plan_file
from runner.plan.register import register_plan

from .conftest import Site, tally
from .script import COMMIT, EXAMPLES

PLAN = EXAMPLES / "seed000-production-policy.toml"
CONTROL = next(a["config_digest"] for a in tomllib.loads(PLAN.read_text())["arms"] if a["role"] == "P")
SEED_CELLS = {"pp4rt-production-policy-short": "short-b1", "pp4rt-production-policy-32k": "32k-b1"}
OTHER_CELL = "pp4rt-fixed5-greedy-short"   # another control configuration: never this plan's cells

MAPPING = f"""\
# seed 000's control-archive.jsonl, in tally's names
[fields]
window = "window_id"
start = "start"
clock_cap_mhz = "clock_mhz"
figures.pooled_rate_tps = "tok_s"
per_repeat.pooled_rate_tps = "repeat_tok_s"

[cells.pp4rt-production-policy-short]
cell = "short-b1"
max_tokens = 512
role = "P"
control_config_digest = "{CONTROL}"

[cells.pp4rt-production-policy-32k]
cell = "32k-b1"
max_tokens = 512
role = "P"
control_config_digest = "{CONTROL}"
"""


def _register(site: Site, window: str = "w") -> Any:
    source = tomllib.loads(PLAN.read_text())
    overrides: dict[str, Any] = {
        "commit": COMMIT, "window_id": window,
        "power": {"effect": 0.03, "min_power": 0.8, "windows": 2000, "seed": 7, "min_windows": 2},
        "gates": {"required": [*source["gates"]["required"], "power"]}}
    loaded = read_plan_file(PLAN, overrides=overrides)
    register_plan(site.book, site.signer, loaded)
    return loaded.plan


def _seed_rows(windows: int, *, cells: tuple[str, ...] = tuple(SEED_CELLS), seed: int = 0) -> list[dict[str, Any]]:
    """Rows as seed 000's runner appends them: its own field names, per-repeat rates of each control start."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(windows):
        for cell in cells:
            level = rng.normal(0, 0.05, 3)
            for start in ("s1", "s3"):
                offset = rng.normal(0, 0.004)
                rates = [round(100.0 * math.exp(level[r] + offset + rng.normal(0, 0.01)), 4) for r in range(3)]
                rows.append({"window_id": f"PP4-v2-prodpolicy-W-202611{w + 1:02d}T0412Z", "start": start,
                             "cell": cell, "clock_mhz": 2300, "tok_s": round(sum(rates) / 3, 4),
                             "repeat_tok_s": rates, "accepted_per_round": 2.9, "note": "seed-format"})
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_seed_format_archive_with_a_mapping_counts_for_the_power_gate(site: Site) -> None:
    plan = _register(site)
    archive = _write(site.path / "control-archive.jsonl", _seed_rows(6))
    mapping = site.path / "archive-map.toml"
    mapping.write_text(MAPPING)
    before = archive_spreads(site.book, plan)
    assert before.entries == {"short-b1": 0, "32k-b1": 0}

    done = tally("archive", "import", archive, "--map", mapping, "--for", "w", "--json")
    assert done.code == 0, done.err
    out = json.loads(done.out)
    assert out["rows"] == 24 and out["cells"] == {"short-b1": 12, "32k-b1": 12}
    event = next(site.book.events(stream="archive", types=["archive.imported"]))
    assert site.book.blob(event.payload["mapping"]["blob"].removeprefix("sha256:")).data == mapping.read_bytes()
    assert event.payload["mapped_cells"] == SEED_CELLS
    row = event.payload["rows"][0]
    assert row["cell"] == "short-b1" and row["control_config_digest"] == CONTROL and row["max_tokens"] == 512
    assert row["window"] == "PP4-v2-prodpolicy-W-20261101T0412Z" and len(row["per_repeat"]["pooled_rate_tps"]) == 3
    assert "note" not in row and "accepted_per_round" not in row["figures"]   # unmapped fields left out

    after = archive_spreads(site.book, plan)   # the imported rows count as native control starts do
    assert after.entries == {"short-b1": 12, "32k-b1": 12} and after.windows == {"short-b1": 6, "32k-b1": 6}
    spread = after.spreads["short-b1"]
    assert spread is not None and 0.0 < spread.repeat_sd < 0.05
    noise = archive_noise(site.book, plan)
    assert noise.windows == {"short-b1": 6, "32k-b1": 6} and noise.noise is not None

    power = tally("window", "power", "w", "--json")
    assert power.code in (0, 1), power.err
    assert json.loads(power.out)["figures"]["entries"] == 12   # per cell, as for native entries
    gate = power_gate(site.book, site.signer, "w")
    assert gate.evidence["archive"]["windows"] == {"short-b1": 6, "32k-b1": 6}
    assert replay_power_gate(site.book, gate.record.event) == []   # the gate replays from the ledger
    assert run_audit(book=site.book).ok


def test_without_the_mapping_the_refusal_names_the_unmatched_cells(site: Site) -> None:
    _register(site)
    size = site.size()
    # tally's row format, the seed's cell names: the rows would never count for this plan
    rows = [{"window": "old-1", "start": s, "cell": cell, "max_tokens": 512, "control_config_digest": CONTROL,
             "figures": {"pooled_rate_tps": 100.0}} for cell in (*SEED_CELLS, OTHER_CELL) for s in ("s1", "s3")]
    named = _write(site.path / "named.jsonl", rows)
    refused = tally("archive", "import", named, "--for", "w")
    assert refused.code == 2 and refused.err.count("\n") == 1, refused.err
    for cell in (*SEED_CELLS, OTHER_CELL):
        assert f"{cell} (2 rows)" in refused.err
    assert "short-b1" in refused.err and "--map MAPPING.toml" in refused.err
    # the seed's own field names, without a mapping: the first unknown field, naming the line
    seed = _write(site.path / "seed.jsonl", _seed_rows(1))
    plain = tally("archive", "import", seed)
    assert plain.code == 2 and "line 1" in plain.err and "unknown field" in plain.err
    assert site.size() == size


def test_a_source_cell_the_mapping_lacks_refuses_the_file_naming_every_one(site: Site) -> None:
    _register(site)
    size = site.size()
    archive = _write(site.path / "control-archive.jsonl",
                     _seed_rows(2, cells=(*SEED_CELLS, OTHER_CELL, "pp4rt-fixed5-greedy-32k")))
    mapping = site.path / "archive-map.toml"
    mapping.write_text(MAPPING)
    refused = tally("archive", "import", archive, "--map", mapping)
    assert refused.code == 2 and refused.err.count("\n") == 1, refused.err
    assert f"{OTHER_CELL} (4 rows)" in refused.err and "pp4rt-fixed5-greedy-32k (4 rows)" in refused.err
    assert site.size() == size


@pytest.mark.parametrize(("text", "says"), [
    ("[fields]\nwindow = 'w'\nstart = 's'\n", "[cells]"),
    ("[fields]\nstart = 's'\n[cells.a]\ncell = 'x'\n", "window"),
    ("[fields]\nwindow = 'w'\nstart = 's'\nsql = 'drop'\n[cells.a]\ncell = 'x'\n", "fields.sql"),
    ("[fields]\nwindow = 'w'\nstart = 's'\n[cells.a]\nmax_tokens = 5\n", "cells.a.cell"),
    ("[fields]\nwindow = 'w'\nstart = 's'\n[cells.a]\ncell = 'x'\nper_repeat.pooled_rate_tps = [1]\n", "per-repeat"),
    ("[fields]\nwindow = 'w'\nstart = '../../etc passwd'\n[cells.a]\ncell = 'x'\n", "fields.start"),
    ("[fields\n", "not TOML"),
    ("\udcff", "mapping"),
])
def test_a_bad_mapping_is_one_line_and_nothing_appended(site: Site, text: str, says: str) -> None:
    archive = _write(site.path / "control-archive.jsonl", _seed_rows(1))
    mapping = site.path / "bad-map.toml"
    mapping.write_bytes(text.encode("utf-8", "surrogateescape"))
    size = site.size()
    refused = tally("archive", "import", archive, "--map", mapping)
    assert refused.code == 2 and refused.err.count("\n") == 1 and "Traceback" not in refused.err, refused.err
    assert says in refused.err
    assert site.size() == size


def test_a_mapped_field_missing_from_a_row_names_the_line(site: Site) -> None:
    rows = _seed_rows(1)
    del rows[2]["clock_mhz"]
    archive = _write(site.path / "control-archive.jsonl", rows)
    mapping = site.path / "archive-map.toml"
    mapping.write_text(MAPPING)
    refused = tally("archive", "import", archive, "--map", mapping)
    assert refused.code == 2 and "line 3" in refused.err and "clock_cap_mhz" in refused.err


def test_imported_rows_without_per_repeat_values_leave_the_power_gate_as_it_was(site: Site) -> None:
    """Rows with one figure per start (every import before per_repeat) cannot show a repeat-to-repeat
    spread: the gate counts them nowhere, so gates recorded before replay as recorded."""
    plan = _register(site)
    rows = [{"window": f"old-{w}", "start": s, "role": "P", "cell": "short-b1", "max_tokens": 512,
             "clock_cap_mhz": 2300, "control_config_digest": CONTROL, "figures": {"pooled_rate_tps": 100.0 + w}}
            for w in range(6) for s in ("s1", "s3")]
    assert tally("archive", "import", _write(site.path / "flat.jsonl", rows)).code == 0
    spreads = archive_spreads(site.book, plan)
    assert spreads.entries == {"short-b1": 0, "32k-b1": 0} and spreads.used == ()
