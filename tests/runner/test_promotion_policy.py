"""Promotion policies are read as hostile input; every refusal names the member."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ledger.errors import FormatError
from ledger.keys import Signer
from ledger.note import SIG_COSIGNATURE, vkey
from runner.promotion.policy import read_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "promotion" / "pp4-promote-gate-v2.toml"
LOG = vkey("tally.test/log", Signer.generate().public_raw)
WITNESS = vkey("witness.test/w1", Signer.generate().public_raw, SIG_COSIGNATURE)
# (test ids name these keys, not their random bytes: every xdist worker must collect the same ids)


def _policy(trust: str | None = None, edit: tuple[str, str] | None = None) -> bytes:
    text = EXAMPLE.read_text()
    trust = trust if trust is not None else (f'log_vkeys = ["{LOG}"]\nwitness_vkeys = ["{WITNESS}"]\n'
                                             "witness_threshold = 1\n")
    text = re.sub(r"\[trust\]\n(?:(?!\[).*\n)*", "[trust]\n" + trust + "\n", text)
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    return text.encode()


def test_example_policy_is_seed_000s_production_policy_gate() -> None:
    policy = read_policy(_policy(), "policy")
    assert policy.name == "PP4-PROMOTE-GATE-V2" and policy.modes == ("production-policy",)
    assert policy.metric_roles == {"pooled_rate_tps": "primary", "accepted_per_round": "guard", "decode_tps": "guard",
                                   "ms_per_round": "reported", "ttft_s": "reported"}
    assert policy.gates == ("qualification", "rng", "budget", "rehearsal") and len(policy.rng_tests) == 10
    assert policy.witness_threshold == 1 and len(policy.sha256) == 64
    assert policy.looks is not None and policy.looks.to_json() == {"alpha": 0.05, "max_looks": 28,
                                                                   "spending": "bonferroni"}
    assert policy.looks.at(1) == pytest.approx(0.05 / 28) and policy.looks.at(29) == 0.0


def test_example_policy_ships_with_a_placeholder_log_key_that_is_refused() -> None:
    with pytest.raises(FormatError, match="log_vkeys"):
        read_policy(EXAMPLE.read_bytes(), "policy")


@pytest.mark.parametrize(("trust", "edit", "message"), [
    ("log_vkeys = []\n", None, "pin at least one key"),
    (f'log_vkeys = ["{WITNESS}"]\n', None, "must be a log"),
    (f'log_vkeys = ["{LOG}"]\nwitness_vkeys = ["{LOG}"]\n', None, "must be a witness"),
    (f'log_vkeys = ["{LOG}"]\nwitness_vkeys = ["{WITNESS}"]\nwitness_threshold = 2\n', None, "<= 1"),
    (None, ('modes = ["production-policy"]', "modes = []"), "at least one mode"),
    (None, ('modes = ["production-policy"]', 'modes = ["abba"]'), "modes"),
    (None, ('rule = "win2-v1"', 'rule = "pp3-v1"'), "rule"),
    (None, ('guards = ["accepted_per_round", "decode_tps"]', 'guards = ["ttft_s"]'), "named twice"),
    (None, ('gates = ["qualification", "rng", "budget", "rehearsal"]', 'gates = ["rng"]'), "must include qualification"),
    (None, ('gates = ["qualification", "rng", "budget", "rehearsal"]', 'gates = ["qualification"]'),
     "rng gate is not among"),
    (None, ('"input.archive",', '"archive",'), "dotted path"),
    (None, ("same_cap = true", "same_cap = 1"), "true or false"),
    (None, ("require_day_to_day = false", "require_day_to_day = false\nsurprise = 1"), "surprise"),
    (None, ("alpha = 0.05", "alpha = 0"), "looks.alpha"),
    (None, ("alpha = 0.05", "alpha = 0.5"), "looks.alpha"),
    (None, ("max_looks = 28", "max_looks = 0"), "looks.max_looks"),
    (None, ('spending = "bonferroni"', 'spending = "peeking"'), "looks.spending"),
    (None, ('spending = "bonferroni"', 'spending = "bonferroni"\nlooks_seen = 3'), "looks_seen"),
], ids=lambda value: value.replace(LOG, "LOG").replace(WITNESS, "WITNESS") if isinstance(value, str) else None)
def test_policy_refusals_name_the_member(trust: str | None, edit: tuple[str, str] | None, message: str) -> None:
    with pytest.raises(FormatError, match=re.escape(message)):
        read_policy(_policy(trust, edit), "policy")


def test_policy_is_bounded() -> None:
    with pytest.raises(FormatError, match="limit"):
        read_policy(b"#" * ((1 << 20) + 1), "policy")
    with pytest.raises(FormatError, match="deeper"):
        read_policy(b"a = " + b"[" * 200 + b"]" * 200, "policy")
