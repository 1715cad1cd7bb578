"""Servers that trickle, never end a line, send endless /metrics, or need credentials: tally stays bounded.

Every server here is a tiny local one (``hostile.py``) started and stopped by its test;
the CLI runs as a child process where the test needs its exit code under a signal or its
peak memory (``VmHWM`` in /proc, sampled while it runs).
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import runner.sim as sim
from cli.app import app
from ledger.keys import Signer
from ledger.store import Ledger
from runner.measure import measure_wave, scrape_metrics, synthetic_family, write_family
from runner.measure.bounds import MAX_METRICS_BYTES
from runner.measure.transport import StampingTransport

from .conftest import fast_config
from .hostile import MODEL, Handler, chunk, hwm_kib, rss_kib, serve, wait_for

TALLY = Path(sys.executable).parent / "tally"
HEADERS = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"


def start_child(*args: str, tmp: Path) -> subprocess.Popen[bytes]:
    """``tally ARGS`` as a child whose output goes to files (read after it exits)."""
    return subprocess.Popen([str(TALLY), *args], stdout=(tmp / "stdout").open("wb"), stderr=(tmp / "stderr").open("wb"))


def reap(process: subprocess.Popen[bytes], timeout: float) -> tuple[int, int]:
    """Wait for the child (killing it after ``timeout``); its exit code and its peak RSS in KiB.

    The peak is the child's own ``VmHWM``, read from /proc every 10 ms while it runs (its
    ``ru_maxrss`` would include the parent's size from before the exec).
    """
    deadline = time.monotonic() + timeout
    peak = 0
    while True:
        peak = max(peak, hwm_kib(process.pid))
        code = process.poll()
        if code is not None:
            return code, peak
        if time.monotonic() > deadline:
            process.kill()
            deadline = time.monotonic() + 5
        time.sleep(0.01)


def run_child(*args: str, tmp: Path, timeout: float = 30.0) -> tuple[int, str, str, int, float]:
    """Run ``tally ARGS``; (exit code, stdout, stderr, peak RSS in KiB, seconds)."""
    began = time.monotonic()
    code, peak = reap(start_child(*args, tmp=tmp), timeout)
    took = time.monotonic() - began
    return code, (tmp / "stdout").read_text(), (tmp / "stderr").read_text(), peak, took


@pytest.fixture
def family_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    write_family(path, synthetic_family("opinions", short=2, long=0))
    return path


class TrickleFromTheFirstByte(Handler):
    """Completions: one byte every 0.5 s, forever, starting with the status line (headers never end)."""

    def post(self, body: dict[str, Any]) -> None:
        self.trickle(HEADERS)


def test_measure_gives_up_on_a_trickling_server(family_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with serve(TrickleFromTheFirstByte) as server:
        code, stdout, stderr, _rss, took = run_child(
            "measure", "--url", server.url, "--family", str(family_file), "--requests", "1", "--max-tokens", "8",
            "--deadline", "3", "--out", str(out), "--json", tmp=tmp_path)
    assert took < 3 + 4, took  # the deadline, plus start-up and writing; not "as long as the server likes"
    assert code == 1, stderr    # documented: 1 = no request succeeded
    (record,) = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert record["status"] == "timeout" and record["delivered_tokens"] == 0
    assert record["reason"] == "request deadline 3 s passed after 0 chunks (no content)"
    assert 2.9 < record["ended_s"] < 3.5
    assert json.loads(stdout)["wave"]["client"]["timed_out"] == 1 and "Traceback" not in stderr


class TrickleAfterHeaders(Handler):
    """Mode per path-less body field ``mode``: after the headers, every kind of body dribbles."""

    def post(self, body: dict[str, Any]) -> None:
        mode = body.get("mode")
        if mode == "sse":
            self.sse_headers()
            self.wfile.write(chunk(0))
            self.wfile.flush()
            self.trickle(chunk(1), 0.05)
        elif mode in ("json", "error"):
            self.send_response(200 if mode == "json" else 500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "100000")
            self.end_headers()
            self.trickle(b'{"choices": [' if mode == "json" else b'{"error": ', 0.05)
        else:
            self.trickle(HEADERS, 0.05)


@pytest.mark.parametrize(("mode", "status", "chunks"), [("headers", "timeout", 0), ("sse", "censored", 1),
                                                       ("json", "timeout", 0), ("error", "timeout", 0)])
def test_every_part_of_a_request_is_under_its_deadline(mode: str, status: str, chunks: int) -> None:
    with serve(TrickleAfterHeaders) as server:
        began = time.perf_counter()
        wave = measure_wave(server.url, None, synthetic_family("opinions", short=1, long=0), model=MODEL,
                            max_tokens=8, seed=1, deadline_s=0.4, extra_body={"mode": mode})
    assert time.perf_counter() - began < 1.5
    (record,) = wave.requests
    assert record.status == status and len(record.chunk_t) == chunks
    assert record.reason is not None and record.reason.startswith("request deadline 0.4 s passed")
    assert 0.39 < record.ended_s < 0.8


def test_without_a_deadline_the_default_bounds_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    import runner.measure.request as request

    monkeypatch.setattr(request, "DEFAULT_REQUEST_DEADLINE_S", 0.4)
    with serve(TrickleAfterHeaders) as server:
        wave = measure_wave(server.url, None, synthetic_family("opinions", short=1, long=0), model=MODEL,
                            max_tokens=8, seed=1, extra_body={"mode": "sse"})
    (record,) = wave.requests
    assert record.status == "censored"
    assert record.reason == "default request deadline 0.4 s passed after 1 chunks, 1 tokens kept"


def test_a_cancel_cuts_a_request_still_waiting_for_its_headers() -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with serve(TrickleAfterHeaders) as server:
        began = time.perf_counter()
        wave = measure_wave(server.url, None, synthetic_family("opinions", short=2, long=0), model=MODEL,
                            max_tokens=8, seed=1, cancel=cancel, extra_body={"mode": "headers"})
    assert time.perf_counter() - began < 0.9  # the cutter shut the socket: no waiting for a deadline
    assert [r.status for r in wave.requests] == ["cancelled", "cancelled"]


def test_rehearse_gives_up_on_a_trickling_server(tmp_path: Path) -> None:
    with serve(TrickleFromTheFirstByte) as server:
        began = time.monotonic()
        result = CliRunner().invoke(app, ["rehearse", "--url", server.url, "--eos", "1", "--out",
                                          str(tmp_path / "r"), "--timeout", "2", "--json"])
        took = time.monotonic() - began
        posts = [path for method, path, _ in server.seen if method == "POST"]
    assert took < 2 + 1.5, took  # one probe's timeout, not five, and never the server's pace
    assert result.exit_code == 3, result.stderr  # every failure is "no answer"
    out = json.loads(result.stdout)
    assert out["no_answer"] is True and out["verdict"] == "FAIL"
    first, *rest = out["probes"]
    assert first["status"] is None and first["reading"] == "no answer, rerun"
    assert first["detail"].startswith("no complete answer within 2 s") and 1.9 < first["elapsed_s"] < 2.5
    assert all(p["detail"] == "not sent: probe plain got no answer within 2 s" for p in rest) and len(rest) == 4
    assert posts == ["/v1/completions"]  # the stalled server got one probe, not five


class HugeReply(Handler):
    """A 2 MiB completion reply (over the probe cap)."""

    def post(self, body: dict[str, Any]) -> None:
        self.send_body(200, b'{"choices": [{"text": "' + b"x" * (2 << 20) + b'"}]}')


def test_a_probe_reply_over_the_cap_is_no_answer(tmp_path: Path) -> None:
    from runner.rehearsal.rehearsal import rehearse

    with serve(HugeReply) as server:
        result = rehearse(server.url, 1, timeout=5)
    assert result.exit_code == 3
    assert {r.detail for r in result.results} == {"the reply is over the 1 MiB limit"}


class Garrulous(Handler):
    """Frames nested 100,000 deep, or 200 content chunks (for max_tokens 8)."""

    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        if body.get("mode") == "deep":
            self.wfile.write(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n")
        else:
            self.wfile.write(b"".join(chunk(i) for i in range(200)) + b"data: [DONE]\n\n")


@pytest.mark.parametrize(("mode", "reason"), [
    ("deep", "malformed SSE frame (not JSON)"),
    ("many", "the server sent more than 80 content chunks (2 x max_tokens + 64): refused"),
])
def test_frames_that_would_recurse_or_pile_up_fail_the_request(mode: str, reason: str) -> None:
    with serve(Garrulous) as server:
        wave = measure_wave(server.url, None, synthetic_family("opinions", short=1, long=0), model=MODEL,
                            max_tokens=8, seed=1, extra_body={"mode": mode})
    (record,) = wave.requests
    assert record.status == "failed" and record.reason == reason
    assert len(record.chunk_t) == (80 if mode == "many" else 0)


class EndlessLine(Handler):
    """One SSE line that never ends: 64 KiB after 64 KiB of 'x', as fast as the socket takes them."""

    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        self.wfile.write(chunk(0) + b"data: ")
        blob = b"x" * 65536
        while not self.hostile.stopping.is_set():
            self.wfile.write(blob)


def test_an_endless_sse_line_is_cut(family_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with serve(EndlessLine) as server:
        code, _stdout, stderr, peak_kib, took = run_child(
            "measure", "--url", server.url, "--family", str(family_file), "--requests", "1", "--max-tokens", "8",
            "--deadline", "30", "--out", str(out), "--json", tmp=tmp_path)
    assert code == 1, stderr
    (record,) = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert record["status"] == "failed"
    assert record["reason"] == "SSE line over the 1 MiB limit (refused; what arrived before is kept)"
    assert len(record["chunk_t"]) == 1 and record["delivered_tokens"] == 1  # the chunk before the line is kept
    assert took < 10  # refused at 1 MiB, not at the 30 s deadline
    # the whole CLI (Python, numpy, httpx, rich) peaks near 60 MiB; an unbounded line grows by ~GB/s
    assert 0 < peak_kib < 120 * 1024, peak_kib


class HugeMetrics(Handler):
    """``/metrics``: valid exposition lines forever (no content-length, the connection never ends)."""

    def get_metrics(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/plain; version=0.0.4")
        self.send_header("connection", "close")
        self.end_headers()
        line = b"vllm:generation_tokens_total 1\n" * 2048
        while not self.hostile.stopping.is_set():
            try:
                self.wfile.write(line)
            except (BrokenPipeError, ConnectionResetError):
                return

    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        self.wfile.write(chunk(0) + chunk(1, last=True) + b"data: [DONE]\n\n")


class TricklingMetrics(HugeMetrics):
    def get_metrics(self) -> None:
        self.trickle(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n", 0.05)


def test_metrics_scrape_is_bounded() -> None:
    with serve(HugeMetrics) as server, httpx.Client(transport=StampingTransport()) as http:
        url = f"{server.url}/metrics"
        began = time.perf_counter()
        scrape = scrape_metrics(http, url, timeout_s=20)
        assert time.perf_counter() - began < 5  # stopped at the cap, long before the deadline
        assert scrape.snapshot is None
        assert scrape.problem == f"metrics at {url} refused: metrics at {url} is over the {MAX_METRICS_BYTES >> 20} MiB limit"
        # in a wave the refused scrape is a recorded problem, and the requests are still measured
        wave = measure_wave(server.url, url, synthetic_family("opinions", short=1, long=0), model=MODEL,
                            max_tokens=2, seed=1)
    assert wave.requests[0].status == "ok" and not wave.complete
    assert wave.incomplete_reasons == (f"{scrape.problem} (before and after the wave)",)
    with serve(TricklingMetrics) as server, httpx.Client(transport=StampingTransport()) as http:
        url = f"{server.url}/metrics"
        began = time.perf_counter()
        scrape = scrape_metrics(http, url, timeout_s=0.5)
        assert time.perf_counter() - began < 1.2
        assert scrape.problem == f"metrics at {url} did not answer within 0.5 s"


def test_huge_request_count_streams_to_disk_and_stops_on_sigint(family_file: Path, tmp_path: Path) -> None:
    """100,000,000 requests against the fast simulator for ~2.5 s, then SIGINT: exit 130 at once, memory flat.

    Bound stated: the child's peak RSS stays under 150 MiB (it is ~60 MiB; the old client
    built a 100M-element prompt list before sending anything) and grows by less than
    12 MiB over the last two seconds of measuring (it grew ~8 KiB per request with GC
    suspended and every record kept).
    """
    out = tmp_path / "out"
    lines = out / "requests.jsonl"
    with sim.spawn(fast_config(time_scale=0.01)) as host:
        process = start_child("measure", "--url", host.url, "--family", str(family_file), "--requests", "100000000",
                              "--max-tokens", "16", "--out", str(out), tmp=tmp_path)
        try:
            assert wait_for(lambda: lines.exists() and lines.stat().st_size > 0, 20)
            time.sleep(0.5)
            early = rss_kib(process.pid)
            written_early = len(lines.read_bytes().splitlines())
            time.sleep(2.0)
            late = rss_kib(process.pid)
            written_late = len(lines.read_bytes().splitlines())
            interrupted_at = time.monotonic()
            process.send_signal(signal.SIGINT)
        finally:
            code, peak_kib = reap(process, 10)
        took = time.monotonic() - interrupted_at
    err_text = (tmp_path / "stderr").read_text()
    assert code == 130, err_text
    assert took < 2.0, took
    assert "interrupted" in err_text and "Traceback" not in err_text
    assert written_late > written_early > 0  # lines appear as requests finish, not at the end
    assert late - early < 12 * 1024, (early, late)
    assert 0 < peak_kib < 150 * 1024, peak_kib
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    sent = [r for r in records if r["status"] != "cancelled" or not r["reason"].startswith("not sent")]
    assert len(sent) >= written_late and all(r["status"] in ("ok", "cancelled") for r in sent)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measure"]["interrupted"] is True and summary["measure"]["requests"] == 100_000_000
    wave = summary["wave"]
    assert wave["client"]["requests"] == len(records) == len(wave["requests"])
    assert [r["index"] for r in wave["requests"]] == sorted(r["index"] for r in records)  # request order
    unlisted = 100_000_000 - len(records)
    assert f"{unlisted} requests not sent" in wave["incomplete_reasons"]
    assert summary["figures"]["ttft_ms"]["p50"] > 0
    assert sorted(p.name for p in out.iterdir()) == ["requests.jsonl", "summary.json"]  # the spool is gone


class NeedsCredentials(Handler):
    """Answers only with ``Authorization: Basic alice:PASSWORD``; completions stream a few chunks."""

    expected = "Basic " + base64.b64encode(b"alice:s3cret-Pa55").decode()

    def _authorized(self) -> bool:
        if self.headers.get("authorization") == self.expected:
            return True
        self.send_body(401, b'{"error": {"message": "unauthorized"}}')
        return False

    def do_GET(self) -> None:
        if self._authorized():
            super().do_GET()
        else:
            self._record()

    def get_metrics(self) -> None:
        self.send_body(200, b"vllm:generation_tokens_total 5\n", "text/plain")

    def post(self, body: dict[str, Any]) -> None:
        if self._authorized():
            self.sse_headers()
            self.wfile.write(b"".join(chunk(i, last=i == 3) for i in range(4)) + b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True


def test_url_credentials_are_never_recorded(family_file: Path, tmp_path: Path, ledger: Ledger, root: Signer) -> None:
    key = tmp_path / "root.pem"
    key.write_bytes(root.private_pem())
    key.chmod(0o600)
    out = tmp_path / "out"
    secret = "s3cret-Pa55"
    with serve(NeedsCredentials) as server:
        url = server.url.replace("http://", f"http://alice:{secret}@")
        result = CliRunner().invoke(app, ["--db", ledger.url, "--key", str(key), "measure", "--url", url, "--family",
                                          str(family_file), "--max-tokens", "4", "--ledger", "--id", "cred",
                                          "--out", str(out)])
        human = CliRunner().invoke(app, ["measure", "--url", url + "/v1", "--family", str(family_file),
                                         "--max-tokens", "4", "--json"])
        seen = list(server.seen)
    assert result.exit_code == 0, result.stderr
    assert human.exit_code == 0, human.stderr
    # the server saw the credentials, as a Basic Authorization header, on every request
    assert seen and all(headers.get("authorization") == NeedsCredentials.expected for _, _, headers in seen)
    assert {path for _, path, _ in seen} == {"/v1/models", "/metrics", "/v1/completions"}
    # and they are nowhere in what tally printed, wrote or signed
    assert server.url in result.stdout and json.loads(human.stdout)["measure"]["url"] == server.url
    for text in (result.stdout, result.stderr, human.stdout, human.stderr):
        assert secret not in text and "alice" not in text
    for path in out.iterdir():
        assert secret.encode() not in path.read_bytes() and b"alice" not in path.read_bytes()
    events = list(ledger.events())
    measured = [e for e in events if e.type == "wave.measured"]
    assert len(measured) == 1 and measured[0].payload["measure"]["url"] == server.url
    for event in events:
        assert secret not in event.line()
    blob = ledger.blob(measured[0].payload["records"]["blob"].removeprefix("sha256:"))
    assert blob is not None and secret.encode() not in blob.data
    db = Path(ledger.url.removeprefix("sqlite:///"))
    assert secret.encode() not in db.read_bytes()


@pytest.mark.parametrize("url", ["http://[::1", "http://user:hunter2@[::1", "http://", "http://host:99999",
                                 "ftp://host", "http://host:8000/?x=1", "http://ho st:8000"])
def test_malformed_url_is_one_line(url: str, family_file: Path) -> None:
    result = CliRunner().invoke(app, ["measure", "--url", url, "--family", str(family_file)])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tally: --url ") and "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr


class Counting(Handler):
    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        self.wfile.write(chunk(0, last=True) + b"data: [DONE]\n\n")


def test_a_wave_too_big_for_one_event_is_refused_before_sending(family_file: Path, tmp_path: Path, ledger: Ledger,
                                                                root: Signer) -> None:
    key = tmp_path / "root.pem"
    key.write_bytes(root.private_pem())
    key.chmod(0o600)
    size = ledger.size()
    with serve(Counting) as server:
        result = CliRunner().invoke(app, ["--db", ledger.url, "--key", str(key), "measure", "--url", server.url,
                                          "--family", str(family_file), "--requests", "100000000", "--ledger"])
        seen = list(server.seen)
    assert result.exit_code == 2 and seen == []  # nothing was sent, not even /v1/models
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("tally: --ledger: 100000000 requests may not fit one wave.measured event (the 1 MiB")
    assert "at most" in line and ledger.size() == size
