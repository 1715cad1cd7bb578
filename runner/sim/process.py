"""Serving in the foreground: ``tally sim serve`` and ``python -m runner.sim``.

Prints one line ``tally sim: serving URL (...)`` once the port is bound (a parent
process reads the URL from it), then serves until SIGINT or SIGTERM, and stops
cleanly: streams in progress are cut, the port is released, the exit code is 0.
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from ledger.errors import TallyError

from .config import SimConfig
from .handle import resolve_config, start

__all__ = ["main", "serve"]


def serve(config: SimConfig | str | Path | None = None, *, host: str = "127.0.0.1", port: int = 0,
          seed: int | None = None, time_scale: float | None = None, out: TextIO | None = None) -> None:
    """Serve until SIGINT/SIGTERM (must run in the main thread)."""
    out = out or sys.stdout
    resolved = resolve_config(config, seed=seed, time_scale=time_scale)
    # A dedicated simulator process: timely thread hand-offs, and collections that do not
    # rescan the start-up objects (the stream threads allocate few cycles).
    sys.setswitchinterval(0.0005)
    handle = start(resolved, host=host, port=port)
    gc.freeze()
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        arms = ", ".join(resolved.arm_names())
        print(f"tally sim: serving {handle.url} (model {resolved.model}, arms {arms}, time scale "
              f"{resolved.time_scale:g}, seed {resolved.seed}; control {handle.control_url})", file=out, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        handle.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)
        print("tally sim: stopped", file=out, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.sim", description="Serve the vLLM simulator.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--config", default=None, help="simulator config (TOML or JSON)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--time-scale", type=float, default=None)
    args = parser.parse_args(argv)
    try:
        serve(args.config, host=args.host, port=args.port, seed=args.seed, time_scale=args.time_scale)
    except TallyError as exc:
        print(f"tally sim: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tally sim: cannot serve on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 3
    return 0
