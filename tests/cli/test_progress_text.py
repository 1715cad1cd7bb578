"""A running window's lines and bar labels are text: brackets a server or a label put there are shown as they
are, never read as rich markup (an unmatched ``[/...]`` would raise mid-window, a ``[bold]`` would vanish)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from runner.demo.progress import DemoDisplay
from runner.execution.progress import Progress, wave_bar

LINE = "wave s1/short-b1 failed: HTTP 503 from [/v1/completions]: [bold]busy[/bold]"


def test_window_progress_prints_a_step_line_with_brackets_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress(enabled=True) as bar:
        bar.say(LINE)
    assert LINE in capsys.readouterr().out


@pytest.mark.parametrize("transient", [False, True])
def test_wave_bar_shows_a_label_with_brackets_as_it_is(transient: bool) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    label = "s2 [/short-b1] [red]opinions[/red]"
    with wave_bar(console, transient=transient) as bar:
        task = bar.add_task(label, total=2)
        bar.update(task, completed=1)
        bar.refresh()
    assert label in out.getvalue()


def test_demo_display_prints_a_line_with_brackets_as_it_is() -> None:
    out = io.StringIO()
    with DemoDisplay(bar=True, out=out, width=200) as display:
        display.say(LINE)
        display.wave(1, 2, "s1 [/short-b1]")
        display.close()
    assert LINE in out.getvalue()


@pytest.mark.parametrize("verbose", [False, True])
def test_window_progress_prints_a_repeated_step_line_once_unless_verbose(verbose: bool,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with Progress(enabled=False, verbose=verbose) as bar:
        for _ in range(3):
            bar.say("read_thermal s1: ok")
        bar.say("start_arm s2: ok")
    lines = capsys.readouterr().out.splitlines()
    if verbose:
        assert lines == ["read_thermal s1: ok"] * 3 + ["start_arm s2: ok"]
    else:
        assert lines == ["read_thermal s1: ok", "start_arm s2: ok",
                         "  (2 repeated step line(s) like 'read_thermal s1: ok' not printed again; -v prints every line)"]
