"""Window kinds (seed 000): admission and pair-only windows never chain; their ending is restore + watch."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ledger.errors import FieldError
from runner.audit.full import run_audit
from runner.plan.model import plan_sha256
from runner.plan.parse import parse_plan
from runner.plan.register import registered_plan

from .worlds import close, gate_all, run, state, window, world

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _plan(**changes: object) -> dict[str, object]:
    data = tomllib.loads((EXAMPLES / "seed000-production-policy.toml").read_text())
    data.update(changes)
    return data


@pytest.mark.parametrize(("kind", "chain"), [("admission", "chained"), ("admission", "last"),
                                             ("pair-only", "chained"), ("pair-only", "last")])
def test_an_admission_or_pair_only_window_declaring_chain_is_refused_at_registration(kind: str, chain: str) -> None:
    with pytest.raises(FieldError) as refused:
        parse_plan(_plan(kind=kind, chain=chain))
    assert refused.value.path == "plan.chain" and "never chains" in str(refused.value) and kind in str(refused.value)


def test_the_cli_refuses_it_in_one_line_and_appends_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    assert runner.invoke(app, ["init"]).exit_code == 0
    text = (EXAMPLES / "seed000-production-policy.toml").read_text()
    plan = tmp_path / "plan.toml"
    assert 'chain = "chained"' in text
    plan.write_text('kind = "admission"\n' + text)
    (tmp_path / "families").mkdir()
    for name in ("opinions.jsonl", "filings.jsonl"):   # the plan's family files, beside it
        (tmp_path / "families" / name).write_bytes((EXAMPLES / "families" / name).read_bytes())
    result = runner.invoke(app, ["window", "register", str(plan)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "plan.chain" in result.stderr and "never chains" in result.stderr
    log = runner.invoke(app, ["log"])
    assert "window.registered" not in log.stdout


def test_a_plan_without_kind_keeps_its_digest_and_a_measurement_window_may_chain() -> None:
    plain = parse_plan(_plan())
    assert "kind" not in plain.to_json() and plain.window_kind == "measurement" and plain.chain == "chained"
    measurement = parse_plan(_plan(kind="measurement", chain="chained"))
    assert measurement.window_kind == "measurement" and measurement.chain == "chained"
    admission = parse_plan(_plan(kind="admission", chain="none")).to_json()
    assert admission["kind"] == "admission"   # registered when given
    assert plan_sha256(admission) != plan_sha256(parse_plan(_plan(chain="none")).to_json())   # registered when given
    assert plan_sha256(parse_plan(plain.to_json()).to_json()) == plan_sha256(plain.to_json())
    with pytest.raises(FieldError):
        parse_plan(_plan(kind="rehearsal"))


def test_an_admission_window_ends_with_restore_and_watch(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "adm-1", chain="none", kind="admission")])
    try:
        gate_all(w)
        result = run(w, "adm-1")
        assert result.ending == "restored" and not result.blocked
        assert registered_plan(w.book, "adm-1").plan.window_kind == "admission"
        ws = state(w.book).windows["adm-1"]
        assert ws.restore is not None and ws.restore.status == "ok" and ws.watch is not None and ws.watch.verdict == "PASS"
        assert run_audit(book=w.book).ok
    finally:
        close(w)
