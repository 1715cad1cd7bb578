"""What ships: the demo's data inside the package (one source of truth: examples/), an installed wheel that
runs every demo scenario from anywhere, the license as an SPDX string, and example runs git ignores."""

from __future__ import annotations

import filecmp
import subprocess
import tomllib
from pathlib import Path

import pytest

from runner.app import DEMO_SCENARIOS
from runner.demo.scenarios import DATA, DATA_FILES
from tests.demo_runs import DemoRuns, wheel_env

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_demo_data_is_a_copy_of_examples() -> None:
    """runner/demo/data/ is examples/'s plans and families, byte for byte (fix drift with cp -r from examples/)."""
    shipped = _files(DATA)
    wanted = []
    for name in DATA_FILES:
        source = EXAMPLES / name
        wanted += [name] if source.is_file() else [f"{name}/{p}" for p in _files(source)]
    assert shipped == sorted(wanted)
    different = [name for name in wanted if not filecmp.cmp(EXAMPLES / name, DATA / name, shallow=False)]
    assert different == [], f"runner/demo/data drifted from examples/: {different}"


def test_package_data_covers_the_demo_data() -> None:
    """Every file under runner/demo/data matches a package-data pattern of pyproject.toml."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["runner"]
    missing = [name for name in _files(DATA)
               if not any(Path("demo/data", name).match(pattern) and Path("demo/data", name).parent ==
                          Path(pattern).parent for pattern in patterns)]
    assert missing == []


def test_license_is_an_spdx_string() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["project"]["license"] == "Apache-2.0"


def test_example_site_runs_leave_nothing_untracked() -> None:
    """What docs/real-servers.md's walk-throughs leave in examples/site-* is ignored by git (the key above all)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    left = [f"examples/{site}/{name}" for site in ("site-llamacpp", "site-vllm")
            for name in ("tally.db", "tally.db-wal", ".tally/root.pem", "state/engine.json", "report/report.html",
                         "rehearsal/rehearsal.json", "bundle/events.jsonl")]
    proc = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=REPO, input="\n".join(left),
                          capture_output=True, text=True)
    assert sorted(proc.stdout.split()) == sorted(left)
    tracked = subprocess.run(["git", "check-ignore", "--no-index", "examples/site-llamacpp/site.toml"], cwd=REPO,
                             capture_output=True, text=True)
    assert tracked.returncode == 1  # the example itself is not ignored


# --------------------------------------------------------------------------- the installed wheel


@pytest.mark.slow
def test_installed_wheel_runs_every_demo_scenario_from_another_directory(installed_wheel: Path,
                                                                        demo_runs: DemoRuns) -> None:
    """The wheel's ``tally demo`` runs each scenario from outside the checkout (the session's shared runs,
    ``tests/demo_runs.py``, which ``tests/test_readme.py`` reads too)."""
    done = demo_runs.get(*DEMO_SCENARIOS)
    elsewhere = demo_runs.elsewhere
    where = subprocess.run([str(installed_wheel / "bin" / "python"), "-c", "import runner; print(runner.__file__)"],
                           cwd=elsewhere, env=wheel_env(), capture_output=True, text=True, check=True)
    assert str(installed_wheel) in where.stdout and str(REPO) not in where.stdout  # the wheel's copy, not the checkout's
    assert [run.scenario for run in done] == list(DEMO_SCENARIOS)
    for run in done:
        proc, scenario = run.proc, run.scenario
        assert proc.returncode == 0, f"{scenario}: {proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr
        assert run.directory.parent == elsewhere and (run.directory / "tally.db").is_file()
        if scenario == "ledger":
            assert "caught" in proc.stdout
            continue
        summary = run.summary
        assert summary["ok"] and summary["bundle_audit"], scenario
        assert all(w.get("replay", "MATCH") == "MATCH" for w in summary["windows"]), scenario
