"""``tally rehearse --probes``: the admission's own probes, each judged against its expected outcome."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import Site, tally
from .fake_vllm import fake_vllm, url_of

TERMINATOR = {"name": "r16-terminator", "path": "/v1/completions",
              "body": {"prompt": "Stop here.", "allowed_token_ids": [1]},
              "expect": {"status": 200, "finish_reason": "stop"}}
R16_BIAS = {"name": "r16-logit-bias", "path": "/v1/completions",
            "body": {"prompt": "Stop here.", "logit_bias": {"1": 100}},
            "expect": {"status": 400, "error_contains": "speculative decoding"}}


def _write(tmp_path: Path, *probes: dict, raw: str | None = None) -> Path:
    path = tmp_path / "probes.jsonl"
    path.write_text(raw if raw is not None else "\n".join(json.dumps(p) for p in probes) + "\n")
    return path


def _rehearse(url: str, out: Path, probes: Path) -> tuple[int, dict, str]:
    result = tally("rehearse", "--url", url, "--eos", "1", "--out", out, "--probes", probes, "--json")
    return result.code, json.loads(result.out) if result.out.strip() else {}, result.err


def test_rehearse_probes_expected_outcome_met_passes(site: Site, tmp_path: Path) -> None:
    probes = _write(tmp_path, TERMINATOR, R16_BIAS)
    with fake_vllm("spec") as server:
        code, out, err = _rehearse(url_of(server), tmp_path / "r", probes)
        seen = list(server.seen)
    assert code == 0, err
    assert out["verdict"] == "PASS" and out["reading"] == []
    listed = {p["probe"]: p for p in out["listed_probes"]}
    assert list(listed) == ["r16-terminator", "r16-logit-bias"] and all(p["ok"] for p in listed.values())
    assert listed["r16-logit-bias"]["status"] == 400 and listed["r16-terminator"]["finish_reason"] == "stop"
    # sent after the fixed five, tiny: at most 8 tokens, priority 10, not streamed
    assert [b.get("logit_bias") for _, b in seen[5:7]] == [None, {"1": 100}]
    for _, body in seen[5:7]:
        assert body["max_tokens"] == 8 and body["priority"] == 10 and body["stream"] is False
    assert out["probe_list"]["count"] == 2 and len(out["probe_list"]["sha256"]) == 64
    lines = [json.loads(line)["probe"] for line in (tmp_path / "r" / "responses.jsonl").read_text().splitlines()]
    assert lines[5:7] == ["r16-terminator", "r16-logit-bias"]


def test_rehearse_probes_expected_outcome_not_met_fails(site: Site, tmp_path: Path) -> None:
    """On a server without speculative decoding the R16 probe comes back 200, not the expected 400."""
    probes = _write(tmp_path, R16_BIAS)
    with fake_vllm("no-spec") as server:
        code, out, _ = _rehearse(url_of(server), tmp_path / "r", probes)
    assert code == 1 and out["verdict"] == "FAIL"
    (listed,) = out["listed_probes"]
    assert listed["ok"] is False and listed["reading"] == "probe wrong for this server"
    assert "HTTP 200, expected 400" in listed["detail"]
    assert any(r["probe"] == "r16-logit-bias" for r in out["reading"])


def test_rehearse_probes_expected_outcome_decides_even_without_vllm_checks(site: Site, tmp_path: Path) -> None:
    probes = _write(tmp_path, dict(TERMINATOR, expect={"status": 200, "finish_reason": "length"}))
    with fake_vllm("spec") as server:
        result = tally("rehearse", "--url", url_of(server), "--eos", "1", "--out", tmp_path / "r",
                       "--probes", probes, "--no-vllm-checks", "--json")
    out = json.loads(result.out)
    assert result.code == 1 and "expected 'length'" in out["listed_probes"][0]["detail"]


@pytest.mark.parametrize(("probe", "message"), [
    (dict(TERMINATOR, body={"prompt": "x", "max_tokens": 9}), "at most 8 tokens"),
    (dict(TERMINATOR, body={"prompt": "x", "max_completion_tokens": 64}), "at most 8 tokens"),
    (dict(TERMINATOR, body={"prompt": "x", "priority": 0}), "priority 10"),
    (dict(TERMINATOR, body={"prompt": "x", "stream": True}), "not streamed"),
    (dict(TERMINATOR, body={"prompt": "x", "n": 4}), "one completion"),
    (dict(TERMINATOR, name="control"), "already taken"),
    (dict(TERMINATOR, path="/v1/embeddings"), "path must be one of"),
    (dict(TERMINATOR, expect={"status": 503}), "100..499"),
    (dict(TERMINATOR, expect={"status": 200, "surprise": 1}), "unknown member"),
    ({k: v for k, v in TERMINATOR.items() if k != "expect"}, "expect must be an object"),
])
def test_rehearse_probes_refuses_a_probe_that_is_not_tiny_or_not_judgeable(site: Site, tmp_path: Path,
                                                                           probe: dict, message: str) -> None:
    result = tally("rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", tmp_path / "r",
                   "--probes", _write(tmp_path, probe))
    assert result.code == 2 and message in result.err and len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # refused before any probe


@pytest.mark.parametrize(("raw", "message"), [
    ('{"name": "a", "name": "b"}\n', "twice"),
    ("[" * 200 + "]" * 200 + "\n", "deep"),
    ("\n# only a comment\n", "holds no probes"),
    ("not json\n", "line 1"),
    ("\n".join(json.dumps(dict(TERMINATOR, name=f"p{i}")) for i in range(65)) + "\n", "more than 64 probes"),
    ("x" * (70 << 10) + "\n", "limit of a line"),
])
def test_rehearse_probes_file_is_read_as_hostile_input(site: Site, tmp_path: Path, raw: str, message: str) -> None:
    result = tally("rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", tmp_path / "r",
                   "--probes", _write(tmp_path, raw=raw))
    assert result.code == 2 and message in result.err, result.err


def test_rehearse_probes_refuses_a_fifo_and_an_oversized_file(site: Site, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = tally("rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", tmp_path / "r", "--probes", fifo)
    assert result.code == 2 and "not a regular file" in result.err
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"\n" * ((1 << 20) + 1))
    result = tally("rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", tmp_path / "r", "--probes", big)
    assert result.code == 2 and "limit" in result.err


def test_rehearse_probes_are_recorded_in_the_gate_evidence(site: Site, tmp_path: Path) -> None:
    from .script import EXAMPLES

    assert tally("window", "register", EXAMPLES / "seed003-abba.toml").code == 0
    probes = _write(tmp_path, TERMINATOR, R16_BIAS)
    with fake_vllm("spec") as server:
        result = tally("rehearse", "--url", url_of(server), "--eos", "1", "--out", tmp_path / "r", "--probes", probes,
                       "--window", "pp3-abba", "--json")
    out = json.loads(result.out)
    event = site.book.get(out["seq"])
    evidence = event.payload["evidence"]
    assert evidence["probe_list"]["sha256"] == out["probe_list"]["sha256"]
    assert evidence["probe_list"]["expected"]["r16-logit-bias"] == {"status": 400,
                                                                   "error_contains": "speculative decoding"}
    assert [p["probe"] for p in evidence["listed_probes"]] == ["r16-terminator", "r16-logit-bias"]
    blob = site.book.blob(evidence["responses"]["blob"])
    assert blob is not None and b"r16-logit-bias" in blob.data
