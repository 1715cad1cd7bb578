"""``tally measure``: one stand-alone wave against an OpenAI-compatible server.

The wave itself is the application layer's (``runner.app.measure_server``); this module
parses the options, shows the progress bar, prints the report and maps the outcome to
the exit code.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runner.app import dump_report, measure_server

from .common import EXIT_FAILED, command, session

if TYPE_CHECKING:
    from runner.measure import WaveResult


EXIT_INTERRUPTED = 130


MEASURE_HELP = """\
Run one wave of streaming requests against an OpenAI-compatible server and report it.

Prompts come from a family file (JSONL, frozen order). Each request streams with
stream_options.include_usage, T=1, top_p=1, the given seed, max_tokens and ignore_eos,
and a fresh cache_salt. /metrics is read before and after the wave; the server's
counters (--counter-source vllm, llamacpp or sglang: rounds, drafts, draft tokens,
accepted, per position, decode seconds) are reported as deltas, and as missing (never
zero) when the server lacks them; --counter-source none reads no /metrics. The
server's gauges (running, waiting, KV usage) and this host's load average are recorded
before and after.

Definitions that differ from `vllm bench serve`: TTFT is measured to the first chunk
with content (bench: first chunk with any choice, e.g. chat's empty role chunk); chunk
intervals are gaps between content chunks (bench's ITL), round times only where the
counter source says a chunk is an engine step (vLLM); per-token ITL splits each gap
into its chunk's tokens (counted from token ids, streamed usage, else one per chunk, as
recorded) and TPOT is bench's; decode tok/s is (delivered tokens - tokens of the first
chunk) / (last chunk - first chunk), reported per request (p50) and pooled over the
wave (sum of tokens / sum of seconds), not a mean of rates. Acceptance rate, mean
acceptance length and per-position acceptance are computed as bench does. See
docs/measure.md.

Bounds (docs/measure.md): a request without --deadline is cut after 600 s; an SSE line
over 1 MiB fails its request; /metrics is read within 10 s and 16 MiB. Requests are
written to requests.jsonl as they finish and figures are accumulated, so memory does
not grow with --requests; with --ledger the wave must fit one event (1 MiB), checked
before anything is sent. Credentials in --url (or --metrics-url) are sent as an
Authorization header to that URL's origin (scheme, host, port) only, and never recorded;
a --header goes with every request.

Exit codes: 0 measured (see the summary for failed requests); 1 no request succeeded;
2 bad input; 3 the server did not answer; 130 interrupted (what was measured is still
written, marked interrupted).
"""


def measure(
    url: Annotated[str, typer.Option(help="Server base URL, e.g. http://127.0.0.1:8000 (with or without /v1).")],
    family: Annotated[Path, typer.Option(help="Family file: JSONL prompts in frozen order.")],
    metrics_url: Annotated[str | None, typer.Option(help="Metrics URL (default URL/metrics).")] = None,
    model: Annotated[str | None, typer.Option(help="Model name (default: the first the server lists).")] = None,
    requests: Annotated[int | None, typer.Option(
        help="Number of requests (default: every prompt once; more cycles the family).")] = None,
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 512,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--no-ignore-eos",
                                             help="Force the length with ignore_eos (vLLM).")] = True,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once (1 = batch 1).")] = 1,
    seed: Annotated[int, typer.Option(help="Per-request sampling seed.")] = 42,
    chat: Annotated[bool, typer.Option("--chat", help="Use /v1/chat/completions.")] = False,
    deadline: Annotated[float | None, typer.Option(
        help="Per-request deadline in seconds (cut requests are kept: censored or timed out).")] = None,
    wave_deadline: Annotated[float | None, typer.Option(help="Deadline for the whole wave in seconds.")] = None,
    priority: Annotated[int, typer.Option(help="vLLM request priority (sent when non-zero).")] = 0,
    token_ids: Annotated[bool, typer.Option("--token-ids/--no-token-ids",
                                            help="Ask for return_token_ids (exact tokens per chunk).")] = True,
    counter_source: Annotated[str, typer.Option(
        help="Where the server's counters come from: vllm, llamacpp, sglang or none (no /metrics read).")] = "vllm",
    spec_off: Annotated[bool, typer.Option(
        "--spec-off", help="The server runs no speculative decoding: rounds = generated tokens after each "
                           "request's first, accepted = 0 (no spec series needed).")] = False,
    header: Annotated[list[str] | None, typer.Option(
        help="Extra HTTP header 'Name: value' for every request (repeatable), e.g. an Authorization.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write summary.json and requests.jsonl here.")] = None,
    ledger: Annotated[bool, typer.Option("--ledger", help="Append the wave as wave.measured to the ledger.")] = False,
    measure_id: Annotated[str | None, typer.Option("--id", help="Id of the measurement (stream measure/<id>).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    with _term_as_interrupt():
        try:
            _measure(url, family, metrics_url, model, requests, max_tokens, ignore_eos, concurrency, seed, chat,
                     deadline, wave_deadline, priority, token_ids, header, out, ledger, measure_id, as_json,
                     counter_source, spec_off)
        except KeyboardInterrupt:
            # outside the wave (which turns an interrupt into a cancel and a record): nothing half-written is kept
            print("tally: interrupted", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, on_term) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, old)


def _measure(url: str, family: Path, metrics_url: str | None, model: str | None, requests: int | None,
             max_tokens: int, ignore_eos: bool, concurrency: int, seed: int, chat: bool, deadline: float | None,
             wave_deadline: float | None, priority: int, token_ids: bool, header: list[str] | None, out: Path | None,
             ledger: bool, measure_id: str | None, as_json: bool, counter_source: str = "vllm",
             spec_off: bool = False) -> None:
    progress = _Bar() if not as_json and sys.stderr.isatty() else None
    with measure_server(session, url, family, metrics_url=metrics_url, model=model, requests=requests,
                        max_tokens=max_tokens, ignore_eos=ignore_eos, concurrency=concurrency, seed=seed, chat=chat,
                        deadline=deadline, wave_deadline=wave_deadline, priority=priority, token_ids=token_ids,
                        headers=header or [], out=out, ledger=ledger, measure_id=measure_id,
                        counter_source=counter_source, spec_off=spec_off, progress=progress) as measured:
        if as_json:
            dump_report(measured.report, sys.stdout, indent=None)
            sys.stdout.write("\n")
        else:
            _print_report(measured.report, measured.wave, measured.out)
        if measured.interrupted:
            print("tally: interrupted; what was measured is recorded (marked interrupted)", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED)
        if not measured.ok:
            raise typer.Exit(EXIT_FAILED)


class _Bar:
    """The wave's progress bar on stderr (a terminal only; gone when the wave ends)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("measuring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             console=Console(stderr=True), transient=True)
        self._task: Any = None

    def start(self, total: int) -> None:
        self._task = self._bar.add_task("wave", total=total)
        self._bar.start()

    def advance(self) -> None:
        if self._task is not None:
            self._bar.advance(self._task)

    def stop(self) -> None:
        self._bar.stop()


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pcts(values: dict[str, float] | None, digits: int = 2) -> str:
    if not values:
        return "-"
    return "  ".join(f"{k} {_fmt(v, digits)}" for k, v in values.items())


