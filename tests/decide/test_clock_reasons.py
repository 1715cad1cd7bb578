"""One clock-cap reason function for both rules: the runs' caps against production's, and dial-backs."""

from __future__ import annotations

from runner.decide.clocks import cap_reasons, dial_back_reasons


def test_runs_at_production_cap_give_no_reason() -> None:
    assert cap_reasons({"s1": 1410, "s2": 1410, "s3": 1410}, 1410, "starts") == []


def test_every_cap_condition_names_its_runs() -> None:
    reasons = cap_reasons({"A1": 1410, "B1": None, "B2": 1200, "A2": 1410}, 1410, "blocks")
    assert reasons == ["clock cap not recorded for B1",
                       "blocks ran at different clock caps: A1 1410 MHz, B2 1200 MHz, A2 1410 MHz",
                       "B2 ran at 1200 MHz; production's configured clock cap is 1410 MHz"]


def test_a_site_without_clocks_only_refuses_a_recorded_cap() -> None:
    assert cap_reasons({"s1": None, "s2": None, "s3": None}, None, "starts") == []
    assert cap_reasons({"s1": None, "s2": 1410, "s3": None}, None, "starts") == [
        "clock cap recorded for s2, but clocks do not apply on this site"]


def test_a_dial_back_is_a_reason() -> None:
    assert dial_back_reasons(0) == []
    assert dial_back_reasons(2) == ["thermal dial-back inside the HOLD (2 event(s))"]
