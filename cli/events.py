"""Events one by one: ``tally append``, ``tally log``, ``tally show``."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from runner.app import append_event

from .common import check_seq, command, print_appended, session, write_data


def append(
    type_: Annotated[str, typer.Argument(metavar="TYPE", help="Event type, dotted (e.g. note.added).")],
    stream: Annotated[str, typer.Option(help="Stream the event belongs to.")],
    payload: Annotated[str, typer.Option(help="Payload JSON object, or @FILE (@- for stdin).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the stored event.")] = False,
) -> None:
    """Append one signed event; prints its seq."""
    print_appended(append_event(session, stream, type_, payload), json_out)


def log(
    stream: Annotated[str | None, typer.Option(help="Only this stream.")] = None,
    type_: Annotated[str | None, typer.Option("--type", help="Only this event type.")] = None,
    since: Annotated[int, typer.Option(help="Only events with seq greater than SEQ.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="One stored event per line (JSON lines).")] = False,
) -> None:
    """List events in seq order."""
    check_seq(since, "--since", low=0)
    book = session.ledger()
    write = sys.stdout.write
    for event in book.events(since, stream=stream, types=[type_] if type_ else None):
        if json_out:
            write_data(event.line() + "\n")
        else:
            write(f"{event.seq:>8}  {event.time}  {event.stream:<24} {event.type:<22} {event.hash[:16]}\n")


def show(
    seq: Annotated[int, typer.Argument(help="Event seq.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the stored event as JSON.")] = False,
) -> None:
    """Show one event."""
    event = session.ledger().get(check_seq(seq, "seq"))
    if json_out:
        write_data(event.line() + "\n")
        return
    print(f"seq     {event.seq}\nstream  {event.stream}\ntype    {event.type}\ntime    {event.time}")
    print(f"actor   {event.actor}\nprev    {event.prev}\nhash    {event.hash}\nsig     {event.sig}")
    print("payload " + json.dumps(event.payload, indent=2, ensure_ascii=False))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    command(app, "append")(append)
    command(app, "log")(log)
    command(app, "show")(show)