def _print_report(report: dict[str, Any], wave: WaveResult, out: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    ctx, fig = report["measure"], report["figures"]
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"{ctx['requests']} requests to {ctx['url']} ({'chat' if ctx['chat'] else 'completions'}), "
                  f"model {ctx['model']}, family {ctx['family']} (sha256 {ctx['family_sha256'][:12]}), "
                  f"max_tokens {wave.max_tokens}, concurrency {wave.concurrency}, seed {wave.seed}")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("figure", style="bold")
    table.add_column("value")
    r = fig["requests"]
    table.add_row("requests", f"ok {r['ok']}  failed {r['failed']}  timed out {r['timed_out']}  "
                              f"censored {r['censored']}  cancelled {r['cancelled']}")
    if fig["early_stops"]:
        table.add_row("stopped early", f"{fig['early_stops']} delivered fewer than max_tokens")
    table.add_row("TTFT ms", _pcts(fig["ttft_ms"]))
    table.add_row("decode tok/s", f"per request p50 {_fmt(fig['decode_tps_per_request_p50'], 1)}  "
                                  f"pooled {_fmt(fig['decode_tps_pooled'], 1)}")
    steps = "one engine step each" if fig["chunks_are_steps"] else "not engine steps"
    table.add_row(f"chunk interval ms ({steps})", _pcts(fig["chunk_interval_ms"], 3))
    counted = ", ".join(f"{k} {v}" for k, v in (fig["token_count_sources"] or {}).items()) or "-"
    table.add_row("per-token ITL ms", f"{_pcts(fig['token_itl_ms'], 3)}  (tokens counted by {counted})")
    table.add_row("TPOT ms", _pcts(fig["tpot_ms"], 3))
    table.add_row("tokens per chunk", _fmt(fig["tokens_per_chunk"], 3))
    table.add_row("output tok/s", f"{_fmt(fig['output_tps'], 1)} over {_fmt(fig['duration_s'], 3)} s")
    server = fig["server"]
    if server is not None:
        per_pos = server["per_position_acceptance"]
        table.add_row("rounds (decode steps)", _fmt(server["rounds"]))
        table.add_row("drafts / draft tokens", f"{_fmt(server['drafts'])} / {_fmt(server['draft_tokens'])}")
        table.add_row("accepted tokens", _fmt(server["accepted_tokens"]))
        table.add_row("acceptance rate", _fmt(server["acceptance_rate"], 4))
        table.add_row("mean acceptance length", _fmt(server["mean_acceptance_length"], 3))
        table.add_row("per-position acceptance",
                      " ".join(f"{p:.3f}" for p in per_pos) if per_pos is not None else "- (series missing)")
        table.add_row("server decode s", _fmt(server["decode_s"], 4))
    console.print(table)
    if server is None:
        console.print(f"server counters unavailable: {wave.counters_note}")
    elif wave.counters.missing:
        console.print(f"missing series (not zero): {', '.join(wave.counters.missing)}")
    for note in wave.notes:
        if note != wave.counters_note:
            console.print(f"note: {note}")
    if not wave.complete:
        console.print(f"incomplete: {'; '.join(wave.incomplete_reasons)}")
    if out is not None:
        console.print(f"wrote {out / 'summary.json'} and {out / 'requests.jsonl'}")
    if "event" in report:
        event = report["event"]
        console.print(f"appended wave.measured seq {event['seq']} to {event['stream']} (hash {event['hash'][:16]})")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    command(app, "measure", help=MEASURE_HELP)(measure)
