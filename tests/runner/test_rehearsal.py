"""The API rehearsal against a loopback server in four modes: PASS, FAIL (control wrong), 500, refused."""

from __future__ import annotations

import base64
import json
import socket
import stat
from pathlib import Path

from runner.plan.register import registered

from .conftest import Site, tally
from .fake_vllm import SPEC_MESSAGE, fake_vllm, url_of
from .script import EXAMPLES


def _rehearse(url: str, out: Path, *extra: str) -> tuple[int, dict, str]:
    result = tally("rehearse", "--url", url, "--eos", "1", "--out", out, "--json", *extra)
    return result.code, json.loads(result.out) if result.out.strip() else {}, result.err


def _files(out: Path) -> tuple[dict, list[dict]]:
    assert stat.S_IMODE((out / "responses.jsonl").stat().st_mode) == 0o600
    summary = json.loads((out / "rehearsal.json").read_text())
    lines = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    return summary, lines


def test_vllm_with_speculative_decoding_passes(site: Site, tmp_path: Path) -> None:
    with fake_vllm("spec") as server:
        code, out, err = _rehearse(url_of(server), tmp_path / "r")
        seen = list(server.seen)
    assert code == 0, err
    assert out["verdict"] == "PASS" and out["cause_confirmed"] is True and out["reading"] == []
    # the admission's probes first, in order: tiny, non-streaming, priority 10; then the capability probe's
    assert [p for p, _ in seen[:5]] == ["/v1/completions", "/v1/chat/completions", "/v1/completions",
                                        "/v1/completions", "/v1/completions"]
    for _, body in seen[:5]:
        assert body["max_tokens"] <= 8 and body["priority"] == 10 and body["stream"] is False
    assert all(body["max_tokens"] <= 8 for _, body in seen) and len(seen) <= 5 + 23  # the five, the capability probe (19) and its four greedy-penalty requests
    assert seen[2][1]["seed"] == 42 and seen[2][1]["temperature"] == 1.0 and seen[2][1]["top_p"] == 1.0
    assert seen[3][1]["allowed_token_ids"] == [1] and "logit_bias" not in seen[3][1]
    assert seen[4][1]["logit_bias"] == {"1": 100}
    summary, lines = _files(tmp_path / "r")
    assert summary["verdict"] == "PASS" and summary["cause_confirmed"] is True
    probes = {p["probe"]: p for p in summary["probes"]}
    assert list(probes) == ["plain", "chat", "seeded", "terminator", "control"]
    assert probes["terminator"]["finish_reason"] == "stop"
    assert probes["control"]["status"] == 400 and probes["control"]["error"]["message"] == SPEC_MESSAGE
    assert probes["plain"]["usage"]["completion_tokens"] <= 8
    for p in probes.values():
        assert len(p["request_sha256"]) == 64 and len(p["response_sha256"]) == 64
    assert [line["probe"] for line in lines] == list(probes) + [p["probe"] for p in summary["capability_probes"]]
    assert SPEC_MESSAGE in lines[4]["body"]
    # without --window only the vLLM checks are needed, and they hold
    assert [(n["field"], n["want"]) for n in summary["needs"]] == [("allowed_token_ids", "honoured"),
                                                                   ("logit_bias", "refused")]
    assert summary["fields"]["allowed_token_ids"] == "honoured" and summary["fields"]["logit_bias"] == "refused"
    assert summary["capability_failures"] == []


def test_server_accepting_logit_bias_fails_the_control(site: Site, tmp_path: Path) -> None:
    with fake_vllm("no-spec") as server:
        code, out, _ = _rehearse(url_of(server), tmp_path / "r")
    assert code == 1
    assert out["verdict"] == "FAIL" and out["cause_confirmed"] is False
    assert out["reading"] == [{"probe": "control", "reading": "probe wrong for this server",
                               "detail": out["reading"][0]["detail"]}]
    assert "accepts logit_bias" in out["reading"][0]["detail"]
    _files(tmp_path / "r")


def test_server_answering_500_is_no_answer(site: Site, tmp_path: Path) -> None:
    with fake_vllm("error500") as server:
        code, out, _ = _rehearse(url_of(server), tmp_path / "r")
    assert code == 3
    assert out["verdict"] == "FAIL" and out["no_answer"] is True
    assert {r["reading"] for r in out["reading"]} == {"no answer, rerun"} and len(out["reading"]) == 5
    summary, lines = _files(tmp_path / "r")
    assert summary["probes"][0]["status"] == 500 and len(lines) == 5 + len(summary["capability_probes"])
    assert set(summary["fields"].values()) == {"no_answer", "unclear"}  # nothing learnt: no forcer either


