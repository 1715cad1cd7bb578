"""A commands site over a real ``ssh`` to a local ``sshd``: hostile values never run a command the template did not name.

The attack ("to be designed against"): ssh joins a command's arguments into one string
that the remote user's shell parses again, so a value tally fills into a template (the
window id, an arm name, ``{arm_config}``'s strings from the plan, a site path) could run
as code on the host, or pass as an option. Every action here goes over ssh to an OpenSSH
server on 127.0.0.1 (``localsshd.py``), to a remote script that records its argv and
stdin; every hostile value (command substitutions, backticks, ``;``, quotes, newlines,
``-o`` options, globs) is tried in every field. Each is refused before anything runs, or
arrives as data on stdin, and the canary file such a value would create never appears.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.errors import FormatError
from runner.drivers import ACTIONS, CHAIN_ACTIONS, CommandsDriver
from runner.drivers.base import OPTIONAL_ACTIONS
from runner.drivers.site import load_site, site_from_dict

from .localsshd import Sshd, local_sshd

REPO = Path(__file__).resolve().parents[2]
REMOTE = """#!{python}
import json, os, sys
log = {log!r}
stdin = sys.stdin.read()
with open(log, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "stdin": stdin,
                         "env": {{k: v for k, v in os.environ.items() if k.startswith("TALLY_")}}}}) + "\\n")
