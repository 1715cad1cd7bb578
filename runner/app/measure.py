"""``tally measure``: one stand-alone wave against an OpenAI-compatible server, measured and kept.

::

    from runner.app import Session, measure_server

    with measure_server(Session(), "http://127.0.0.1:8000", Path("opinions.jsonl"), out=Path("m")) as measured:
        measured.report["figures"]["ttft_ms"], measured.interrupted

Every input is checked before anything is sent: the options, the family, the ``--out``
names (a planted symlink is refused), and with ``ledger`` that the wave fits one
``wave.measured`` event. The wave runs on a worker thread so that Ctrl-C (or SIGTERM
turned into one) cancels it and what was measured is kept, marked interrupted. Requests
are written to ``requests.jsonl`` as they finish and figures accumulate in a spool, so
memory does not grow with the number of requests. Heavy imports (httpx, numpy, the
ledger store) happen inside the functions.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TextIO, overload

from ledger.errors import FormatError

from .outdir import OutDir, check_out

if TYPE_CHECKING:
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..measure import Family, OriginAuth, Prompt, RequestRecord, WaveResult, WaveTotals
    from .session import Session

__all__ = ["Measured", "WaveProgress", "dump_report", "measure_server"]

UNSENT_LISTED = 1_000         # requests never sent (a stopped wave) listed one by one; the rest are counted
LEDGER_RESERVE = 64 << 10     # event bytes kept for everything but the per-request lists
_TTFT_BYTES = 25              # one float of client.ttft_s and its comma, at most


class WaveProgress(Protocol):
    """Told how the wave goes (a terminal's progress bar)."""

    def start(self, total: int) -> None: ...

    def advance(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Measured:
    """A measured wave: the report (``measure``, ``wave``, ``figures``, and ``event`` when appended), the wave
    itself (open until the block ends: a streamed wave reads its spool), and whether it was interrupted."""

    report: dict[str, Any]
    wave: WaveResult
    interrupted: bool
    out: Path | None
    ok: int                      # requests that succeeded


@contextlib.contextmanager
def measure_server(session: Session, url: str, family: Path, *, metrics_url: str | None = None,
                   model: str | None = None, requests: int | None = None, max_tokens: int = 512,
                   ignore_eos: bool = True, concurrency: int = 1, seed: int = 42, chat: bool = False,
                   deadline: float | None = None, wave_deadline: float | None = None, priority: int = 0,
                   token_ids: bool = True, headers: Sequence[str] = (), out: Path | None = None,
                   ledger: bool = False, measure_id: str | None = None, counter_source: str = "vllm",
                   spec_off: bool = False, progress: WaveProgress | None = None) -> Iterator[Measured]:
    """Measure one wave and keep it (``summary.json`` and ``requests.jsonl`` in ``out``; with ``ledger`` one
    ``wave.measured`` event on stream ``measure/<id>``); the block reads the :class:`Measured` before the wave's
    spool is removed."""
    from ..measure import OriginAuth, list_models, load_family, select_source, server_url

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
    sent_headers = _headers(list(headers))
    if server.authorized and any(name.lower() == "authorization" for name in sent_headers):
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
    models = list_models(base, headers=sent_headers, auth=auth)
    if model is None:
        if not models:
            raise FormatError(f"{base}/v1/models lists no model; pass --model")
        model = models[0]
    if ledger:  # fail before measuring, not after
        book, signer = session.ledger(), session.signer()
    mid = measure_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ-") + os.urandom(3).hex()
    with contextlib.ExitStack() as stack:
        out_dir = stack.enter_context(OutDir.open(out)) if out is not None else None
        with contextlib.ExitStack() as records:  # requests.jsonl grows in place as requests finish
            records_file = records.enter_context(out_dir.growing("requests.jsonl")) if out_dir is not None else None
            wave, interrupted = _run(base, metrics.url if metrics is not None else f"{base}/metrics", prompts,
                                     loaded, model=model, max_tokens=max_tokens, seed=seed, concurrency=concurrency,
                                     deadline=deadline, wave_deadline=wave_deadline, chat=chat,
                                     ignore_eos=ignore_eos, priority=priority, token_ids=token_ids,
                                     headers=sent_headers,
                                     auth=auth,
                                     keep_records=ledger, records_file=records_file, spool_parent=out,
                                     progress=progress, counter_source=counter_source,
                                     speculative=False if spec_off else None)
        try:
            context = {
                "id": mid, "url": base, "metrics_url": wave.metrics_url, "model": model, "family": loaded.name,
                "family_file": str(family), "family_sha256": loaded.sha256, "requests": len(prompts), "chat": chat,
                "ignore_eos": ignore_eos, "priority": priority, "deadline_s": deadline,
                "wave_deadline_s": wave_deadline, "interrupted": interrupted, "notes": list(wave.notes),
                "counter_source": counter_source, "spec_off": spec_off,
            }
            report = {"measure": context, "wave": wave.summary(), "figures": wave.figures()}
            if out_dir is not None:
                with out_dir.stream("summary.json") as raw:
                    text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
                    dump_report(report, text, indent=2)
                    text.write("\n")
                    text.flush()
                    text.detach()
            if ledger:
                report["event"] = _append(book, signer, mid, wave, context)
            yield Measured(report, wave, interrupted, None if out_dir is None else out_dir.path, wave.ok)
        finally:
            wave.close()


def dump_report(report: dict[str, Any], stream: TextIO, indent: int | None = None) -> None:
    """Write a measure report as JSON (a streamed wave's lists read from its spool as they are written)."""
    from ..measure import dump_json

    dump_json(report, stream, indent=indent)


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

    from ..measure import summary_entry_bound

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
         spool_parent: Path | None, progress: WaveProgress | None, counter_source: str = "vllm",
         speculative: bool | None = None) -> tuple[WaveResult, bool]:
    """Run the wave on a worker thread so that Ctrl-C/SIGTERM cancel it and keep what was measured.

    Each finished request is written to ``records_file`` at once. Unless ``keep_records``
    (the ledger's blob needs them), records are not kept: figures accumulate in a spool.
    """
    from ..measure import WaveTotals, measure_wave

    cancel = threading.Event()
    finished = threading.Event()
    box: dict[str, Any] = {}
    write_lock = threading.Lock()
    # the spool goes into --out (a disk the user chose), else to $TMPDIR
    totals: WaveTotals | None = None if keep_records else WaveTotals.spooled(parent=spool_parent)

    def on_request(record: RequestRecord) -> None:
        if records_file is not None:
            line = record.json_line()
            with write_lock:
                records_file.write(line)
                records_file.flush()
        if progress is not None:
            progress.advance()

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
            progress.start(len(prompts))
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


def _append(book: Ledger, signer: Signer, mid: str, wave: WaveResult, context: dict[str, Any]) -> dict[str, Any]:
    """The wave as one wave.measured event (its records in request order as the blob)."""
    from ledger.store import Blob

    blob = Blob(wave.records_jsonl(), "application/x-ndjson")
    payload = {**wave.summary(), "records": blob.ref(), "measure": context}
    event = book.append(f"measure/{mid}", "wave.measured", payload, signer, blobs=[blob])
    return {"seq": event.seq, "hash": event.hash, "stream": event.stream, "records": blob.ref()}
