"""Site files: each rule refused by one broken site whose error names the field; the examples load."""

from __future__ import annotations

import copy
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FormatError
from runner.drivers import ACTIONS, CHAIN_ACTIONS, CommandsDriver, SimDriver
from runner.drivers.base import CLOSE_ACTIONS
from runner.drivers.site import load_site, site_from_dict

from .rigs import SCRIPTS, commands_site_text

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def base(tmp_path: Path) -> dict[str, Any]:
    shutil.copytree(SCRIPTS, tmp_path / "site-scripts")
    return tomllib.loads(commands_site_text())


def broken(data: dict[str, Any], change: str) -> dict[str, Any]:
    """``data`` with one change: ``path=value`` (value is TOML) or ``-path`` to delete."""
    out = copy.deepcopy(data)
    delete = change.startswith("-")
    path, _, value = change.lstrip("-").partition("=")
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    target = out
    for key in keys[:-1]:
        target = target[key]
    if delete:
        del target[keys[-1]]
    else:
        target[keys[-1]] = tomllib.loads(f"v = {value}")["v"]
    return out


BROKEN = [
    ("-kind", r"kind: must be \"commands\" or \"sim\""),
    ('kind="ssh"', r"kind: must be .* got 'ssh'"),
    ("color=1", r"unknown field 'color' for a commands site"),
    ("-hosts", r"hosts: required, one \[\[hosts\]\] table"),
    ("hosts=[]", r"hosts: required"),
    ("hosts.0.name=\"bad host\"", r"hosts\[0\]\.name: must be a host name"),
    ("hosts.1.name=\"spark-head\"", r"hosts\[1\]\.name: host 'spark-head' appears twice"),
    ("hosts.1.role=\"boss\"", r"hosts\[1\]\.role: must be \"head\" or \"worker\""),
    ("hosts.1.role=\"head\"", r"exactly one host must have role \"head\", found 2"),
    ("hosts.0.rack=3", r"hosts\[0\]\.rack: unknown field"),
    ("-endpoints", r"endpoints: required table"),
    ("-endpoints.serving_url", r"endpoints\.serving_url: must be an http"),
    ("endpoints.serving_url=\"ftp://x\"", r"endpoints\.serving_url: must be an http"),
    ("endpoints.metrics_urls=[]", r"endpoints\.metrics_urls: must be a non-empty list"),
    ("endpoints.metrics_urls=[\"http://a/metrics\", 3]", r"endpoints\.metrics_urls\[1\]: must be an http"),
    ("endpoints.grpc=\"x\"", r"endpoints\.grpc: unknown field"),
    ("-production_clock_cap_mhz", r"production_clock_cap_mhz: required"),
    ("production_clock_cap_mhz=0", r"production_clock_cap_mhz: must be a positive integer"),
    ("production_clock_cap_mhz=2300.5", r"production_clock_cap_mhz: must be a positive integer"),
    ("state_dir=\"\"", r"state_dir: must be a non-empty path"),
    ("kill_grace_s=-1", r"kill_grace_s: must be a positive number"),
    ("actions=3", r"actions: must be a table"),
    ("actions.reboot={command=\"true\"}", r"actions\.reboot: unknown action"),
    ("-actions.drain", r"actions\.drain: required"),
    ("-actions.watch", r"actions\.watch: required"),
    ("actions.drain=\"true\"", r"actions\.drain: must be a table"),
    ("-actions.drain.command", r"actions\.drain\.command: required"),
    ("actions.drain.command=\"  \"", r"actions\.drain\.command: required"),
    ("actions.drain.retries=2", r"actions\.drain\.retries: unknown field"),
    ("actions.drain.timeout_s=0", r"actions\.drain\.timeout_s: must be a positive number"),
    ("actions.drain.timeout_s=\"5m\"", r"actions\.drain\.timeout_s: must be a positive number"),
    ("actions.drain.command=\"site-scripts/statehost.sh 'unclosed\"", r"actions\.drain\.command: cannot split"),
    ("actions.drain.command=\"site-scripts/statehost.sh {state_dir} {window_id}\"",
     r"actions\.drain\.command: action drain: unknown placeholder \{window_id\}"),
    ("actions.restore.command=\"site-scripts/statehost.sh {snapshot:>10}\"",
     r"actions\.restore\.command: action restore: placeholder \{snapshot\} takes no format spec"),
    ("actions.restore.command=\"site-scripts/statehost.sh {snapshot!r}\"",
     r"actions\.restore\.command: action restore: placeholder \{snapshot\} takes no format spec"),
    ("actions.drain.command=\"site-scripts/statehost.sh {host.name}\"",
     r"actions\.drain\.command: action drain: unknown placeholder \{host\.name\}"),
    ("actions.drain.command=\"site-scripts/statehost.sh {\"", r"actions\.drain\.command: bad placeholder"),
    ("actions.drain.command=\"{host}/drain.sh\"", r"actions\.drain\.command: action drain: the program name"),
    ("actions.drain.command=\"site-scripts/missing.sh\"", r"actions\.drain\.command: program 'site-scripts/missing\.sh' not found"),
    ("actions.drain.command=\"no-such-program-tally\"", r"actions\.drain\.command: program 'no-such-program-tally' not found on PATH"),
    ("-state_dir", r"actions\.\w+\.command uses \{state_dir\} but the site sets no state_dir"),
]


