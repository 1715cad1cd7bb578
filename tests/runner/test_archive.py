"""The control archive: rows keyed by how they were measured; an existing archive file imported."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runner.audit.full import run_audit
from runner.decide.inputs import INPUT_BUILDER, build_input
from runner.plan.parse import parse_plan
from runner.state.archive import ArchiveKey, archive_rows, comparability_key, day_to_day_rows

from .conftest import Site, tally

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FIXED = "a" * 64          # pp4rt-fixed5-greedy's control config
POLICY = "b" * 64         # pp4rt-production-policy's
PROD = "c" * 40


def _row(window: str, cell: str, digest: str, rate: float, **extra: Any) -> dict[str, Any]:
    return {"window": window, "start": "s1", "role": "A", "cell": cell, "max_tokens": 512, "clock_cap_mhz": 2300,
            "control_config_digest": digest, "production_commit": PROD, "figures": {"pooled_rate_tps": rate},
            **extra}


def _event(seq: int, payload: dict[str, Any], type_: str = "archive.control_start") -> Any:
    return SimpleNamespace(seq=seq, type=type_, payload=payload, hash=f"{seq:064x}", stream="archive")


def test_archive_keeps_control_configs_apart() -> None:
    plan = parse_plan(tomllib.loads((EXAMPLES / "seed000-controlled.toml").read_text()))
    cell = next(c.name for c in plan.cells if c.decision)
    control = plan.arm("A").config_digest
    archive = [
        _event(10, {**_row("w-fixed", cell, control, 100.0), "commit": PROD, "plan_sha256": "0" * 64}),
        _event(11, {**_row("w-policy", cell, POLICY, 140.0), "commit": PROD, "plan_sha256": "0" * 64}),
        _event(12, {**_row("w-hot", cell, control, 90.0, dial_back=True, clock_cap_mhz=2000),
                    "commit": PROD, "plan_sha256": "0" * 64}),
        _event(13, {"rows": [_row("old-fixed", cell, control, 101.0)], "plan_sha256": "1" * 64},
               "archive.imported"),
    ]
    rows = archive_rows(archive)
    assert comparability_key(rows[0].payload) != comparability_key(rows[1].payload)   # configs apart
    key = ArchiveKey(cell, control, PROD, 2300, 512)
    assert [r.window for r in day_to_day_rows(rows, key)] == ["w-fixed", "old-fixed"]   # no policy, no dial-back
    snapshot = _event(1, {"window": plan.window_id, "plan_sha256": "0" * 64, "sha256": "d" * 64, "source": "drain",
                          "identity": {"commit": PROD}}, "production.snapshot")
    built = build_input(plan, [snapshot], archive, builder=INPUT_BUILDER)
    assert [(e["window"], e["pooled_rate_tps"]) for e in built.input["archive"]] == [
        ("w-fixed", 100.0), ("old-fixed", 101.0)]
    other = _event(1, {"window": plan.window_id, "plan_sha256": "0" * 64, "sha256": "d" * 64, "source": "drain",
                       "identity": {"commit": "e" * 40}}, "production.snapshot")
    assert build_input(plan, [other], archive, builder=INPUT_BUILDER).input["archive"] == []   # another commit


def _lines(*rows: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_import_a_good_archive_file(site: Site) -> None:
    path = site.path / "control-archive.jsonl"
    path.write_text(_lines(_row("pp4-w1", "pp4rt-fixed5-greedy-short", FIXED, 12125.0),
                           _row("pp4-w1", "pp4rt-production-policy-short", POLICY, 13002.5, dial_back=True)))
    size = site.size()
    done = tally("archive", "import", path, "--json")
    assert done.code == 0, done.err
    out = json.loads(done.out)
    assert out["rows"] == 2 and site.size() == size + 1
    event = next(site.book.events(stream="archive", types=["archive.imported"]))
    assert event.payload["source"]["blob"] == f"sha256:{out['source_sha256']}"
    assert site.book.blob(out["source_sha256"]).data == path.read_bytes()     # the file itself, kept
    listed = json.loads(tally("archive", "list", "--json").out)["rows"]
    assert [(r["cell"], r["control_config_digest"], r["dial_back"]) for r in listed] == [
        ("pp4rt-fixed5-greedy-short", FIXED, False), ("pp4rt-production-policy-short", POLICY, True)]
    text = tally("archive", "list").out
    assert "DIAL-BACK" in text and "pp4rt-fixed5-greedy-short" in text
    again = tally("archive", "import", path)
    assert again.code == 1 and "imported already" in again.err and site.size() == size + 1
    assert run_audit(book=site.book).ok


def test_import_a_bad_archive_file_appends_nothing(site: Site) -> None:
    size = site.size()
    cases = {
        "not-json.jsonl": "{nope\n",
        "bad-rate.jsonl": _lines(_row("w", "c", FIXED, 10.0), _row("w", "c", FIXED, -1.0)),
        "bad-digest.jsonl": _lines(_row("w", "c", "xyz", 10.0)),
        "hostile-name.jsonl": _lines(_row("../../etc", "c", FIXED, 10.0)),
        "extra-field.jsonl": _lines({**_row("w", "c", FIXED, 10.0), "sql": "drop"}),
        "nan.jsonl": '{"window": "w", "start": "s1", "cell": "c", "max_tokens": 5, "figures": {"pooled_rate_tps": NaN}}\n',
        "empty.jsonl": "\n\n",
    }
    for name, text in cases.items():
        path = site.path / name
        path.write_text(text)
        result = tally("archive", "import", path)
        assert result.code == 2, (name, result.err)
        assert result.err.count("\n") == 1 and "Traceback" not in result.err, (name, result.err)
    assert "line 2" in tally("archive", "import", site.path / "bad-rate.jsonl").err
    big = site.path / "big.jsonl"
    big.write_bytes(b" " * (9 << 20))
    assert tally("archive", "import", big).code == 2
    assert site.size() == size
