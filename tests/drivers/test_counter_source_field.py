"""``[endpoints] counter_source`` of a site file: default, every source, refusals naming the field."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FormatError
from runner.drivers import CommandsDriver, SimDriver
from runner.drivers.site import site_from_dict
from runner.vocabulary import COUNTER_SOURCES

from .rigs import SCRIPTS, commands_site_text


@pytest.fixture
def commands(tmp_path: Path) -> dict[str, Any]:
    shutil.copytree(SCRIPTS, tmp_path / "site-scripts")
    return tomllib.loads(commands_site_text())


def test_existing_sites_default_to_vllm(commands: dict[str, Any], tmp_path: Path) -> None:
    driver = site_from_dict(commands, base_dir=tmp_path)
    assert isinstance(driver, CommandsDriver) and driver.counter_source == "vllm"
    assert site_from_dict({"kind": "sim", "url": "http://h:1"}, base_dir=tmp_path).counter_source == "vllm"


@pytest.mark.parametrize("source", COUNTER_SOURCES)
def test_each_counter_source_is_read(commands: dict[str, Any], tmp_path: Path, source: str) -> None:
    commands["endpoints"]["counter_source"] = source
    assert site_from_dict(commands, base_dir=tmp_path).counter_source == source
    simulated = site_from_dict({"kind": "sim", "url": "http://h:1", "endpoints": {"counter_source": source}},
                               base_dir=tmp_path)
    assert isinstance(simulated, SimDriver) and simulated.counter_source == source


@pytest.mark.parametrize(("data", "message"), [
    ({"endpoints": {"counter_source": "prometheus"}},
     r"endpoints\.counter_source: must be one of vllm, llamacpp, sglang, none, got 'prometheus'"),
    ({"endpoints": {"counter_source": 1}}, r"endpoints\.counter_source: must be one of"),
    ({"endpoints": {"serving_url": "http://h:2"}}, r"endpoints\.serving_url: a sim site sets only counter_source"),
    ({"endpoints": "vllm"}, r"endpoints: must be a table"),
])
def test_bad_counter_sources_name_the_field(tmp_path: Path, data: dict[str, Any], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        site_from_dict({"kind": "sim", "url": "http://h:1", **data}, base_dir=tmp_path)


def test_a_commands_site_with_a_bad_counter_source(commands: dict[str, Any], tmp_path: Path) -> None:
    commands["endpoints"]["counter_source"] = "llama.cpp"
    with pytest.raises(FormatError, match=r"endpoints\.counter_source: must be one of .* got 'llama\.cpp'"):
        site_from_dict(commands, base_dir=tmp_path)


def test_for_handle_takes_a_counter_source() -> None:
    class Handle:
        url = "http://h:1"
        config = None

    assert SimDriver.for_handle(Handle(), counter_source="llamacpp").counter_source == "llamacpp"
    assert SimDriver.for_handle(Handle()).counter_source == "vllm"
