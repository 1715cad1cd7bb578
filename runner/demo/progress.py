"""What ``tally demo`` shows while it runs: its stage lines, a progress bar over each window's waves, and
the runner's routine step lines folded into the bar instead of printed one by one.

Three verbosities: ``-1`` (``-q``) prints nothing while running (the closing verdicts and
results are the command's), ``0`` prints each distinct line once (a line already shown, such as the
runner's ``read_thermal s1: ok`` before every wave of start s1, goes to the bar's
description and is counted, and the count is said at the next stage), ``1`` (``-v``)
prints every line. On a terminal the bar is shown and lines are word-wrapped to its
width (never cut inside a word); elsewhere lines are printed as they are, unwrapped.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, TextIO

from ..execution import LineFolder

__all__ = ["DemoDisplay"]


class DemoDisplay:
    """The demo's ``say`` (a line) and ``wave`` (a wave done) callbacks, with a bar when ``bar`` is true."""

    def __init__(self, *, verbosity: int = 0, bar: bool = False, out: TextIO | None = None,
                 width: int | None = None) -> None:
        self.verbosity = verbosity
        self.out = out or sys.stdout
        self.lines = LineFolder(every=verbosity > 0)
        self._console: Any = None
        self._bar: Any = None
        self._task: Any = None
        if bar and verbosity >= 0:
            from rich.console import Console

            from ..execution import wave_bar

            self._console = Console(file=self.out, width=width, highlight=False, markup=False)
            self._bar = wave_bar(self._console, transient=True)

    def __enter__(self) -> DemoDisplay:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, value, traceback)

    def say(self, text: str) -> None:
        """One line of the demo or of the runner."""
        if self.verbosity < 0:
            return
        if self.lines.repeat(text):
            if self._bar is not None and self._task is not None:
                self._bar.update(self._task, description=text.strip()[:60])
            return
        if text.startswith("\nstage ") or text.startswith("stage "):
            self._summarise_folded()
        self._print(text)

    def wave(self, done: int, total: int, label: str) -> None:
        """A wave of the running window finished (``label``: its start, cell and family)."""
        if self._bar is None:
            return
        if self._task is None or done <= 1:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(label, total=total)
        self._bar.update(self._task, completed=done, total=total, description=label[:60])

    def close(self) -> None:
        """Say how many routine lines were folded (``-v`` shows them)."""
        if self.verbosity >= 0:
            self._summarise_folded()

    def _summarise_folded(self) -> None:
        folded = self.lines.take()
        if folded is None:
            return
        count, most = folded
        self._print(f"  ({count} more routine line(s) like '{most}' folded into the progress display; "
                    "-v shows every line)")

    def _print(self, text: str) -> None:
        if self._console is not None:
            self._console.print(text, soft_wrap=False, overflow="fold", crop=False)
        else:
            print(text, file=self.out, flush=True)