print("TALLY-FACTS " + json.dumps({{"serving": "down" if sys.argv[1:2] == ["drain"] else "up"}}))
"""


def hostile(canary: Path) -> list[str]:
    """Values that, parsed by a shell (once or twice) or read as an option, would create ``canary``."""
    c = str(canary)
    return [f"$(touch {c})", f"$(touch${{IFS}}{c})", f"`touch {c}`", f"x;touch {c}", f"x&&touch {c}", f"x|touch {c}",
            f"';touch {c};'", f'";touch {c};"', f"x\ntouch {c}", f"x\rtouch {c}", f"-oProxyCommand=touch{c}",
            f"-oLocalCommand=touch${{IFS}}{c}", "--", "-v", f">{c}", f"<{c}", "*", "~", "$HOME", "a b", "\\", "'",
            '"', "\x00", "\u2028x", "{window}", "%(x)s"]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with local_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def _site(tmp_path: Path, sshd: Sshd, actions: dict[str, str], **top: Any) -> dict[str, Any]:
    remote = tmp_path / "remote.py"  # on the "remote" host: the same machine, reached through sshd
    remote.write_text(REMOTE.format(python=sys.executable, log=str(tmp_path / "remote.log")))
    remote.chmod(0o755)
    ssh = f"ssh -F {sshd.config}"
    commands = {action: f"{ssh} {{head}} {remote} {action}" for action in ACTIONS
                if action not in CHAIN_ACTIONS | OPTIONAL_ACTIONS}
    commands.update({a: c.replace("SSH", ssh).replace("REMOTE", str(remote)) for a, c in actions.items()})
    (tmp_path / "state").mkdir(exist_ok=True)
    return {"kind": "commands", "production_clock_cap_mhz": 2300, "state_dir": "state",
            "hosts": [{"name": "spark-head", "role": "head"}, {"name": "spark-worker", "role": "worker"}],
            "endpoints": {"serving_url": "http://127.0.0.1:8000"},
            "actions": {a: {"command": c, "timeout_s": 30} for a, c in commands.items()}, **top}


EVERY_FIELD = ("SSH {head} REMOTE probe {window} '{start}' \"{role}\" {arm} {snapshot} {seed} {hosts} {head} "
               "{state_dir} {serving_url} {production_clock_cap_mhz} {timeout_s} {action}")
ACTIONS_UNDER_TEST = {
    "probe": EVERY_FIELD,
    "start_arm": "SSH {head} REMOTE start_arm {arm} {role} {window} {start}",  # the config: on stdin
    "fence": "SSH {host} REMOTE fence {host} {host_role} {window}",
    # the environment, forwarded by ssh (the server accepts TALLY_*: AcceptEnv)
    "warmup": "SSH -o SendEnv=TALLY_ARM_CONFIG -o SendEnv=TALLY_WINDOW {head} REMOTE warmup",
    # sh -c: values as positional parameters, never inside the script
    "restore": "sh -c 'exec ssh -F \"$1\" \"$2\" REMOTE restore \"$3\"' sh SSHCONFIG {head} {snapshot}",
}
GOOD = {"window": "w1", "start": "s2", "role": "B", "arm": "fixed5-sampled", "snapshot_sha256": "a" * 64,
        "seed": 43}
PLACEHOLDER_PARAM = {"window": "window", "start": "start", "role": "role", "arm": "arm", "snapshot": "snapshot_sha256",
                     "seed": "seed"}


def _driver(tmp_path: Path, sshd: Sshd) -> CommandsDriver:
    actions = {a: c.replace("SSHCONFIG", str(sshd.config)) for a, c in ACTIONS_UNDER_TEST.items()}
    driver = site_from_dict(_site(tmp_path, sshd, actions), base_dir=tmp_path)
    assert isinstance(driver, CommandsDriver)
    return driver


def _log(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "remote.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_site_over_real_ssh_runs_what_its_templates_name(tmp_path: Path, sshd: Sshd) -> None:
    driver = _driver(tmp_path, sshd)
    result = driver.run("probe", None, GOOD)
    assert result.ok, (result.facts, result.stderr)
    (entry,) = _log(tmp_path)
    assert entry["argv"] == ["probe", "w1", "s2", "B", "fixed5-sampled", "a" * 64, "43", "spark-head,spark-worker",
                             "spark-head", str(tmp_path / "state"), "http://127.0.0.1:8000", "2300", "30", "probe"]
    assert json.loads(entry["stdin"])["params"] == GOOD  # ssh forwards the request on stdin
    assert driver.run("fence", "spark-worker", GOOD).ok
    assert _log(tmp_path)[-1]["argv"] == ["fence", "spark-worker", "worker", "w1"]
    assert driver.run("restore", None, GOOD).ok
    assert _log(tmp_path)[-1]["argv"] == ["restore", "a" * 64]


def test_hostile_values_in_every_field_run_nothing_over_ssh(tmp_path: Path, sshd: Sshd) -> None:
    canary = tmp_path / "canary"
    driver = _driver(tmp_path, sshd)
    tried = 0
    for action in ("probe", "start_arm", "fence", "restore", "warmup"):
        host = "spark-head" if action == "fence" else None
        for placeholder, key in PLACEHOLDER_PARAM.items():
            if f"{{{placeholder}}}" not in ACTIONS_UNDER_TEST[action]:
                continue
            for value in hostile(canary):
                tried += 1
                with pytest.raises(FormatError, match="is not a plain word"):
                    driver.run(action, host, {**GOOD, key: value})
    assert tried > 100 and _log(tmp_path) == []  # each refused before anything ran
    assert not canary.exists()


def test_hostile_free_text_travels_as_data_only(tmp_path: Path, sshd: Sshd) -> None:
    """The plan's free text (an arm's description, its sim and speculative strings) and any other param:
    on stdin and in the environment, as data; the command line carries only the template's plain words."""
    canary = tmp_path / "canary"
    values = hostile(canary)
    config = {"role": "B", "name": "fixed5-sampled", "config_digest": "c" * 64, "description": values[0],
              "speculative": {"method": values[2], "num_speculative_tokens": 5, "note": values[8]},
              "sim": {f"k{i}": v for i, v in enumerate(values)}}
    params = {**GOOD, "arm_config": config, "extra": values, "sim": {"x": values[3]}}
    driver = _driver(tmp_path, sshd)
    result = driver.run("start_arm", None, params)
    assert result.ok, (result.facts, result.stderr)
    (entry,) = _log(tmp_path)
    assert entry["argv"] == ["start_arm", "fixed5-sampled", "B", "w1", "s2"]
    request = json.loads(entry["stdin"])
    assert request["params"]["arm_config"] == config and request["params"]["extra"] == values
    assert driver.run("warmup", None, params).ok
    sent = _log(tmp_path)[-1]
    assert sent["argv"] == ["warmup"] and json.loads(sent["env"]["TALLY_ARM_CONFIG"]) == config
    assert sent["env"]["TALLY_WINDOW"] == "w1"
    assert not canary.exists()


