"""What a running window shows on a terminal: a progress bar over waves, and step lines.

Quiet (no bar, lines only when asked) when stdout is not a terminal or in ``--json``
mode. Rich is imported only when the bar is shown. Each distinct step line is printed
once; a line already shown (the runner's ``read_thermal s1: ok`` before every wave of
start s1) is counted, not printed again, and the count is said when the window's run
ends. ``verbose`` (``-v``) prints every line.
"""

from __future__ import annotations

import sys
from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..plan.model import Plan

__all__ = ["LineFolder", "Progress", "wave_bar"]


def wave_bar(console: Any = None, *, transient: bool = False) -> Any:
    """A rich progress bar over waves (description, bar, done of total, time elapsed) on ``console`` (default:
    rich's), its description shown as given: a label is text, never rich markup."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    return Bar(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), console=console, transient=transient)


class LineFolder:
    """Which lines to print: each distinct one once (every one when ``every``); the repeats are counted."""

    def __init__(self, *, every: bool = False) -> None:
        self.every = every
        self.folded: Counter[str] = Counter()
        self._seen: set[str] = set()

    def repeat(self, text: str) -> bool:
        """Is ``text`` a line already shown (then counted, not to be printed)?"""
        shape = text.strip()
        if not self.every and shape and shape in self._seen:
            self.folded[shape] += 1
            return True
        self._seen.add(shape)
        return False

    def take(self) -> tuple[int, str] | None:
        """How many repeats were counted since the last take, and the most frequent one; ``None``: none."""
        if not self.folded:
            return None
        count, most = sum(self.folded.values()), self.folded.most_common(1)[0][0]
        self.folded.clear()
        return count, most


class Progress:
    def __init__(self, *, enabled: bool, echo: bool = True, verbose: bool = False) -> None:
        self.enabled = enabled
        self.echo = echo
        self.lines = LineFolder(every=verbose)
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.enabled:
            self._bar = wave_bar()
            self._bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        folded = self.lines.take()
        if folded is not None:
            self._print(f"  ({folded[0]} repeated step line(s) like '{folded[1]}' not printed again; -v prints "
                        "every line)")
        if self._bar is not None:
            self._bar.__exit__(kind, value, traceback)

    def begin(self, total: int, plan: Plan) -> None:
        starts = " / ".join(s.label for s in plan.starts)
        if plan.stage_starts:
            starts += f", then the smoke stage on {' / '.join(s.label for s in plan.stage_starts)}"
        self.say(f"window {plan.window_id} ({plan.protocol}, {plan.mode}): {starts}; {total} waves; "
                 f"budget {plan.budget.hard_ceiling_min:g} min")
        if self._bar is not None:
            self._task = self._bar.add_task("waves", total=total)

    def say(self, text: str) -> None:
        if not self.echo:
            return
        if not self.lines.repeat(text):
            self._print(text)

    def _print(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text, highlight=False, markup=False)  # a server's [/x] is text
        else:
            print(text, file=sys.stdout, flush=True)

    def wave(self, done: int, total: int, label: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=total, description=label)
