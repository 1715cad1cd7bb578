"""What ships: the demo's data inside the package (one source of truth: examples/), an installed wheel that
runs every demo scenario from anywhere, the license as an SPDX string, and example runs git ignores."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runner.app import DEMO_SCENARIOS
from runner.demo.scenarios import DATA, DATA_FILES

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


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel built from the package's sources, installed in a fresh virtualenv (one per session).

    Its dependencies come from the machine's package index (pip's own configuration)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("ledger", "runner", "cli", "migrations"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = root / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("tally-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                             capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]
    yield venv


@pytest.mark.slow
def test_installed_wheel_runs_every_demo_scenario_from_another_directory(installed: Path,
                                                                        tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import runner; print(runner.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert str(installed) in where.stdout and str(REPO) not in where.stdout  # the wheel's copy, not the checkout's
    tally = str(installed / "bin" / "tally")

    def run(scenario: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        args = [tally, "demo", "--dir", f"demo-{scenario}"] + ([] if scenario == "window" else
                                                              ["--scenario", scenario])
        if scenario != "ledger":
            args.append("--json")
        return scenario, subprocess.run(args, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900)

    # two at a time: each scenario is one process on one core, and the machines have two
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(run, DEMO_SCENARIOS))
    assert [scenario for scenario, _ in done] == list(DEMO_SCENARIOS)
    for scenario, proc in done:
        assert proc.returncode == 0, f"{scenario}: {proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr
        if scenario == "ledger":
            assert "caught" in proc.stdout
            continue
        summary = json.loads(proc.stdout)
        assert summary["ok"] and summary["bundle_audit"], scenario
        assert all(w.get("replay", "MATCH") == "MATCH" for w in summary["windows"]), scenario
        assert (elsewhere / f"demo-{scenario}" / "tally.db").is_file()