def _load_refusal(tmp_path: Path, sshd: Sshd, actions: dict[str, str], **top: Any) -> str:
    with pytest.raises(FormatError) as caught:
        site_from_dict(_site(tmp_path, sshd, actions, **top), base_dir=tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("command", [
    "SSH {head} REMOTE start_arm {arm_config}",
    "SSH {head} \"REMOTE start_arm '{arm_config}'\"",
    "SSH -o SendEnv=TALLY_ARM_CONFIG {head} REMOTE start_arm --config={arm_config}",
    "sh -c 'REMOTE start_arm {arm_config}'",
    "sh -c 'REMOTE start_arm \"$1\"' sh {arm_config}",
    "sudo -n bash -euo pipefail -c 'SSH {head} REMOTE' {arm_config}",
    "env X=1 timeout 30 SSH {head} REMOTE {arm_config}",
    "python3 -c 'import sys; print(sys.argv)' {arm_config}",
])
def test_free_text_after_ssh_or_a_shell_is_refused_when_the_site_loads(tmp_path: Path, sshd: Sshd,
                                                                      command: str) -> None:
    message = _load_refusal(tmp_path, sshd, {"start_arm": command})
    assert "actions.start_arm.command" in message and "{arm_config} after" in message
    assert "stdin" in message


@pytest.mark.parametrize(("field", "value"), [
    ("state_dir", "state dir"),
    ("state_dir", "$(touch CANARY)"),
    ("serving_url", "http://127.0.0.1:8000/$(touch${IFS}CANARY)"),
    ("serving_url", "http://127.0.0.1:8000/`touch${IFS}CANARY`"),
])
def test_a_site_value_a_remote_shell_would_parse_is_refused_when_the_site_loads(tmp_path: Path, sshd: Sshd,
                                                                              field: str, value: str) -> None:
    canary = tmp_path / "canary"
    value = value.replace("CANARY", str(canary))
    top: dict[str, Any] = {}
    if field == "state_dir":
        top["state_dir"] = value
    else:
        top["endpoints"] = {"serving_url": value}
    message = _load_refusal(tmp_path, sshd, {"probe": EVERY_FIELD}, **top)
    assert f"{{{field}}} is " in message and "not a plain word" in message and "actions.probe.command" in message
    assert not canary.exists()
    # the same value where no shell parses it again loads, and reaches the program as one literal argument
    local = _site(tmp_path, sshd, {}, **top)
    local["actions"]["probe"] = {"command": f"{tmp_path / 'remote.py'} probe {{{field}}}"}
    driver = site_from_dict(local, base_dir=tmp_path)
    assert isinstance(driver, CommandsDriver) and driver.run("probe", None, GOOD).ok
    shown = str(tmp_path / value) if field == "state_dir" else value
    assert _log(tmp_path)[-1]["argv"] == ["probe", shown]
    assert not canary.exists()


def test_the_hostile_values_are_live_over_this_ssh(tmp_path: Path, sshd: Sshd) -> None:
    """The control: joined into an ssh command line unchecked, these values do run on the host."""
    import subprocess

    for index, value in enumerate(hostile(tmp_path / "canary")[:4]):
        canary = tmp_path / f"live-{index}"
        command = value.replace(str(tmp_path / "canary"), str(canary))
        subprocess.run(["ssh", "-F", str(sshd.config), "spark-head", "echo", command], capture_output=True,
                       timeout=60, check=False)
        assert canary.exists(), value


def test_a_refused_site_is_one_line_and_exit_2_from_the_cli(tmp_path: Path, sshd: Sshd,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    assert runner.invoke(app, ["init", "--origin", "tally.test/ssh"]).exit_code == 0
    plan = REPO / "examples" / "seed000-production-policy.toml"
    assert runner.invoke(app, ["window", "register", str(plan)]).exit_code == 0
    site = _site(tmp_path, sshd, {"start_arm": "SSH {head} REMOTE start_arm {arm_config}"})
    lines = ['kind = "commands"', "production_clock_cap_mhz = 2300", 'state_dir = "state"']
    for host in site["hosts"]:
        lines += ["[[hosts]]", f'name = "{host["name"]}"', f'role = "{host["role"]}"']
    lines += ["[endpoints]", 'serving_url = "http://127.0.0.1:8000"']
    for action, table in site["actions"].items():
        lines += [f"[actions.{action}]", f"command = {json.dumps(table['command'])}"]
    (tmp_path / "site.toml").write_text("\n".join(lines) + "\n")
    assert load_site  # the CLI reads it with load_site
    result = runner.invoke(app, ["window", "run", "pp4-win2-production-policy", "--site", "site.toml", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "actions.start_arm.command" in result.stderr and "{arm_config} after ssh" in result.stderr
    assert _log(tmp_path) == []


@pytest.mark.parametrize(("argv", "reparsed"), [
    ("ssh -o BatchMode=yes -p 22 {head} sudo x {window}", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("ssh -oBatchMode=yes -tt h cmd", [1, 2, 3, 4]),
    ("ssh -- h cmd", [1, 2, 3]),
    ("timeout 10 ssh h c", [3, 4]),
    ("sudo bash -euo pipefail -c 'echo x' sh {y}", [5]),
    ("bash --rcfile rc --login -c s {b}", [5]),
    ("sh script.sh {x}", []),
    ("python3 -c 'print(1)' {a}", [2]),
    ("awk -F : '{{print}}' f", [3]),
    ("./statehost.sh {state_dir} probe", []),
])
def test_which_arguments_a_shell_parses_again(argv: str, reparsed: list[int]) -> None:
    import shlex

    from runner.drivers.commands import reparsed_arguments

    assert sorted(reparsed_arguments(tuple(shlex.split(argv)))[0]) == reparsed
