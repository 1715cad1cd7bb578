"""``tally measure``: one stand-alone wave against an OpenAI-compatible server.

Heavy imports (httpx, numpy, prometheus_client, the ledger store) happen inside the
command so that ``tally --version`` stays fast.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, overload

import typer

from ledger.errors import FormatError

from .common import EXIT_FAILED, OutDir, check_out, command, state

if TYPE_CHECKING:
    from runner.measure import Family, Prompt, RequestRecord, WaveResult
    from runner.measure.totals import WaveTotals
    from runner.measure.urls import OriginAuth


EXIT_INTERRUPTED = 130
UNSENT_LISTED = 1_000         # requests never sent (a stopped wave) listed one by one; the rest are counted
LEDGER_RESERVE = 64 << 10     # event bytes kept for everything but the per-request lists
_TTFT_BYTES = 25              # one float of client.ttft_s and its comma, at most


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
    from runner.measure import list_models, load_family
    from runner.measure.sources import select_source
    from runner.measure.urls import OriginAuth, server_url

    select_source(counter_source)   # a bad name is one line, exit 2, before anything is read or sent

    for name, value in (("--requests", requests), ("--max-tokens", max_tokens), ("--concurrency", concurrency)):
        if value is not None and value < 1:
            raise FormatError(f"{name} must be at least 1")
    for name, fvalue in (("--deadline", deadline), ("--wave-deadline", wave_deadline)):
        if fvalue is not None and not fvalue > 0:
            raise FormatError(f"{name} must be positive")
    server = server_url(url.rstrip("/"), "--url")
    metrics = server_url(metrics_url, "--metrics-url", query=True) if metrics_url is not None else None
    if measure_id is not None and (not measure_id or any(c.isspace() or c == "/" for c in measure_id)):
        raise FormatError("--id must be non-empty, without spaces or '/'")
    headers = _headers(header or [])
    if server.authorized and any(name.lower() == "authorization" for name in headers):
        raise FormatError("credentials in --url and an Authorization --header: give one of them")
    # each URL's credentials go to its own origin only (a --metrics-url elsewhere gets its own, or none)
    auth = OriginAuth(server, *(() if metrics is None else (metrics,)))
    check_out(out, "requests.jsonl", "summary.json")  # a planted symlink is refused before any request
    loaded = load_family(family)
    prompts = _Cycle(loaded.prompts, requests if requests is not None else len(loaded.prompts))
    if ledger:
        _check_fits_one_event(prompts, loaded)
    base = server.url.removesuffix("/v1")
    # Reachability first (exit 3 with one line); also the default model.
    models = list_models(base, headers=headers, auth=auth)
    if model is None:
        if not models:
            raise FormatError(f"{base}/v1/models lists no model; pass --model")
        model = models[0]
    if ledger:  # fail before measuring, not after
        book, signer = state.ledger(), state.signer()
    mid = measure_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ-") + os.urandom(3).hex()
    with contextlib.ExitStack() as stack:
        out_dir = stack.enter_context(OutDir.open(out)) if out is not None else None
        with contextlib.ExitStack() as records:  # requests.jsonl grows in place as requests finish
            records_file = records.enter_context(out_dir.growing("requests.jsonl")) if out_dir is not None else None
            wave, interrupted = _run(base, metrics.url if metrics is not None else f"{base}/metrics", prompts,
                                     loaded, model=model, max_tokens=max_tokens, seed=seed, concurrency=concurrency,
                                     deadline=deadline, wave_deadline=wave_deadline, chat=chat,
                                     ignore_eos=ignore_eos, priority=priority, token_ids=token_ids, headers=headers,
                                     auth=auth,
                                     keep_records=ledger, records_file=records_file, spool_parent=out,
                                     show_progress=not as_json and sys.stderr.isatty(),
                                     counter_source=counter_source, speculative=False if spec_off else None)
        try:
            _report(wave, interrupted, context={
                "id": mid, "url": base, "metrics_url": wave.metrics_url, "model": model, "family": loaded.name,
                "family_file": str(family), "family_sha256": loaded.sha256, "requests": len(prompts), "chat": chat,
                "ignore_eos": ignore_eos, "priority": priority, "deadline_s": deadline,
                "wave_deadline_s": wave_deadline, "interrupted": interrupted, "notes": list(wave.notes),
                "counter_source": counter_source, "spec_off": spec_off,
            }, out=out_dir, ledger=(book, signer, mid) if ledger else None, as_json=as_json)
        finally:
            wave.close()


def _report(wave: WaveResult, interrupted: bool, *, context: dict[str, Any], out: OutDir | None,
            ledger: tuple[Any, Any, str] | None, as_json: bool) -> None:
    from runner.measure.spool import dump_json

    report = {"measure": context, "wave": wave.summary(), "figures": wave.figures()}
    if out is not None:
        with out.stream("summary.json") as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
            dump_json(report, text, indent=2)
            text.write("\n")
            text.flush()
            text.detach()
    if ledger is not None:
        book, signer, mid = ledger
        report["event"] = _append(book, signer, mid, wave, context)
    if as_json:
        dump_json(report, sys.stdout, indent=None)
        sys.stdout.write("\n")
    else:
        _print_report(report, wave, None if out is None else out.path)
    if interrupted:
        print("tally: interrupted; what was measured is recorded (marked interrupted)", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)
    if not wave.ok:
        raise typer.Exit(EXIT_FAILED)


class _Cycle(Sequence["Prompt"]):
    """``count`` prompts taking the family's in order, cycling, without building the list."""

    def __init__(self, prompts: tuple[Prompt, ...], count: int) -> None:
        self._prompts, self._count = prompts, count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Prompt: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Prompt]: ...

    def __getitem__(self, index: int | slice) -> Prompt | Sequence[Prompt]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return self._prompts[index % self._count % len(self._prompts)]


