"""An error is one stderr line whatever it carries: what a site's command, a server or a bundle wrote
(newlines, an ANSI escape that would clear or recolour the operator's terminal) is printed as text."""

from __future__ import annotations

import pytest
import typer

from cli.common import handle_errors
from ledger.errors import ExternalError


def test_a_site_error_with_escape_sequences_is_one_inert_line(capsys: pytest.CaptureFixture[str]) -> None:
    @handle_errors
    def run() -> None:
        raise ExternalError("the site's list_arms action failed: \x1b[2J\x1b[31mowned\x1b[0m\nsecond line\r\x07")

    with pytest.raises(typer.Exit) as exited:
        run()
    assert exited.value.exit_code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\x07" not in err and "\r" not in err
    assert err == "tally: the site's list_arms action failed: \\x1b[2J\\x1b[31mowned\\x1b[0m second line \\x07\n"
