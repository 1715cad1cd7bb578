"""`tally measure`: a stand-alone wave against the simulator and against servers that are not vLLM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy
import pytest
from typer.testing import CliRunner

import runner.sim as sim
from cli.app import app
from ledger.keys import Signer
from ledger.store import Ledger
from runner.sim import SimHandle

from .conftest import MODEL, fast_config

TALLY = Path(sys.executable).parent / "tally"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str) -> dict:
    code, out, err = invoke(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_summary_counters_equal_sim_truth(server: SimHandle, family_file: Path, tmp_path: Path) -> None:
    after = server.truth()["next"]
    report = run_json("measure", "--url", server.url, "--family", str(family_file), "--max-tokens", "64",
                      "--concurrency", "2", "--out", str(tmp_path / "out"))
    truth = server.truth(after)["totals"]
    counters = report["wave"]["counters"]
    assert [counters[k] for k in ("rounds", "accepted", "draft_tokens", "accepted_per_pos", "generation_tokens")] == \
        [truth[k] for k in ("rounds", "accepted", "draft_tokens", "accepted_per_pos", "generation_tokens")]
    assert counters["decode_s"] == pytest.approx(truth["decode_s"])
    server_fig = report["figures"]["server"]
    assert server_fig["drafts"] == truth["drafts"] and server_fig["accepted_tokens"] == truth["accepted"]
    # the same definitions as vllm bench serve's speculative-decoding section
    assert server_fig["acceptance_rate"] == pytest.approx(truth["accepted"] / truth["draft_tokens"])
    assert server_fig["mean_acceptance_length"] == pytest.approx(1 + truth["accepted"] / truth["drafts"])
    assert server_fig["per_position_acceptance"] == pytest.approx([n / truth["drafts"]
                                                                   for n in truth["accepted_per_pos"]])
    assert report["measure"]["model"] == MODEL  # the first model the server lists
    assert report["measure"]["family_sha256"] == json.loads((tmp_path / "out" / "summary.json").read_text())[
        "measure"]["family_sha256"]


def test_percentiles_match_requests_jsonl(server: SimHandle, family_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = invoke("measure", "--url", server.url, "--family", str(family_file), "--max-tokens", "80",
                          "--requests", "7", "--out", str(out))
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 7
    ok = [r for r in records if r["status"] == "ok"]
    ttft_ms = numpy.array([r["chunk_t"][0] for r in ok]) * 1000
    gaps_ms = numpy.concatenate([numpy.diff(r["chunk_t"]) * 1000 for r in ok])
    figures = summary["figures"]
    for q in (50, 95, 99):
        assert figures["ttft_ms"][f"p{q}"] == pytest.approx(numpy.percentile(ttft_ms, q))
        assert figures["chunk_interval_ms"][f"p{q}"] == pytest.approx(numpy.percentile(gaps_ms, q))
        assert summary["wave"]["client"]["chunk_interval_ms"][f"p{q}"] == pytest.approx(numpy.percentile(gaps_ms, q))
    per_request = [(r["delivered_tokens"] - r["chunk_tokens"][0]) / (r["chunk_t"][-1] - r["chunk_t"][0]) for r in ok]
    assert figures["decode_tps_per_request_p50"] == pytest.approx(numpy.percentile(per_request, 50))
    pooled = sum(r["delivered_tokens"] - r["chunk_tokens"][0] for r in ok) / sum(
        r["chunk_t"][-1] - r["chunk_t"][0] for r in ok)
    assert figures["decode_tps_pooled"] == pytest.approx(pooled)
    chunks = sum(len(r["chunk_t"]) for r in ok)
    assert figures["tokens_per_chunk"] == pytest.approx(sum(r["delivered_tokens"] for r in ok) / chunks)


def test_human_report(server: SimHandle, family_file: Path) -> None:
    code, out, _ = invoke("measure", "--url", f"{server.url}/v1", "--family", str(family_file), "--max-tokens", "32")
    assert code == 0
    for label in ("TTFT ms", "decode tok/s", "chunk interval ms", "tokens per chunk", "acceptance rate",
                  "mean acceptance length", "per-position acceptance"):
        assert label in out


class _MinimalHandler(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that is not vLLM: streaming completions, usage, no /metrics."""

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        n = min(int(body.get("max_tokens", 16)), 12)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for i in range(n):
            chunk = {"id": "x", "object": "text_completion", "model": body["model"],
                     "choices": [{"index": 0, "text": f" w{i}", "finish_reason": "stop" if i == n - 1 else None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.002)
        usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
        self.wfile.write(f"data: {json.dumps({'id': 'x', 'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def minimal_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _MinimalHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_server_without_metrics_reports_client_figures(minimal_server: str, family_file: Path) -> None:
    code, out, err = invoke("measure", "--url", minimal_server, "--model", "tiny", "--family", str(family_file),
                            "--max-tokens", "12", "--requests", "3")
    assert code == 0, err
    assert "server counters unavailable: no metrics endpoint at" in out and "(HTTP 404)" in out
    assert "TTFT ms" in out and "acceptance rate" not in out
    report = run_json("measure", "--url", minimal_server, "--model", "tiny", "--family", str(family_file),
                      "--max-tokens", "12", "--requests", "3")
    wave = report["wave"]
    assert all(v is None for v in wave["counters"].values())  # never zeros in place of missing counters
    assert wave["client"]["ok"] == 3 and wave["client"]["delivered_tokens"] == 36
    assert report["figures"]["server"] is None and report["figures"]["tokens_per_chunk"] == 1.0


def test_server_ignoring_ignore_eos_is_flagged(minimal_server: str, family_file: Path) -> None:
    code, out, _ = invoke("measure", "--url", minimal_server, "--model", "tiny", "--family", str(family_file),
                          "--max-tokens", "40", "--requests", "2")
    assert code == 0
    assert "stopped early" in out and "may ignore ignore_eos" in out


def test_sim_metrics_failing_reports_reason(server: SimHandle, family_file: Path) -> None:
    server.set_faults(metrics_down=True)
    code, out, _ = invoke("measure", "--url", server.url, "--family", str(family_file), "--max-tokens", "16")
    assert code == 0
    assert "server counters unavailable: metrics at" in out and "answered HTTP 503" in out
    report = run_json("measure", "--url", server.url, "--family", str(family_file), "--max-tokens", "16")
    assert report["wave"]["counters"]["rounds"] is None and report["wave"]["complete"] is False
    assert any("HTTP 503" in r for r in report["wave"]["incomplete_reasons"])
    assert report["wave"]["client"]["ok"] == 5


def test_unreachable_url_exit_3(family_file: Path) -> None:
    with sim.start(fast_config()) as host:
        url = host.url
    code, out, err = invoke("measure", "--url", url, "--family", str(family_file))
    assert code == 3 and out == ""
    assert err.startswith(f"tally: cannot reach {url}") and len(err.strip().splitlines()) == 1


def test_malformed_family_line_exit_2(server: SimHandle, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "fine"}\n{"id": "b", "prompt": "broken\n')
    code, out, err = invoke("measure", "--url", server.url, "--family", str(bad))
    assert code == 2 and out == ""
    assert err.strip() == (f"tally: {bad}: line 2: not valid JSON (Unterminated string starting at: "
                           "line 1 column 23 (char 22))")
    assert server.truth()["requests"] == []  # nothing was sent


def test_bad_options_exit_2(server: SimHandle, family_file: Path) -> None:
    assert invoke("measure", "--url", server.url, "--family", str(family_file), "--concurrency", "0")[0] == 2
    assert invoke("measure", "--url", "ftp://x", "--family", str(family_file))[0] == 2


def test_interrupted_run_writes_what_was_measured(family_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with sim.start(fast_config(time_scale=0.3)) as host:
        process = subprocess.Popen(
            [str(TALLY), "measure", "--url", host.url, "--family", str(family_file), "--max-tokens", "100",
             "--requests", "20", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if any(r["status"] == "finished" for r in host.truth()["requests"]):
                    break
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            _stdout, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measure"]["interrupted"] is True
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 20  # every request is in the record, sent or not
    statuses = [r["status"] for r in records]
    assert statuses[0] == "ok" and statuses[-1] == "cancelled"
    assert summary["wave"]["complete"] is False and "wave cancelled" in summary["wave"]["incomplete_reasons"]


def test_ledger_appends_wave_measured(server: SimHandle, family_file: Path, tmp_path: Path, ledger: Ledger,
                                      root: Signer) -> None:
    key = tmp_path / "root.pem"
    key.write_bytes(root.private_pem())
    key.chmod(0o600)
    report = run_json("--db", ledger.url, "--key", str(key), "measure", "--url", server.url, "--family",
                      str(family_file), "--max-tokens", "24", "--ledger", "--id", "check-1")
    event = ledger.get(report["event"]["seq"])
    assert event.stream == "measure/check-1" and event.type == "wave.measured"
    payload = event.payload
    assert payload["counters"] == report["wave"]["counters"]
    assert payload["measure"]["family_sha256"] == report["measure"]["family_sha256"]
    ref = payload["records"]
    assert ref["media_type"] == "application/x-ndjson"
    blob = ledger.blob(ref["blob"].removeprefix("sha256:"))
    assert blob is not None and len(blob.data) == ref["size"]
    assert [json.loads(line)["prompt_id"] for line in blob.data.splitlines()] == \
        [r["prompt_id"] for r in payload["requests"]]


def test_ledger_without_key_refused_before_measuring(server: SimHandle, family_file: Path, ledger: Ledger,
                                                     tmp_path: Path) -> None:
    code, _, err = invoke("--db", ledger.url, "--key", str(tmp_path / "none.pem"), "measure", "--url", server.url,
                          "--family", str(family_file), "--ledger")
    assert code == 2 and "no signing key" in err
    assert server.truth()["requests"] == []
