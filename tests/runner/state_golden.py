"""The golden ``tally replay state --json`` outputs: the recorded ledgers and what the fold printed for them.

``python -m tests.runner.state_golden OUT`` runs every demo scenario (window, chain, pp3,
faults, power) and a window killed twice (SIGKILL mid-action, then its resume killed
right after it recorded the crash) before it is resumed to its end, and writes under
``OUT`` per ledger its events as exported lines (``<name>.events.jsonl.gz``) and the
bytes ``tally replay state --json`` printed for it at the sizes worth pinning
(``<name>.state.jsonl``: one ``{"size", "window", "output"}`` per line). The fixtures in
``tests/fixtures/state_golden`` were written by it from the fold as it was before the
read model became typed; ``tests/runner/test_state_golden.py`` folds the recorded events
again and compares the bytes.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ledger.event import Event, event_from_json
from ledger.store import Ledger

SCENARIOS = ("window", "chain", "pp3", "faults", "power")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state_golden"


def printed(events: Iterable[Event], window: str | None = None) -> str:
    """What ``tally replay state --json [--window W]`` prints for a ledger holding ``events``."""
    from runner.state import fold

    return json.dumps(fold(None, events).to_json(window), ensure_ascii=False, indent=None, sort_keys=False) + "\n"


def read_events(name: str, directory: Path = FIXTURES) -> list[Event]:
    with gzip.open(directory / f"{name}.events.jsonl.gz", "rt", encoding="utf-8") as lines:
        return [event_from_json(json.loads(line), f"{name}:{number}") for number, line in enumerate(lines, 1)]


def read_golden(name: str, directory: Path = FIXTURES) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (directory / f"{name}.state.jsonl").read_text().splitlines()]


def _write(out: Path, name: str, book: Ledger, sizes: Sequence[int]) -> None:
    events = list(book.events())
    with gzip.GzipFile(out / f"{name}.events.jsonl.gz", "wb", mtime=0) as raw:
        raw.write("".join(e.line() + "\n" for e in events).encode("utf-8"))
    windows = sorted({e.stream.removeprefix("window/") for e in events if e.stream.startswith("window/")})
    rows = []
    for size in sorted({*sizes, len(events)}):
        prefix = events[:size]
        rows.append({"size": size, "window": None, "output": printed(prefix)})
        if size == len(events):
            rows += [{"size": size, "window": w, "output": printed(prefix, w)} for w in windows]
    (out / f"{name}.state.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _interesting_sizes(events: Sequence[Event]) -> list[int]:
    """Prefixes worth pinning besides the whole ledger: just after each window's first HOLD, first wave, end of
    measurement, and every ``window.interrupted``; and the crash leaves an open host action at the kill point."""
    sizes = []
    seen: set[tuple[str, str]] = set()
    for index, event in enumerate(events, 1):
        key = (event.stream, event.type)
        if event.type in ("hold.opened", "wave.measured", "measurement.ended", "start.ended") and key not in seen:
            seen.add(key)
            sizes.append(index)
        elif event.type in ("window.interrupted", "window.admitted", "decision.recorded", "window.closed"):
            sizes.append(index)
    return sizes


def _demo(out: Path, scenario: str, scratch: Path) -> None:
    from runner.demo.scenarios import run_demo

    summary = run_demo(scratch / scenario, scenario, quiet=True, time_scale=0.01)
    assert summary["ok"], summary
    book = Ledger.open(str(scratch / scenario / "tally.db"))
    _write(out, scenario, book, _interesting_sizes(list(book.events())))


def _crash(out: Path, scratch: Path) -> None:
    from tests.execution.worlds import close, gate_all, window, world

    w = world(scratch / "crash", [window("seed000-controlled.toml", "crash-a")])
    tally = str(Path(sys.executable).with_name("tally"))

    def run(*args: str, crash: str | None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, TALLY_DB=str(w.directory / "tally.db"), TALLY_KEY=str(w.directory / ".tally/root.pem"))
        env.pop("TALLY_TEST_CRASH_AFTER", None)
        if crash:
            env["TALLY_TEST_CRASH_AFTER"] = crash
        return subprocess.run([tally, *args, "--site", str(w.directory / "site.toml"), "--json"], env=env,
                              capture_output=True, text=True, timeout=300)

    try:
        gate_all(w)
        sizes = []
        killed = run("window", "run", "crash-a", "--execute", crash="host.action:11")
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        sizes.append(w.book.size())  # crashed: its warm-up started, never finished (an unknown outcome)
        again = run("window", "resume", "crash-a", crash="window.interrupted")
        assert again.returncode == -signal.SIGKILL, again.stderr[-2000:]
        sizes.append(w.book.size())  # the resume recorded the crash, then died too
        done = run("window", "resume", "crash-a", crash=None)
        assert done.returncode == 0, done.stderr[-2000:]
        _write(out, "crash", w.book, [*sizes, *_interesting_sizes(list(w.book.events()))])
    finally:
        close(w)


def main(argv: Sequence[str]) -> int:
    out = Path(argv[0]) if argv else FIXTURES
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[1:])
    with tempfile.TemporaryDirectory() as scratch:
        for scenario in SCENARIOS:
            if not only or scenario in only:
                _demo(out, scenario, Path(scratch))
        if not only or "crash" in only:
            _crash(out, Path(scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
