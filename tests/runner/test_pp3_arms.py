"""pp3-v1 arms at one fixed depth (seed 003): unequal depths or an adaptive arm are refused at registration."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import FieldError
from runner.plan.parse import parse_plan, read_plan_file

from .conftest import Site, tally

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ABBA = EXAMPLES / "seed003-abba.toml"
B_DEPTH = 'method = "k2", num_speculative_tokens = 5, adaptive_k = false, draft_sampling = "sampled"'


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = ABBA.read_text()
    assert old in text
    path = tmp_path / "seed003-abba.toml"
    path.write_text(text.replace(old, new, 1))
    (tmp_path / "families" / "seed003").mkdir(parents=True)
    for family in (EXAMPLES / "families" / "seed003").iterdir():   # the plan's family files, beside it
        (tmp_path / "families" / "seed003" / family.name).write_bytes(family.read_bytes())
    return path


@pytest.mark.parametrize(("old", "new", "says"), [
    pytest.param(B_DEPTH, B_DEPTH.replace("num_speculative_tokens = 5", "num_speculative_tokens = 4"),
                 "num_speculative_tokens: A 5, B 4", id="depths-5-and-4"),
    pytest.param(B_DEPTH, B_DEPTH.replace("adaptive_k = false", "adaptive_k = true"), "arm B is adaptive",
                 id="adaptive-B"),
    pytest.param(B_DEPTH, B_DEPTH.replace("num_speculative_tokens = 5, ", ""), "B not declared",
                 id="depth-not-declared"),
])
def test_a_pp3_plan_with_unequal_depths_or_an_adaptive_arm_is_refused(tmp_path: Path, site: Site, old: str,
                                                                      new: str, says: str) -> None:
    path = _variant(tmp_path, old, new)
    with pytest.raises(FieldError) as refused:
        read_plan_file(path)
    assert says in str(refused.value)
    size = site.size()
    result = tally("window", "register", path)
    assert result.code == 2 and result.err.count("\n") == 1 and says in result.err, result.err
    assert site.size() == size


def test_equal_fixed_depths_and_a_plain_baseline_are_registered(tmp_path: Path) -> None:
    assert read_plan_file(ABBA).plan.protocol == "pp3-v1"   # fixed5 greedy vs fixed5 sampled
    plain = read_plan_file(EXAMPLES / "site-vllm" / "pp3-vllm.toml").plan   # no speculation vs ngram 4: allowed
    assert [a.speculates for a in plain.arms] == [False, True]


def test_a_registered_plan_replays_as_recorded_whatever_its_arms() -> None:
    """The check applies to plans being registered; a plan already in a ledger is read as it was."""
    data = read_plan_file(ABBA).plan.to_json()
    data["arms"][1]["speculative"] = dict(data["arms"][1]["speculative"], num_speculative_tokens=4)
    assert parse_plan(data).arms[1].speculative["num_speculative_tokens"] == 4