def test_refused_connection_is_no_answer(site: Site, tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    code, out, _ = _rehearse(f"http://127.0.0.1:{port}", tmp_path / "r", "--timeout", "2")
    assert code == 3 and out["no_answer"] is True
    summary, lines = _files(tmp_path / "r")
    assert all(p["status"] is None and p["reading"] == "no answer, rerun" for p in summary["probes"])
    assert "Connect" in lines[0]["error"]["transport"]


def test_rehearsal_records_the_gate_and_admits(site: Site, tmp_path: Path) -> None:
    import runner.sim as sim

    assert tally("window", "register", EXAMPLES / "seed003-abba.toml").code == 0
    with sim.start(sim.default_config(), seed=7, time_scale=0.01) as server:
        code, out, err = _rehearse(server.url, tmp_path / "r", "--window", "pp3-abba")
    assert code == 0, err
    event = site.book.get(out["seq"])
    assert event.type == "gate.result" and event.payload["gate"] == "rehearsal"
    assert event.payload["verdict"] == "PASS"
    reg = registered(site.book, "pp3-abba")
    assert reg is not None and event.payload["commit"] == reg.plan.commit
    blob = site.book.blob(event.payload["evidence"]["responses"]["blob"])
    assert blob is not None and blob.data == (tmp_path / "r" / "responses.jsonl").read_bytes()
    assert out["admitted_seq"] is None  # qualification and budget are still missing
    evidence = event.payload["evidence"]
    assert {n["field"] for n in evidence["needs"]} >= {"seed", "ignore_eos", "max_tokens", "cache_salt",
                                                       "stream_options.include_usage"}
    assert all(c["ok"] for c in evidence["capabilities"]) and evidence["capability_failures"] == []


def test_bad_url_is_bad_input(site: Site, tmp_path: Path) -> None:
    result = tally("rehearse", "--url", "localhost:8000", "--eos", "1", "--out", tmp_path / "r")
    assert result.code == 2 and "must start with http" in result.err
    assert not (tmp_path / "r").exists()


def test_rehearsal_against_the_simulator(site: Site, tmp_path: Path) -> None:
    """The same probes against tally's vLLM simulator (speculative decoding on): PASS, cause confirmed."""
    import runner.sim as sim

    with sim.start(sim.default_config(), seed=7, time_scale=0.01) as server:
        code, out, err = _rehearse(server.url, tmp_path / "r")
    assert code == 0, err
    assert out["verdict"] == "PASS" and out["cause_confirmed"] is True
    probes = {p["probe"]: p for p in out["probes"]}
    assert probes["terminator"]["finish_reason"] == "stop" and probes["control"]["status"] == 400
    assert all(p["usage"]["completion_tokens"] <= 8 for name, p in probes.items() if name != "control")


def test_url_credentials_are_sent_as_a_header_and_never_recorded(site: Site, tmp_path: Path) -> None:
    from tests.measure.hostile import Handler, serve

    seen: list[str | None] = []

    class Guarded(Handler):
        def post(self, body: dict) -> None:
            seen.append(self.headers.get("authorization"))
            self.send_body(200, json.dumps({"choices": [{"text": "ok", "finish_reason": "stop"}],
                                            "usage": {"completion_tokens": 1}}).encode())

    with serve(Guarded) as server:
        url = server.url.replace("http://", "http://op:pr0d-Secret@")
        result = tally("rehearse", "--url", url, "--eos", "1", "--out", tmp_path / "r", "--json")
    assert result.code == 1  # the control came back 200: wrong for this server, but every probe answered
    assert seen == ["Basic " + base64.b64encode(b"op:pr0d-Secret").decode()] * len(seen) and len(seen) > 5
    assert json.loads(result.out)["url"] == server.url
    for text in (result.out, result.err, (tmp_path / "r" / "rehearsal.json").read_text(),
                 (tmp_path / "r" / "responses.jsonl").read_text()):
        assert "pr0d-Secret" not in text


def test_malformed_url_is_one_line(site: Site, tmp_path: Path) -> None:
    result = tally("rehearse", "--url", "http://op:pw@[::1", "--eos", "1", "--out", tmp_path / "r")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1 and "pw" not in result.err
    assert not (tmp_path / "r").exists()
