"""Every parser the CLI exposes, fed random bytes and random deep JSON/TOML.

Targets: ``append --payload @FILE`` and inline, ``verdict compute``, ``receipt verify``
(the envelope file), ``gate standard-spec --config @FILE``, ``window register PLAN.toml``,
a family file reached through ``window register``, ``window run --site --dry-run``, and
``sim serve --config`` (TOML and ``.json``).

For each input: no traceback, exactly one line on stderr, nothing appended to the ledger,
and exit 2, with two stated exceptions:

- ``receipt verify`` exits 1 when the envelope is strict JSON (within the bounds) but
  fails verification (``FAIL FILE: ...``, still one line); never when it is not JSON;
- ``sim serve --config`` exits 0 when the document is a valid simulator config (the
  empty document is: every default); the server is replaced by a fake here.

JSON objects are not fed to the two targets that would accept one (``append`` appends
it, ``gate standard-spec`` judges it and records a gate.result): there a valid document
is meant to append. Most cases run in-process (CliRunner); a few deep documents also run
through the real ``tally`` executable, where the interpreter's stack is its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.app import app
from ledger.errors import FormatError
from ledger.strictjson import read_json

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "examples" / "seed000-production-policy.toml"
WINDOW = "pp4-win2-production-policy"
OPINIONS_SHA = "b40dec6e9e19fa6010b8414227551de23877c73c75528673e0b5da06b95dfd99"


@dataclass(frozen=True)
class Setup:
    dir: Path
    db: str
    key: str
    vkey: str

    def events(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])

    def run(self, *args: str) -> tuple[int, str, str]:
        result = runner.invoke(app, ["--db", self.db, "--key", self.key, *args])
        return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    base = tmp_path_factory.mktemp("fuzz")
    db = str(base / "tally.db")
    key = base / ".tally" / "root.pem"
    assert runner.invoke(app, ["--db", db, "init", "--origin", "tally.test/fuzz"]).exit_code == 0
    made = Setup(base, db, str(key), "")
    code, _, err = made.run("window", "register", str(PLAN))
    assert code == 0, err
    code, vkey, err = made.run("keys", "vkey")
    assert code == 0, err
    plan_dir = base / "plan"
    shutil.copytree(PLAN.parent / "families", plan_dir / "families")
    return Setup(base, db, str(key), vkey.strip())


# ---------------------------------------------------------------------------- documents

_OPENERS = ["[", '{"a":', "[[", '{"k": [', '[{"x":']
_CLOSERS = {"[": "]", '{"a":': "}", "[[": "]]", '{"k": [': "]}", '[{"x":': "}]"}


# Just past the 64-level bound, or far past the interpreter's recursion limit.
depths = st.one_of(st.integers(65, 200), st.integers(900, 4000))


@st.composite
def deep_json(draw: st.DrawFn) -> bytes:
    """JSON nested past the 64-level bound (up to 4000 levels), balanced, truncated or trailed by junk."""
    depth = draw(depths)
    pattern = draw(st.lists(st.sampled_from(_OPENERS), min_size=1, max_size=4))
    openers = (pattern * depth)[:depth]
    inner = draw(st.sampled_from(["0", '"s"', "null", "[]", "{}", ""]))
    closers = "".join(_CLOSERS[o] for o in reversed(openers))
    ending = draw(st.sampled_from(["balanced", "truncated", "junk"]))
    if ending == "truncated":
        closers = closers[: draw(st.integers(0, max(0, len(closers) - 1)))]
    elif ending == "junk":
        closers += draw(st.text(max_size=10))
    return ("".join(openers) + inner + closers).encode()


@st.composite
def deep_toml(draw: st.DrawFn) -> bytes:
    """TOML nested past the 64-level bound (up to 4000 levels): arrays, inline tables, dotted headers."""
    depth = draw(depths)
    shape = draw(st.sampled_from(["array", "inline", "header", "mixed"]))
    if shape == "array":
        text = "a = " + "[" * depth + "1" + "]" * depth
    elif shape == "inline":
        text = "a = " + "{ b = " * depth + "1" + " }" * depth
    elif shape == "header":
        text = "[" + ".".join(["t"] * depth) + "]\nv = 1"
    else:
        text = "a = " + "[{ b = " * depth + "1" + "}]" * depth
    return (draw(st.sampled_from(["", 'kind = "sim"\n', 'window_id = "w"\n'])) + text + "\n").encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=16,
)
random_json = json_values.map(lambda v: json.dumps(v).encode())
toml_alphabet = st.text(alphabet='[]{}="\'.,#ab1 \n\t-+:tfkind', max_size=200).map(str.encode)
random_bytes = st.binary(max_size=600)

JSON_INPUTS = st.one_of(random_bytes, deep_json(), random_json)
TOML_INPUTS = st.one_of(random_bytes, deep_toml(), toml_alphabet)


def _is_object(data: bytes) -> bool:
    try:
        return isinstance(read_json(data, "x"), dict)
    except FormatError:
        return False


def _strict_json(data: bytes) -> bool:
    try:
        read_json(data, "x")
    except FormatError:
        return False
    return True


def check(setup: Setup, args: list[str], allowed: tuple[int, ...] = (2,)) -> int:
    before = setup.events()
    code, _out, err = setup.run(*args)
    assert "Traceback" not in err, err
    assert code in allowed, (code, err)
    if code != 0:
        assert err.count("\n") == 1 and err.endswith("\n"), repr(err)
    assert setup.events() == before, "a refused input appended something"
    return code


# ---------------------------------------------------------------------------- targets


def _target_args(setup: Setup, target: str, data: bytes) -> tuple[list[str], tuple[int, ...]]:
    d = setup.dir
    if target == "append-file":
        (d / "payload.json").write_bytes(data)
        return ["append", "note.added", "--stream", "fuzz", "--payload", f"@{d / 'payload.json'}"], (2,)
    if target == "append-inline":
        text = data.decode("utf-8", "replace").replace("\x00", "")
        assume(not text.startswith("@") and not _is_object(text.encode()))
        return ["append", "note.added", "--stream", "fuzz", "--payload", text], (2,)
    if target == "verdict-compute":
        (d / "input.json").write_bytes(data)
        return ["verdict", "compute", str(d / "input.json")], (2,)
    if target == "receipt-verify":
        (d / "r.dsse.json").write_bytes(data)
        (d / "r.tlog-proof").write_text("c2sp.org/tlog-proof@v1\nindex 0\n\n")
        allowed = (1, 2) if _strict_json(data) else (2,)
        return ["receipt", "verify", str(d / "r.dsse.json"), "--vkey", setup.vkey], allowed
    if target == "standard-spec":
        (d / "config.json").write_bytes(data)
        return ["gate", "standard-spec", WINDOW, "--start", "s1", "--config", f"@{d / 'config.json'}"], (2,)
    if target == "window-register":
        (d / "plan.toml").write_bytes(data)
        return ["window", "register", str(d / "plan.toml")], (2,)
    if target == "family-file":
        plan = d / "plan"
        (plan / "families" / "opinions.jsonl").write_bytes(data)
        text = PLAN.read_text().replace(OPINIONS_SHA, hashlib.sha256(data).hexdigest())
        (plan / "plan.toml").write_text(text)
        return ["window", "register", str(plan / "plan.toml")], (2,)
    if target == "site":
        (d / "site.toml").write_bytes(data)
        return ["window", "run", WINDOW, "--site", str(d / "site.toml"), "--dry-run"], (2,)
    if target in ("sim-config-toml", "sim-config-json"):
        path = d / ("sim.toml" if target == "sim-config-toml" else "sim.json")
        path.write_bytes(data)
        return ["sim", "serve", "--config", str(path)], (0, 2)
    raise AssertionError(target)


JSON_TARGETS = ["append-file", "append-inline", "verdict-compute", "receipt-verify", "standard-spec",
                "family-file", "sim-config-json"]
TOML_TARGETS = ["window-register", "site", "sim-config-toml"]
OBJECT_ACCEPTING = ("append-file", "append-inline", "standard-spec")


def _fuzz_one(setup: Setup, target: str, data: bytes) -> None:
    if target in OBJECT_ACCEPTING:
        assume(not _is_object(data))
    args, allowed = _target_args(setup, target, data)
    served: list[Any] = []
    with mock.patch("runner.sim.serve", lambda *a, **k: served.append(a)):
        code = check(setup, args, allowed)
    if target.startswith("sim-config"):
        assert (code == 0) == bool(served), "exit 0 only when the config was valid and served"


@pytest.mark.parametrize("target", JSON_TARGETS)
@given(data=JSON_INPUTS)
def test_cli_parsers_fuzz(setup: Setup, target: str, data: bytes) -> None:
    _fuzz_one(setup, target, data)


@pytest.mark.parametrize("target", TOML_TARGETS)
@given(data=TOML_INPUTS)
def test_cli_parsers_fuzz_toml(setup: Setup, target: str, data: bytes) -> None:
    _fuzz_one(setup, target, data)


@pytest.mark.parametrize("target", JSON_TARGETS + TOML_TARGETS)
@given(data=deep_json() | deep_toml())
def test_cli_parsers_fuzz_deep_is_always_refused(setup: Setup, target: str, data: bytes) -> None:
    """Deep documents in either syntax are refused by every parser, whatever it expects."""
    if target in OBJECT_ACCEPTING:
        assume(not _is_object(data))
    args, _ = _target_args(setup, target, data)
    with mock.patch("runner.sim.serve", lambda *a, **k: None):
        check(setup, args, (2,))


# ---------------------------------------------------------------------------- real processes

DEEP = {"json": ("[" * 5000 + "]" * 5000).encode(), "toml": ("a = " + "[" * 5000 + "]" * 5000 + "\n").encode()}


@pytest.mark.parametrize(("target", "kind"), [("append-file", "json"), ("verdict-compute", "json"),
                                              ("receipt-verify", "json"), ("window-register", "toml"),
                                              ("sim-config-toml", "toml")])
def test_cli_parsers_deep_in_a_real_process(setup: Setup, target: str, kind: str) -> None:
    args, _ = _target_args(setup, target, DEEP[kind])
    tally = Path(sys.executable).with_name("tally")
    before = setup.events()
    proc = subprocess.run([str(tally), "--db", setup.db, "--key", setup.key, *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ), cwd=setup.dir)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""
    assert setup.events() == before
