"""Files the operator names, read as hostile input: never through a symlink, never blocking on a FIFO.

Every such file goes through ``ledger.strictfile.read_limited`` (the one bounded file
read): a plan, a site file, a family file, an admission or RNG receipt, a ``--probes``
file, a promotion policy and receipt, an ``@FILE`` argument. A refusal is one line,
exit 2, and nothing is appended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.errors import FormatError
from runner.plan.register import registered

from .conftest import Site, tally
from .script import EXAMPLES

PP = "seed000-production-policy"
REPO = Path(__file__).resolve().parents[2]


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    assert err.count("\n") == 1, repr(err)
    return err.strip()


def _linked_plan(tmp_path: Path) -> Path:
    """A symlink to the example plan, beside a symlink to its family files (so only the link is wrong)."""
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "families").symlink_to(EXAMPLES / "families")
    link = plans / "plan.toml"
    link.symlink_to(EXAMPLES / f"{PP}.toml")
    return link


def _receipts(tmp_path: Path, commit: str) -> tuple[Path, Path]:
    from runner.plan import load_plan

    tests = load_plan(EXAMPLES / f"{PP}.toml").rng_tests
    rng = tmp_path / "rng.json"
    rng.write_text(json.dumps({"_type": "tally.rng-receipt/v1", "verdict": "PASS", "commit": commit,
                               "kernel_sha256": "5e" * 32,
                               "tests": [{"name": name, "outcome": "passed"} for name in tests]}))
    admission = tmp_path / "admission.json"
    admission.write_text(json.dumps({"_type": "tally.admission-receipt/v1", "verdict": "QUALIFIED",
                                     "commit": "85" * 20, "prepared_verifier_sha256": "5e" * 32}))
    return rng, admission


def _register(site: Site) -> str:
    result = tally("window", "register", EXAMPLES / f"{PP}.toml", "--json")
    assert result.code == 0, result.err
    return str(json.loads(result.out)["window"])


def test_a_symlinked_plan_is_refused_and_nothing_is_appended(site: Site, tmp_path: Path) -> None:
    link = _linked_plan(tmp_path)
    size = site.size()
    result = tally("window", "register", link)
    assert result.code == 2
    assert _one_line(result.err) == f"tally: plan {link} is a symbolic link; refusing to follow it"
    assert site.size() == size


def test_a_symlinked_admission_receipt_is_refused_and_nothing_is_appended(site: Site, tmp_path: Path) -> None:
    window = _register(site)
    reg = registered(site.book, window)
    assert reg is not None
    rng, admission = _receipts(tmp_path, reg.plan.commit)
    link = tmp_path / "admission-link.json"
    link.symlink_to(admission)
    assert tally("gate", "rng", window, "--receipt", rng, "--admission", admission).code == 0  # the file itself passes
    size = site.size()
    result = tally("gate", "rng", window, "--receipt", rng, "--admission", link)
    assert result.code == 2 and "is a symbolic link; refusing to follow it" in _one_line(result.err)
    assert site.size() == size


def test_a_symlinked_probes_file_is_refused_before_any_probe_and_nothing_is_appended(site: Site,
                                                                                     tmp_path: Path) -> None:
    window = _register(site)
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps({"name": "r16-terminator", "path": "/v1/completions",
                                  "body": {"prompt": "Stop here.", "allowed_token_ids": [1]},
                                  "expect": {"status": 200, "finish_reason": "stop"}}) + "\n")
    link = tmp_path / "probes-link.jsonl"
    link.symlink_to(probes)
    size = site.size()
    result = tally("rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", tmp_path / "r",
                   "--window", window, "--probes", link)
    assert result.code == 2
    assert _one_line(result.err) == f"tally: --probes {link} is a symbolic link; refusing to follow it"
    assert site.size() == size and not (tmp_path / "r").exists()


@pytest.mark.parametrize("which", ["plan", "admission receipt", "probes"])
def test_a_fifo_is_refused_promptly_not_waited_on(site: Site, tmp_path: Path, which: str) -> None:
    window = _register(site)
    reg = registered(site.book, window)
    assert reg is not None
    rng, _ = _receipts(tmp_path, reg.plan.commit)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = {"plan": ["window", "register", str(fifo)],
            "admission receipt": ["gate", "rng", window, "--receipt", str(rng), "--admission", str(fifo)],
            "probes": ["rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", str(tmp_path / "r"),
                       "--window", window, "--probes", str(fifo)]}[which]
    size = site.size()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        done = subprocess.run([sys.executable, "-c", "from cli.app import main; main()", *args], cwd=site.path,
                              env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tally blocked on a FIFO given as the {which}")
    assert done.returncode == 2, done.stderr
    assert _one_line(done.stderr).endswith(f"{fifo} is a FIFO, not a regular file")
    assert site.size() == size


def test_read_limited_refuses_a_symlink_a_fifo_and_a_device(tmp_path: Path) -> None:
    from ledger.strictfile import read_limited, read_optional

    real = tmp_path / "real.json"
    real.write_bytes(b"{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_limited(real, "receipt", 2) == b"{}"
    with pytest.raises(FormatError, match=r"^receipt .*link\.json is a symbolic link; refusing to follow it$"):
        read_limited(link, "receipt", 100)
    with pytest.raises(FormatError, match=r"^receipt .*fifo is a FIFO, not a regular file$"):
        read_limited(fifo, "receipt", 100)
    with pytest.raises(FormatError, match=r"^receipt /dev/null is a device, not a regular file$"):
        read_limited("/dev/null", "receipt", 100)
    with pytest.raises(FormatError, match=r"^receipt .*tmp.* is a directory, not a regular file$"):
        read_limited(tmp_path, "receipt", 100)
    with pytest.raises(FormatError, match=r"^receipt .*real\.json is over the 1-byte limit$"):
        read_limited(real, "receipt", 1)
    assert read_optional(tmp_path / "absent", "receipt", 100) is None
    with pytest.raises(FormatError, match=r"symbolic link"):
        read_optional(link, "receipt", 100)


def test_an_at_file_argument_through_a_symlink_is_refused(site: Site, tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text("{}")
    link = tmp_path / "payload-link.json"
    link.symlink_to(payload)
    size = site.size()
    result = tally("append", "x.y", "--stream", "s", "--payload", f"@{link}")
    assert result.code == 2 and "is a symbolic link; refusing to follow it" in _one_line(result.err)
    assert site.size() == size


def test_a_fifo_planted_as_the_signing_key_is_refused_promptly(tmp_path: Path) -> None:
    """The key is opened non-blocking: a FIFO is refused at once, a symlinked key (secret mounts) still loads."""
    from ledger.errors import FormatError
    from ledger.keys import generate_key_file, load_signer

    fifo = tmp_path / "root.pem"
    os.mkfifo(fifo)
    code = ("import sys\nfrom ledger.keys import load_signer\nfrom ledger.errors import FormatError\n"
            f"try:\n    load_signer({str(fifo)!r})\nexcept FormatError as e:\n    print(e)\n    sys.exit(2)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(REPO)),
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("loading a key blocked on a FIFO")
    assert done.returncode == 2 and "is a FIFO, not a regular file" in done.stdout, (done.stdout, done.stderr)
    real = tmp_path / "keys" / "root.pem"
    real.parent.mkdir()
    signer = generate_key_file(real)
    link = tmp_path / "mounted.pem"
    link.symlink_to(real)
    assert load_signer(link).public_raw == signer.public_raw
    with pytest.raises(FormatError, match="not a regular file"):
        load_signer(tmp_path / "keys")