def _check_fits_one_event(prompts: Sequence[Prompt], family: Family) -> None:
    """With --ledger the wave is one wave.measured event: refuse, before sending anything, one that may not fit."""
    from ledger.canonical import MAX_BODY_BYTES
    from runner.measure.record import summary_entry_bound

    count = len(prompts)
    longest = max((p.id for p in family.prompts), key=lambda pid: len(json.dumps(pid, ensure_ascii=False).encode()))
    each = summary_entry_bound(longest, count - 1) + _TTFT_BYTES
    if LEDGER_RESERVE + count * each > MAX_BODY_BYTES:
        most = (MAX_BODY_BYTES - LEDGER_RESERVE) // each
        raise FormatError(f"--ledger: {count} requests may not fit one wave.measured event (the 1 MiB event body "
                          f"limit; up to {each} bytes of per-request summary each): at most {most} requests with "
                          "--ledger, or measure without --ledger (--out keeps every request)")


def _headers(values: list[str]) -> dict[str, str]:

    headers = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise FormatError(f"--header must be 'Name: value', got {value!r}")
        headers[name.strip()] = content.strip()
    return headers


def _run(base: str, metrics_url: str, prompts: Sequence[Prompt], family: Family, *, model: str, max_tokens: int,
         seed: int, concurrency: int, deadline: float | None, wave_deadline: float | None, chat: bool,
         ignore_eos: bool, priority: int, token_ids: bool, headers: dict[str, str],
         auth: OriginAuth, keep_records: bool, records_file: BinaryIO | None,
         spool_parent: Path | None, show_progress: bool, counter_source: str = "vllm",
         speculative: bool | None = None) -> tuple[WaveResult, bool]:
    """Run the wave on a worker thread so that Ctrl-C/SIGTERM cancel it and keep what was measured.

    Each finished request is written to ``records_file`` at once. Unless ``keep_records``
    (the ledger's blob needs them), records are not kept: figures accumulate in a spool.
    """
    from runner.measure import measure_wave
    from runner.measure.totals import WaveTotals

    cancel = threading.Event()
    finished = threading.Event()
    box: dict[str, Any] = {}
    write_lock = threading.Lock()
    progress, task = _progress(len(prompts)) if show_progress else (None, None)
    # the spool goes into --out (a disk the user chose), else to $TMPDIR
    totals: WaveTotals | None = None if keep_records else WaveTotals.spooled(parent=spool_parent)

    def on_request(record: RequestRecord) -> None:
        if records_file is not None:
            line = record.json_line()
            with write_lock:
                records_file.write(line)
                records_file.flush()
        if progress is not None and task is not None:
            progress.advance(task)

    def work() -> None:
        try:
            box["wave"] = measure_wave(
                base, metrics_url, prompts, model=model, max_tokens=max_tokens, seed=seed, concurrency=concurrency,
                deadline_s=deadline, wave_deadline_s=wave_deadline, chat=chat, ignore_eos=ignore_eos,
                priority=priority, family=family.name, return_token_ids=token_ids, cancel=cancel,
                on_request=on_request, headers=headers, auth=auth, totals=totals,
                unsent_records=None if keep_records else UNSENT_LISTED, counter_source=counter_source,
                speculative=speculative)
        except BaseException as exc:
            box["error"] = exc
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="tally-measure-wave", daemon=True)
    interrupted = False
    try:
        if progress is not None:
            progress.start()
        worker.start()
        # Poll with sleep, not Thread.join: a KeyboardInterrupt inside join() can leave the
        # thread looking finished while it still runs (CPython 3.11).
        while True:
            try:
                if finished.is_set():   # box is filled before finished is set: no join needed
                    break
                time.sleep(0.05)
            except KeyboardInterrupt:
                interrupted = True
                cancel.set()
    finally:
        if progress is not None:
            progress.stop()
    if "error" in box:
        if totals is not None:
            totals.close()
        raise box["error"]
    return box["wave"], interrupted


def _progress(total: int) -> tuple[Any, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("measuring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    return progress, progress.add_task("wave", total=total)


def _append(book: Any, signer: Any, mid: str, wave: WaveResult, context: dict[str, Any]) -> dict[str, Any]:
    """The wave as one wave.measured event (its records in request order as the blob)."""
    from ledger.store import Blob

    blob = Blob(wave.records_jsonl(), "application/x-ndjson")
    payload = {**wave.summary(), "records": blob.ref(), "measure": context}
    event = book.append(f"measure/{mid}", "wave.measured", payload, signer, blobs=[blob])
    return {"seq": event.seq, "hash": event.hash, "stream": event.stream, "records": blob.ref()}


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