@pytest.mark.parametrize(("change", "message"), BROKEN, ids=[c for c, _ in BROKEN])
def test_each_broken_commands_site_names_its_field(base: dict[str, Any], tmp_path: Path, change: str,
                                                   message: str) -> None:
    assert isinstance(site_from_dict(base, base_dir=tmp_path), CommandsDriver)  # the unbroken site loads
    with pytest.raises(FormatError, match=message):
        site_from_dict(broken(base, change), base_dir=tmp_path)


def test_a_program_that_is_not_executable(base: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "plain.sh").write_text("#!/bin/sh\n")
    with pytest.raises(FormatError, match=r"actions\.drain\.command: program 'plain\.sh' not found on PATH"):
        site_from_dict(broken(base, 'actions.drain.command="plain.sh"'), base_dir=tmp_path)
    with pytest.raises(FormatError, match=r"actions\.drain\.command: program './plain\.sh' is not executable"):
        site_from_dict(broken(base, 'actions.drain.command="./plain.sh"'), base_dir=tmp_path)
    loaded = site_from_dict(broken(base, 'actions.drain.command="./plain.sh"'), base_dir=tmp_path,
                            check_programs=False)
    assert loaded.actions == frozenset(ACTIONS) - {"list_arms"}


def test_chain_actions_are_optional(base: dict[str, Any], tmp_path: Path) -> None:
    data = copy.deepcopy(base)
    for action in CHAIN_ACTIONS:
        del data["actions"][action]
    driver = site_from_dict(data, base_dir=tmp_path)
    assert driver.actions == frozenset(ACTIONS) - CHAIN_ACTIONS - {"list_arms"}
    with pytest.raises(FormatError, match=r"no 'placeholder_up' action \(add \[actions\.placeholder_up\]"):
        driver.run("placeholder_up", "spark-head", {})


def test_hosts_are_ordered_head_first(base: dict[str, Any], tmp_path: Path) -> None:
    data = copy.deepcopy(base)
    data["hosts"] = [{"name": "w1", "role": "worker"}, {"name": "h", "role": "head"}, {"name": "w2", "role": "worker"}]
    driver = site_from_dict(data, base_dir=tmp_path)
    assert driver.hosts == ("h", "w1", "w2")
    assert driver.metrics_urls == ("http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics")
    del data["endpoints"]["metrics_urls"]
    assert site_from_dict(data, base_dir=tmp_path).metrics_urls == ("http://127.0.0.1:8000/metrics",)


SIM_BROKEN = [
    ({"kind": "sim"}, r"url: must be an http"),
    ({"kind": "sim", "url": "localhost:8000"}, r"url: must be an http"),
    ({"kind": "sim", "url": "http://h:1", "state_dir": "x"}, r"unknown field 'state_dir' for a sim site"),
    ({"kind": "sim", "url": "http://h:1", "hosts": []}, r"hosts: must be a non-empty list"),
    ({"kind": "sim", "url": "http://h:1", "hosts": ["a", "a"]}, r"hosts: host names must be unique"),
    ({"kind": "sim", "url": "http://h:1", "hosts": ["a b"]}, r"hosts\[0\]: must be a host name"),
    ({"kind": "sim", "url": "http://h:1", "production_clock_cap_mhz": True}, r"production_clock_cap_mhz: must be"),
    ({"kind": "sim", "url": "http://h:1", "actions": {"drain": {"command": "x"}}},
     r"actions\.drain\.command: a sim site sets only timeout_s"),
    ({"kind": "sim", "url": "http://h:1", "actions": {"drain": {"timeout_s": -2}}},
     r"actions\.drain\.timeout_s: must be a positive number"),
    ({"kind": "sim", "url": "http://h:1", "actions": {"nap": {}}}, r"actions\.nap: unknown action"),
]


@pytest.mark.parametrize(("data", "message"), SIM_BROKEN, ids=[m for _, m in SIM_BROKEN])
def test_each_broken_sim_site_names_its_field(tmp_path: Path, data: dict[str, Any], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        site_from_dict(data, base_dir=tmp_path)


def test_unreadable_and_non_toml_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"cannot read site file .*nope\.toml"):
        load_site(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("kind = \n")
    with pytest.raises(FormatError, match=r"site file .*bad\.toml: not TOML"):
        load_site(bad)


def test_the_examples_load(tmp_path: Path) -> None:
    commands = load_site(REPO / "examples" / "site-commands.toml")
    assert isinstance(commands, CommandsDriver) and commands.actions == frozenset(ACTIONS) - CLOSE_ACTIONS - {"list_arms", "restore_check"}
    assert commands.state_dir == REPO / "examples" / "site-state" and commands.cwd == REPO / "examples"
    simulated = load_site(REPO / "examples" / "site-sim.toml")
    assert isinstance(simulated, SimDriver) and simulated.timeout_s("start_arm") == 120


def test_the_site_doc_examples_load(tmp_path: Path) -> None:
    text = (REPO / "docs" / "site.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    kinds = set()
    for block in blocks:
        data = tomllib.loads(block)
        if "kind" not in data:
            continue  # a fragment
        kinds.add(data["kind"])
        site_from_dict(data, base_dir=tmp_path, check_programs=False)
    assert kinds == {"commands", "sim"}
