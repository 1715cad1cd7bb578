"""The qualification gate against real git repositories made by the test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from runner.gates.qualification import unit_dump

from .conftest import Site, tally
from .script import EXAMPLES

WINDOW_PY = '''"""The window runner (remote and runtime units are carried)."""

CAP_MHZ = 2300


class Remote:
    """Runs commands on a Spark."""

    def run(self, command, timeout=60):
        # run it over ssh
        return ["ssh", self.host, command, str(timeout)]


def runtime(env):
    return dict(env, SPEC_OVERRIDE=None)
'''

FILES = {
    "offload/launch/windows/pp4_cells.py": "CELLS = ['short-b1', '32k-b1']\n",
    "offload/launch/windows/PP4-sampled.env": "SPEC_OVERRIDE=fixed5\nDRAFT_SAMPLING=1\n",
    "offload/launch/windows/pp4_window.py": WINDOW_PY,
    "offload/dspark/k2.py": "K = 5\n",
    "offload/dspark/markov.py": "ORDER = 2\n",
    "README.md": "measurement layer notes\n",
}


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_NOSYSTEM="1", HOME=str(repo))
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    return path, commit(path, FILES, "qualified")


def receipt(tmp_path: Path, commit_id: str, verdict: str = "QUALIFIED") -> Path:
    path = tmp_path / f"admission-{commit_id[:8]}-{verdict}.json"
    path.write_text(json.dumps({"_type": "tally.admission-receipt/v1", "verdict": verdict, "commit": commit_id,
                                "window": "pp4-admission", "prepared_verifier_sha256": "5e" * 32}))
    return path


def run_gate(site: Site, tmp_path: Path, repo: Path, q: str, head: str, *extra: str,
             admission: Path | None = None) -> tuple[int, dict, str]:
    window = f"w-{head[:8]}"
    reg = tally("window", "register", EXAMPLES / "seed000-production-policy.toml", "--commit", head,
                "--window-id", window)
    assert reg.code == 0, reg.err
    result = tally("gate", "qualification", window, "--repo", repo, "--qualified-commit", q,
                   "--admission", admission or receipt(tmp_path, q), "--json", *extra)
    return result.code, json.loads(result.out) if result.out.strip() else {}, result.err


def test_identical_files_pass(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    head = commit(path, {"README.md": "measurement layer notes, edited\n"}, "outside the carried set")
    code, out, err = run_gate(site, tmp_path, path, q, head)
    assert code == 0, err
    assert out["verdict"] == "PASS" and out["evidence"]["head"] == head and out["evidence"]["qualified_commit"] == q
    files = {f["path"]: f for f in out["evidence"]["files"]}
    assert set(files) == {"offload/launch/windows/pp4_cells.py", "offload/launch/windows/PP4-sampled.env",
                          "offload/dspark/k2.py", "offload/dspark/markov.py"}
    assert all(f["identical"] and f["qualified_sha256"] == f["head_sha256"] for f in files.values())
    units = {u["unit"]: u for u in out["evidence"]["units"]}
    assert set(units) == {"offload/launch/windows/pp4_window.py:Remote.run",
                          "offload/launch/windows/pp4_window.py:runtime"}
    assert all(u["identical"] and len(u["head_sha256"]) == 64 for u in units.values())
    event = site.book.get(out["seq"])
    assert event.payload["gate"] == "qualification" and event.payload["commit"] == head


def test_changed_carried_file_fails_naming_it(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    head = commit(path, {"offload/launch/windows/PP4-sampled.env": "SPEC_OVERRIDE=fixed4\nDRAFT_SAMPLING=1\n"},
                  "change a carried file")
    code, out, _ = run_gate(site, tmp_path, path, q, head)
    assert code == 1 and out["verdict"] == "FAIL"
    assert "offload/launch/windows/PP4-sampled.env: changed" in out["summary"]
    (changed,) = [f for f in out["evidence"]["files"] if not f["identical"]]
    assert changed["path"] == "offload/launch/windows/PP4-sampled.env"
    assert changed["qualified_sha256"] != changed["head_sha256"]


def test_file_added_under_a_carried_prefix_fails(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    head = commit(path, {"offload/dspark/new_kernel.py": "X = 1\n"}, "add under prefix")
    code, out, _ = run_gate(site, tmp_path, path, q, head)
    assert code == 1 and "offload/dspark/new_kernel.py: missing at the qualified commit" in out["summary"]


def test_comment_only_change_in_a_carried_unit_passes(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    edited = WINDOW_PY.replace("        # run it over ssh\n", "        # run it over ssh (comment reworded)\n\n")
    edited = edited.replace("def runtime(env):", "def runtime(env):  # formatting and comments only")
    head = commit(path, {"offload/launch/windows/pp4_window.py": edited}, "comment only")
    code, out, err = run_gate(site, tmp_path, path, q, head, "--unit", "offload/launch/windows/pp4_window.py:Remote.run",
                              "--unit", "offload/launch/windows/pp4_window.py:runtime")
    assert code == 0, err
    assert all(u["identical"] for u in out["evidence"]["units"])
    assert out["evidence"]["files"] == []  # only the units were carried (options override the plan)


def test_changed_constant_in_a_carried_unit_fails(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    head = commit(path, {"offload/launch/windows/pp4_window.py": WINDOW_PY.replace("timeout=60", "timeout=90")},
                  "semantic change")
    code, out, _ = run_gate(site, tmp_path, path, q, head, "--unit", "offload/launch/windows/pp4_window.py:Remote.run",
                            "--unit", "offload/launch/windows/pp4_window.py:runtime")
    assert code == 1
    assert "offload/launch/windows/pp4_window.py:Remote.run: AST differs" in out["summary"]
    assert [u["identical"] for u in out["evidence"]["units"]] == [False, True]


def test_missing_commit_is_bad_input(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    size = site.size()
    code, _, err = run_gate(site, tmp_path, path, "deadbeef" * 5, q, admission=receipt(tmp_path, q))
    assert code == 2 and "is not in" in err
    assert site.size() == size + 1  # the registration only; no gate.result
    code, _, err = run_gate(site, tmp_path, tmp_path, q, q)  # not a repository
    assert code == 2


def test_receipt_must_say_qualified_for_q(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    head = commit(path, {"README.md": "x\n"}, "outside")
    code, out, _ = run_gate(site, tmp_path, path, q, head, admission=receipt(tmp_path, q, "NOT_QUALIFIED"))
    assert code == 1 and "not QUALIFIED" in out["summary"]
    code, out, _ = run_gate(site, tmp_path, path, q, head, admission=receipt(tmp_path, head))
    assert code == 1 and "not the qualified commit" in out["summary"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run_gate(site, tmp_path, path, q, head, admission=bad)[0] == 2


def test_head_must_be_the_plan_commit(site: Site, tmp_path: Path, repo: tuple[Path, str]) -> None:
    path, q = repo
    head = commit(path, {"README.md": "y\n"}, "outside")
    code, out, _ = run_gate(site, tmp_path, path, q, head, "--head", q)
    assert code == 1 and "is not the plan's commit" in out["summary"]


def test_unit_dump_ignores_positions_and_comments() -> None:
    a = unit_dump(WINDOW_PY.encode(), "Remote.run")
    b = unit_dump(("# header\n\n" + WINDOW_PY).encode(), "Remote.run")
    assert a is not None and a == b
    assert unit_dump(WINDOW_PY.encode(), "CAP_MHZ") != unit_dump(WINDOW_PY.replace("2300", "2150").encode(), "CAP_MHZ")
    assert unit_dump(WINDOW_PY.encode(), "Remote.missing") is None
    assert unit_dump(b"def broken(:\n", "broken") is None
