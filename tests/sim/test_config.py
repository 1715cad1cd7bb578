"""Config files: defaults, TOML/JSON loading, validation naming the field."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

import runner.sim as sim
from ledger.errors import FormatError


def test_default_toml_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "default.toml"
    path.write_text(files("runner.sim").joinpath("default.toml").read_text(encoding="utf-8"))
    assert sim.load_config(path) == sim.default_config()


def test_round_trip_through_json(tmp_path: Path) -> None:
    config = sim.default_config().with_(engines=2, seed=9).with_arm("X", k=2, acceptance=(0.5, 0.25))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config.to_dict()))
    assert sim.load_config(path) == config
    assert config.arm("X").expected_accepted_per_round() == 0.5 + 0.125


@pytest.mark.parametrize(("text", "message"), [
    ("tim_scale = 1\n", "tim_scale: unknown field"),
    ("engines = 0\n", "engines: must be >= 1, got 0"),
    ("[arms.A]\nk = 3\n", "arms.A.acceptance: give 3 acceptance probabilities for k = 3"),
    ("[arms.A]\nacceptance = [0.5, 2]\nk = 2\n", "arms.A.acceptance: probabilities must be within [0, 1]"),
    ("production_arm = 'Z'\n", "production_arm: 'Z' is not a configured arm"),
    ("ignore_fields = ['temperature']\n", "ignore_fields[0]: expected one of"),
    ("[arms.A]\nstep_base_ms = 'fast'\n", "arms.A.step_base_ms: expected a number, got a string"),
    ("model = \n", "simulator config"),
    ("scheduling_policy = 'lifo'\n", "scheduling_policy: expected one of"),
    ("max_num_batched_tokens = -1\n", "max_num_batched_tokens: must be >= 0"),
    ("dev_mode = 'yes'\n", "dev_mode: expected"),
])
def test_bad_config_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(FormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        sim.load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read simulator config"):
        sim.load_config(tmp_path / "absent.toml")
