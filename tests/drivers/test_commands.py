"""The command-template driver on its own: quoting, placeholders, the request it passes, facts, signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from ledger.errors import FormatError
from runner.drivers import CommandsDriver, parse_facts
from runner.drivers.commands import group_members
from runner.drivers.site import load_site

from .rigs import SCRIPTS, commands_site_text

ECHO = """#!/usr/bin/env python3
import json, os, sys
request = json.loads(sys.stdin.read())
env = {k: v for k, v in os.environ.items() if k.startswith("TALLY_") and k != "TALLY_REQUEST"}
print("TALLY-FACTS " + json.dumps({"argv": sys.argv[1:], "request": request, "env": env, "cwd": os.getcwd(),
                                   "serving": "up"}))
"""


def make_site(tmp_path: Path, commands: dict[str, str], **kw: object) -> CommandsDriver:
    shutil.copytree(SCRIPTS, tmp_path / "site-scripts")
    (tmp_path / "echo.py").write_text(ECHO.replace("/usr/bin/env python3", sys.executable, 1))
    (tmp_path / "echo.py").chmod(0o755)
    site = tmp_path / "site.toml"
    site.write_text(commands_site_text(commands=commands, **kw))  # type: ignore[arg-type]
    driver = load_site(site)
    assert isinstance(driver, CommandsDriver)
    return driver


def test_placeholders_fill_whole_arguments_without_a_shell(tmp_path: Path) -> None:
    driver = make_site(tmp_path, {"probe": "./echo.py {window}:{start} 'two words' {arm_config} {hosts} {head} "
                                           "{state_dir} {production_clock_cap_mhz} {timeout_s} {action} $HOME;true"})
    config = {"name": "fixed5 sampled", "k": 5, "quote": "it's \"quoted\""}
    result = driver.run("probe", None, {"window": "w-1", "start": "s2", "arm_config": config})
    assert result.ok, result.facts
    argv = result.facts["argv"]
    assert argv == ["w-1:s2", "two words", json.dumps(config, sort_keys=True, separators=(",", ":")),
                    "spark-head,spark-worker", "spark-head", str(tmp_path / "state"), "2300", "60", "probe",
                    "$HOME;true"]
    assert json.loads(argv[2]) == config
    assert result.facts["cwd"] == str(tmp_path)


def test_the_request_travels_on_stdin_and_in_the_environment(tmp_path: Path) -> None:
    driver = make_site(tmp_path, {"fence": "./echo.py {host} {host_role}"})
    params = {"window": "w1", "arm": "B", "role": "B", "arm_config": {"k": 5}, "seed": 43, "snapshot_sha256": "a" * 64,
              "extra": [1, 2]}
    result = driver.run("fence", "spark-worker", params)
    assert result.facts["argv"] == ["spark-worker", "worker"]
    assert result.facts["request"] == {"action": "fence", "host": "spark-worker", "host_role": "worker",
                                       "hosts": ["spark-head", "spark-worker"], "params": params}
    env = result.facts["env"]
    assert env["TALLY_ACTION"] == "fence" and env["TALLY_HOST"] == "spark-worker"
    assert env["TALLY_HOST_ROLE"] == "worker" and env["TALLY_WINDOW"] == "w1" and env["TALLY_SEED"] == "43"
    assert env["TALLY_SNAPSHOT"] == "a" * 64 and json.loads(env["TALLY_ARM_CONFIG"]) == {"k": 5}
    assert env["TALLY_STATE_DIR"] == str(tmp_path / "state")


def test_missing_and_unsafe_values_are_programming_errors(tmp_path: Path) -> None:
    driver = make_site(tmp_path, {"start_arm": "./echo.py {arm} {role} {window}", "fence": "./echo.py {host}"})
    with pytest.raises(FormatError, match=r"start_arm: placeholder \{window\} needs params\['window'\]"):
        driver.run("start_arm", None, {"arm": "B", "role": "B"})
    with pytest.raises(FormatError, match="is not a plain word"):
        driver.run("start_arm", None, {"arm": "B; rm -rf /", "role": "B", "window": "w"})
    with pytest.raises(FormatError, match=r"fence: \{host\} needs a host"):
        driver.run("fence", None, {})
    assert driver.argv("start_arm", None, {"arm": "B", "role": "B", "window": "w"}) == ["./echo.py", "B", "B", "w"]


def test_facts_lines_merge_and_clock_cap_line_counts(tmp_path: Path) -> None:
    facts, problem = parse_facts("read_clock_cap", b'TALLY-FACTS {"a": 1, "b": 1}\nhello\n'
                                                   b"[gpu0] clock cap 2150 MHz (persisted)\nTALLY-FACTS {\"b\": 2}\n")
    assert problem is None
    assert facts == {"a": 1, "b": 2, "clock_cap_mhz": 2150, "log_line": "[gpu0] clock cap 2150 MHz (persisted)"}
    facts, problem = parse_facts("warmup", b"clock cap 2150 MHz\n")
    assert facts == {} and problem is None  # only start_arm, restore and read_clock_cap read the log line
    _, problem = parse_facts("read_clock_cap", b'TALLY-FACTS {"clock_cap_mhz": 2300}\nclock cap 2150 MHz\n')
    assert problem is not None and "disagrees" in problem
    _, problem = parse_facts("probe", b"TALLY-FACTS {not json\n")
    assert problem is not None and "line 1" in problem
    _, problem = parse_facts("probe", b"TALLY-FACTS [1]\n")
    assert problem is not None and "object" in problem


@pytest.mark.parametrize(("line", "reason"), [
    (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "over the 65536-byte limit"),   # 100,000 levels: no recursion
    (b'{"a":' * 17 + b"1" + b"}" * 17, "nests 17 levels deep, more than 16"),
    (b'{"x": "' + b"y" * (64 << 10) + b'"}', "over the 65536-byte limit"),
    (b'{"drained_at_ns": 1764600000000000000}', "integer 1764600000000000000 is outside"),
    (b'{"note": "\\ud800"}', "lone surrogate"),
    (b'{"serving": "down", "serving": "up"}', "member 'serving' appears twice"),
    (b'{"t": NaN}', "NaN is not a JSON number"),
])
def test_facts_lines_are_read_bounded_and_as_an_event_can_carry_them(line: bytes, reason: str) -> None:
    facts, problem = parse_facts("drain", b"TALLY-FACTS {\"serving\": \"down\"}\nTALLY-FACTS " + line + b"\n")
    assert problem is not None and problem.startswith("stdout line 2: TALLY-FACTS") and reason in problem, problem
    assert len(problem) < 600 and facts == {"serving": "down"}


@pytest.mark.parametrize(("action", "script", "reason"), [
    ("probe", "echo 'TALLY-FACTS {oops'", "not JSON"),
    ("drain", "echo 'TALLY-FACTS {\"serving\": \"up\"}'", "drain left production up"),
    ("snapshot", "echo snapshot taken", "established no snapshot_sha256"),
    ("snapshot", "echo 'TALLY-FACTS {\"snapshot_sha256\": \"ABC\"}'", "64 lowercase hex"),
    ("restore", "echo 'TALLY-FACTS {\"snapshot_sha256\": \"" + "b" * 64 + "\"}'", "is not the requested"),
    ("watch", "echo 'TALLY-FACTS {\"watch\": \"FAIL\"}'", "watch said FAIL"),
    ("read_clock_cap", "echo clock is fine", "established no clock_cap_mhz"),
    ("placeholder_up", "echo 'TALLY-FACTS {\"placeholders\": []}'", "no placeholder on spark-head"),
])
def test_exit_zero_with_contradicting_facts_is_a_failure(tmp_path: Path, action: str, script: str,
                                                          reason: str) -> None:
    (tmp_path / "say.sh").write_text(f"#!/bin/sh\n{script}\n")
    (tmp_path / "say.sh").chmod(0o755)
    driver = make_site(tmp_path, {action: "./say.sh"})
    host = "spark-head" if action == "placeholder_up" else None
    result = driver.run(action, host, {"snapshot_sha256": "a" * 64})
    assert result.exit_code == 0 and not result.ok
    assert reason in result.facts["error"]
    if action == "watch":
        assert result.facts["watch"] == "FAIL"


def test_killed_by_a_signal_and_missing_program(tmp_path: Path) -> None:
    (tmp_path / "die.sh").write_text("#!/bin/sh\necho dying >&2\nkill -9 $$\n")
    (tmp_path / "die.sh").chmod(0o755)
    (tmp_path / "gone.sh").write_text("#!/bin/sh\n")
    (tmp_path / "gone.sh").chmod(0o755)
    driver = make_site(tmp_path, {"drain": "./die.sh", "stop_arm": "./gone.sh"})
    died = driver.run("drain", None, {})
    assert not died.ok and died.exit_code == -signal.SIGKILL and "killed by signal 9" in died.facts["error"]
    (tmp_path / "gone.sh").unlink()
    gone = driver.run("stop_arm", None, {})
    assert not gone.ok and gone.exit_code == 127 and "cannot run" in gone.facts["error"]


def test_timeout_escalates_to_sigkill_for_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    (tmp_path / "stubborn.sh").write_text(
        "#!/bin/bash\ntrap '' TERM\n(trap '' TERM; sleep 30) &\necho \"$$ $!\" > pids\necho started\nwait\nwait\n")
    (tmp_path / "stubborn.sh").chmod(0o755)
    driver = make_site(tmp_path, {"warmup": "./stubborn.sh"}, timeouts={"warmup": 0.3}, kill_grace_s=0.3)
    began = time.monotonic()
    result = driver.run("warmup", None, {})
    assert result.timed_out and result.exit_code is None and not result.ok
    assert result.stdout == b"started\n"  # what it said before it was cut off is kept
    assert time.monotonic() - began < 3.0
    pgid, child = (int(p) for p in (tmp_path / "pids").read_text().split())
    assert group_members(pgid) == []
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_process_left_running_does_not_hold_the_action(tmp_path: Path) -> None:
    (tmp_path / "spawn.sh").write_text("#!/bin/sh\nsleep 30 &\necho $! > child\necho placeholder started\n")
    (tmp_path / "spawn.sh").chmod(0o755)
    driver = make_site(tmp_path, {"placeholder_up": "./spawn.sh"})
    began = time.monotonic()
    result = driver.run("placeholder_up", "spark-head", {})
    child = int((tmp_path / "child").read_text())
    try:
        assert result.exit_code == 0 and result.stdout == b"placeholder started\n"
        assert time.monotonic() - began < 2.0
        assert _alive(child)  # the placeholder keeps running
    finally:
        os.kill(child, signal.SIGKILL)


class _Stop(Exception):
    pass


def test_an_interrupted_wait_kills_the_command_before_the_exception_goes_on(tmp_path: Path) -> None:
    (tmp_path / "slow.sh").write_text("#!/bin/bash\nsleep 30 &\necho \"$$ $!\" > pids\nwait\n")
    (tmp_path / "slow.sh").chmod(0o755)
    driver = make_site(tmp_path, {"start_arm": "./slow.sh"}, kill_grace_s=0.3)

    def interrupt(signum: int, frame: object) -> None:
        raise _Stop

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.4)
        with pytest.raises(_Stop):
            driver.run("start_arm", None, {})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    pgid, child = (int(p) for p in (tmp_path / "pids").read_text().split())
    assert group_members(pgid) == [] and not _alive(child)


DUMP_ENV = """#!/usr/bin/env python3
import json, os
print(json.dumps(dict(os.environ), sort_keys=True))
print("TALLY-FACTS " + json.dumps({"serving": "up"}))
"""


def test_site_commands_do_not_see_the_key_passphrase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A site command that prints its environment shows no secret of the runner; pass_env is the only way in."""
    monkeypatch.setenv("TALLY_KEY_PASSPHRASE", "correct horse battery staple")
    monkeypatch.setenv("TALLY_DB", "postgresql+psycopg://ops:s3cr3t@db/ledger")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("SITE_REGION", "eu-1")
    (tmp_path / "dump.py").write_text(DUMP_ENV.replace("/usr/bin/env python3", sys.executable, 1))
    (tmp_path / "dump.py").chmod(0o755)
    shutil.copytree(SCRIPTS, tmp_path / "site-scripts")
    site = tmp_path / "site.toml"
    site.write_text('pass_env = ["SITE_REGION"]\n' + commands_site_text(commands={"preflight": "./dump.py"}))
    driver = load_site(site)
    result = driver.run("preflight", None, {"window": "w"})
    output = result.stdout.decode()
    for secret in ("correct horse battery staple", "s3cr3t", "aws-secret"):
        assert secret not in output
    env = json.loads(output.splitlines()[0])
    assert env["SITE_REGION"] == "eu-1" and "PATH" in env and env["TALLY_ACTION"] == "preflight"
    assert not {"TALLY_KEY_PASSPHRASE", "TALLY_DB", "AWS_SECRET_ACCESS_KEY"} & set(env)


def test_pass_env_cannot_name_tallys_own_variables(tmp_path: Path) -> None:
    shutil.copytree(SCRIPTS, tmp_path / "site-scripts")
    site = tmp_path / "site.toml"
    site.write_text('pass_env = ["TALLY_KEY_PASSPHRASE"]\n' + commands_site_text())
    with pytest.raises(FormatError, match=r"pass_env\[0\]: TALLY_KEY_PASSPHRASE is tally's own"):
        load_site(site)
