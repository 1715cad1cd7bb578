"""`tally measure --counter-source / --spec-off`: the source read, spec-off rounds, a bad name refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import runner.sim as sim
from cli.app import app
from runner.sim import SimHandle

from .conftest import fast_config


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_bad_counter_source_is_one_line_before_anything_is_sent(server: SimHandle, family_file: Path) -> None:
    before = server.truth()["next"]
    code, out, err = invoke("measure", "--url", server.url, "--family", str(family_file), "--counter-source", "tgi")
    assert code == 2 and out == ""
    assert err.strip() == "tally: unknown counter source 'tgi'; counter sources: vllm, llamacpp, sglang, none"
    assert server.truth()["next"] == before


def test_llamacpp_server_without_spec_decoding(family_file: Path) -> None:
    with sim.start(fast_config(metrics_format="llamacpp", stream_mode="token", production_arm="off")) as host:
        code, out, err = invoke("measure", "--url", host.url, "--family", str(family_file), "--max-tokens", "16",
                                "--counter-source", "llamacpp", "--spec-off", "--json")
    assert code == 0, err
    report = json.loads(out)
    wave = report["wave"]
    assert wave["complete"] and wave["counters_missing"] == []
    assert wave["counters"]["rounds"] == 5 * 15 and wave["counters"]["accepted"] == 0
    assert wave["counter_source"] == {**wave["counter_source"], "name": "llamacpp", "speculative": False,
                                      "chunks_are_steps": False, "first_tokens": 5}
    assert report["figures"]["chunks_are_steps"] is False and report["measure"]["spec_off"] is True
    assert all(r["round_ms_p95"] is None for r in wave["requests"])


def test_source_none_prints_client_figures_only(family_file: Path) -> None:
    with sim.start(fast_config(metrics_format="none")) as host:
        code, out, err = invoke("measure", "--url", host.url, "--family", str(family_file), "--max-tokens", "16",
                                "--counter-source", "none")
    assert code == 0, err
    assert "server counters unavailable: counter source none" in out
    assert "per-token ITL ms" in out and "not engine steps" in out
    assert "incomplete" not in out


@pytest.mark.parametrize("source", ["vllm", "none"])
def test_gauges_and_host_load_in_the_summary(server: SimHandle, family_file: Path, source: str) -> None:
    code, out, err = invoke("measure", "--url", server.url, "--family", str(family_file), "--max-tokens", "8",
                            "--counter-source", source, "--json")
    assert code == 0, err
    wave = json.loads(out)["wave"]
    assert len(wave["host_load"]["before"]) == 3 and len(wave["host_load"]["after"]) == 3
    assert (wave["gauges"]["before"] is None) is (source == "none")
