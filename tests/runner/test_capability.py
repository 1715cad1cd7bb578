"""The capability probe against the simulator told to ignore, or refuse, each request field in turn."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import runner.sim as sim
from runner.rehearsal.capability import FIELDS, Need, plan_needs
from runner.rehearsal.rehearsal import Rehearsal, rehearse
from runner.state.replay import replay

from .conftest import Site, tally
from .script import EXAMPLES, example_plan

EVERY_FIELD = tuple(Need(field, "honoured", "the test's plan needs every field") for field in FIELDS)


@contextmanager
def simulator(**changes: Any) -> Iterator[sim.SimHandle]:
    config = sim.default_config().with_(step_jitter=0.0, **changes)
    with sim.start(config, seed=7, time_scale=0.01) as handle:
        yield handle


def probe(handle: sim.SimHandle, needs: Sequence[Need] = EVERY_FIELD, **options: Any) -> Rehearsal:
    return rehearse(handle.url, 1, timeout=10.0, needs=needs, **options)


def failed_fields(result: Rehearsal) -> set[str]:
    return {f.field for f in result.field_failures}


def statuses(result: Rehearsal) -> dict[str, str]:
    return {f.field: f.status for f in result.fields}


# ---------------------------------------------------------------------- honoured, ignored, refused


def test_every_field_honoured_by_a_server_without_speculative_decoding() -> None:
    """The simulator serving its spec-off arm honours every field (logit_bias too): PASS, vLLM checks off."""
    with simulator(production_arm="off") as handle:
        result = probe(handle, vllm_checks=False)
    assert result.verdict == "PASS" and result.exit_code == 0, result.summary
    assert statuses(result) == dict.fromkeys(FIELDS, "honoured")
    # 23 requests and the priority probe (its policy read from /server_info: the simulator reports it)
    # the admission's five, then 25 capability requests (one per probe of capability_probes/forced_probes)
    assert len(result.capability_results) == 30 and all(r.answered for r in result.capability_results)
    assert all(r.request["max_tokens"] <= 8 for r in result.capability_results)  # tiny, as the admission's


def test_vllm_with_speculative_decoding_refuses_logit_bias_as_the_control_needs() -> None:
    with simulator() as handle:
        result = probe(handle, [n for n in EVERY_FIELD if n.field not in ("logit_bias", "min_p")])
    assert result.verdict == "PASS", result.summary
    # an engine-side field no plan registers is not probed (sent last, and only when registered)
    assert statuses(result) == {**dict.fromkeys(FIELDS, "honoured"), "logit_bias": "refused", "min_p": "unclear"}
    assert "min-p" not in {r.name for r in result.capability_results}
    assert next(f for f in result.fields if f.field == "min_p").detail == \
        "min_p: not probed (the window does not register it)"
    # vLLM refuses min_p (as logit_bias) under speculative decoding: a plan registering it is refused
    with simulator() as handle:
        registered = probe(handle, [n for n in EVERY_FIELD if n.field != "logit_bias"])
    assert statuses(registered)["min_p"] == "refused" and registered.verdict == "FAIL"
    assert [r.name for r in registered.capability_results][-6:] == ["reasoning-effort", "reasoning-effort-type",
                                                                    "top-k", "top-k-type", "min-p", "min-p-type"]
    logit_bias = next(f for f in result.fields if f.field == "logit_bias")
    assert logit_bias.need is not None and logit_bias.need.want == "refused"  # the vLLM check's need
    assert "speculative decoding" in logit_bias.detail


@pytest.mark.parametrize("field", FIELDS)
def test_each_ignored_field_fails_the_probe_named(field: str) -> None:
    with simulator(production_arm="off", ignore_fields=[field]) as handle:
        result = probe(handle, vllm_checks=False)
    assert result.verdict == "FAIL" and result.exit_code == 1
    assert statuses(result)[field] == "ignored"
    assert failed_fields(result) == {field}  # exactly that field: the others are still honoured
    assert f"{field} ignored (" in result.summary
    recorded = result.to_json()
    assert recorded["fields"][field] == "ignored"
    assert [c["field"] for c in recorded["capabilities"] if not c["ok"]] == [field]
    assert recorded["capability_failures"] == [next(f.failure for f in result.fields if f.field == field)]


@pytest.mark.parametrize("field", [f for f in FIELDS if f != "max_tokens"])  # every request carries max_tokens
def test_a_refused_field_is_told_apart_from_an_ignored_one(field: str) -> None:
    with simulator(production_arm="off", refuse_fields=[field]) as handle:
        result = probe(handle, vllm_checks=False)
    assert statuses(result)[field] == "refused" and field in failed_fields(result)
    assert f"{field} refused (" in result.summary and "HTTP 400" in next(
        f.detail for f in result.fields if f.field == field)


def test_a_field_the_plan_does_not_need_is_recorded_ignored_and_passes() -> None:
    plan, _, _ = example_plan("seed000-controlled")  # priority 0: no priority is sent
    needs = plan_needs(plan)
    assert "priority" not in {n.field for n in needs}
    with simulator(ignore_fields=["priority", "stop_token_ids"]) as handle:
        result = probe(handle, needs)
    assert result.verdict == "PASS", result.summary
    assert statuses(result)["priority"] == "ignored" and statuses(result)["stop_token_ids"] == "ignored"
    entry = next(c for c in result.to_json()["capabilities"] if c["field"] == "priority")
    assert entry["needed"] is False and entry["ok"] is True and entry["failure"] is None


def test_a_sent_field_refused_fails_even_when_its_effect_is_not_needed() -> None:
    plan, _, _ = example_plan("seed000-controlled")
    with simulator(refuse_fields=["return_token_ids"]) as handle:
        result = probe(handle, plan_needs(plan))
    assert result.verdict == "FAIL" and failed_fields(result) == {"return_token_ids"}
    assert "return_token_ids refused (" in result.summary and "tally's waves send it" in result.summary


def test_accepted_ignored_fields_pass_but_a_refusal_still_fails() -> None:
    plan, _, _ = example_plan("seed000-controlled")
    with simulator(ignore_fields=["cache_salt"]) as handle:
        accepted = probe(handle, plan_needs(plan), accept_ignored=["cache_salt"])
        refused_plain = probe(handle, plan_needs(plan))
    assert accepted.verdict == "PASS" and "ignored and accepted: cache_salt" in accepted.summary
    assert next(c for c in accepted.to_json()["capabilities"] if c["field"] == "cache_salt")["accepted_ignored"]
    assert refused_plain.verdict == "FAIL" and failed_fields(refused_plain) == {"cache_salt"}
    with simulator(refuse_fields=["cache_salt"]) as handle:
        still = probe(handle, plan_needs(plan), accept_ignored=["cache_salt"])
    assert still.verdict == "FAIL" and statuses(still)["cache_salt"] == "refused"


def forced_neutral(result: Rehearsal) -> bool:
    neutral = next(r.request for r in result.capability_results if r.name == "penalty-neutral")
    return neutral["repeat_penalty"] == neutral["repetition_penalty"] == 1.0 and neutral["temperature"] == 0


def test_a_server_like_llama_cpp_python() -> None:
    """The fields llama-cpp-python's server drops (plus stop_token_ids, which it does not declare either)."""
    dropped = ["ignore_eos", "allowed_token_ids", "priority", "cache_salt", "return_token_ids", "stream_options",
               "stop_token_ids", "structured_outputs", "guided_json", "reasoning_effort"]
    with simulator(production_arm="off", ignore_fields=dropped) as handle:
        result = probe(handle, vllm_checks=False)
    assert statuses(result) == {
        "seed": "honoured", "ignore_eos": "ignored", "max_tokens": "honoured", "priority": "ignored",
        "cache_salt": "ignored", "allowed_token_ids": "ignored", "stop_token_ids": "ignored",
        "return_token_ids": "ignored", "stream_options.include_usage": "ignored", "logit_bias": "honoured",
        "min_tokens": "honoured", "stop": "honoured", "structured_outputs": "ignored", "guided_json": "ignored",
        "response_format": "honoured", "repetition_penalty": "honoured", "presence_penalty": "honoured",
        "frequency_penalty": "honoured", "reasoning_effort": "ignored", "top_k": "honoured", "min_p": "honoured"}
    # its repeat_penalty (default 1.1 there) is neutralised under llama-cpp-python's name as well as vLLM's
    assert forced_neutral(result)
    # EOS and the stop token were forced with logit_bias, the only forcing this server honours
    forced = {r.name: r.request for r in result.capability_results}
    assert "logit_bias" in forced["ignore-eos"] and "logit_bias" in forced["stop-token-ids"]
    assert "logit_bias" in forced["min-tokens"] and forced["min-tokens"]["min_tokens"] == 3


def test_without_a_way_to_force_a_token_the_dependent_fields_are_unclear() -> None:
    """vLLM with speculative decoding refuses logit_bias; a server also ignoring allowed_token_ids leaves no forcing."""
    with simulator(ignore_fields=["allowed_token_ids"]) as handle:
        result = probe(handle)
    got = statuses(result)
    assert got["allowed_token_ids"] == "ignored"
    assert got["ignore_eos"] == got["stop_token_ids"] == got["min_tokens"] == "unclear"
    assert {r.name for r in result.capability_results}.isdisjoint({"ignore-eos", "stop-token-ids", "min-tokens"})
    # fails closed (min_p: refused under speculative decoding, as vLLM does)
    assert failed_fields(result) == {"allowed_token_ids", "ignore_eos", "stop_token_ids", "min_tokens", "min_p"}


# ---------------------------------------------------------------------- what a plan needs


def test_plan_needs_follow_the_sampling_and_the_wave_body() -> None:
    plan, _, _ = example_plan("seed000-controlled")
    needs = {n.field: n.want for n in plan_needs(plan)}
    assert needs == {"max_tokens": "honoured", "seed": "honoured", "ignore_eos": "honoured",
                     "cache_salt": "honoured", "stream_options.include_usage": "honoured",
                     "return_token_ids": "accepted"}
    abba, _, _ = example_plan("seed003-abba")  # ignore_eos false, priority 10
    needs = {n.field: n.want for n in plan_needs(abba)}
    assert needs["ignore_eos"] == "accepted" and needs["priority"] == "honoured"
    greedy = dataclasses.replace(plan, sampling=dataclasses.replace(plan.sampling, temperature=0.0))
    assert {n.field: n.want for n in plan_needs(greedy)}["seed"] == "accepted"


# ---------------------------------------------------------------------- the command


def _rehearse(url: str, out: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = tally("rehearse", "--url", url, "--eos", "1", "--out", out, "--json", *extra)
    return result.code, json.loads(result.out) if result.out.strip() else {}, result.err


def test_cli_a_field_the_plan_needs_ignored_fails_the_gate_named(site: Site, tmp_path: Path) -> None:
    assert tally("window", "register", EXAMPLES / "seed000-controlled.toml").code == 0
    with simulator(ignore_fields=["ignore_eos"]) as handle:
        code, out, err = _rehearse(handle.url, tmp_path / "r", "--window", "pp4-win2-controlled")
        text = tally("rehearse", "--url", handle.url, "--eos", "1", "--out", tmp_path / "t")
    assert code == 1, err
    event = site.book.get(out["seq"])
    assert event.payload["verdict"] == "FAIL"
    assert event.payload["summary"].startswith("FAIL: ignore_eos ignored (ignore-eos: EOS forced with ignore_eos")
    evidence = event.payload["evidence"]
    assert evidence["capability_failures"] == [event.payload["summary"][len("FAIL: "):]]
    assert evidence["fields"]["ignore_eos"] == "ignored" and evidence["vllm_checks"] is True
    saved = json.loads((tmp_path / "r" / "rehearsal.json").read_text())
    assert saved == {k: v for k, v in evidence.items() if k != "responses"}
    assert replay(site.book).windows["pp4-win2-controlled"].gates["rehearsal"].verdict == "FAIL"
    # without --window there is no plan: ignore_eos is recorded, only the vLLM checks decide
    assert text.code == 0, text.err
    assert "[not needed] ignore-eos: EOS forced with ignore_eos true" in text.out
    assert "control (vLLM)" in text.out and "terminator (vLLM)" in text.out


def test_cli_a_field_the_plan_does_not_need_ignored_passes(site: Site, tmp_path: Path) -> None:
    assert tally("window", "register", EXAMPLES / "seed000-controlled.toml").code == 0
    with simulator(ignore_fields=["priority"]) as handle:
        code, out, err = _rehearse(handle.url, tmp_path / "r", "--window", "pp4-win2-controlled")
    assert code == 0, err
    assert out["verdict"] == "PASS" and out["fields"]["priority"] == "ignored"
    assert site.book.get(out["seq"]).payload["verdict"] == "PASS"


def test_cli_vllm_checks_off_for_a_server_that_is_not_vllm(site: Site, tmp_path: Path) -> None:
    # a server that drops allowed_token_ids and logit_bias (as llama-cpp-python drops fields it does not know)
    with simulator(production_arm="off", ignore_fields=["allowed_token_ids", "logit_bias"]) as handle:
        on = _rehearse(handle.url, tmp_path / "on")
        off = _rehearse(handle.url, tmp_path / "off", "--no-vllm-checks")
    assert on[0] == 1 and [r["probe"] for r in on[1]["reading"]] == ["terminator", "control"]
    assert off[0] == 0, off[1].get("capability_failures")
    assert off[1]["vllm_checks"] is False and off[1]["needs"] == [] and off[1]["reading"] == []
    assert off[1]["cause_confirmed"] is False and off[1]["fields"]["logit_bias"] == "ignored"
    assert [p["vllm_check"] for p in off[1]["probes"]] == [False, False, False, True, True]


def test_the_control_learns_a_production_without_speculative_decoding(site: Site, tmp_path: Path) -> None:
    """vLLM refuses logit_bias only under speculative decoding (0.32 still does): a plain production answers the
    control 200 and acts on logit_bias. The rehearsal learns that from the probes, and passes a healthy server."""
    with simulator(production_arm="off") as handle:
        code, out, err = _rehearse(handle.url, tmp_path / "plain")
    assert code == 0, (err, out.get("reading"), out.get("capability_failures"))
    control = next(p for p in out["probes"] if p["probe"] == "control")
    assert control["status"] == 200 and control["ok"] and "acts on it" in control["detail"]
    assert out["cause_confirmed"] is False and out["fields"]["logit_bias"] == "honoured"
    assert {"field": "logit_bias", "want": "honoured"}.items() <= next(
        n for n in out["needs"] if n["field"] == "logit_bias").items()
    with simulator(production_arm="off", ignore_fields=["logit_bias"]) as handle:   # answered 200, not acted on
        code, out, _ = _rehearse(handle.url, tmp_path / "ignoring")
    assert code == 1 and [r["probe"] for r in out["reading"]] == ["control"]
    assert "logit_bias ignored" in " ".join(out["capability_failures"])
    with simulator() as handle:   # speculative decoding on: refused, the cause confirmed as before
        code, out, _ = _rehearse(handle.url, tmp_path / "spec")
    assert code == 0 and out["cause_confirmed"] is True and out["fields"]["logit_bias"] == "refused"


@pytest.mark.parametrize("args", [
    ("--accept-ignored", "temperature"),
    ("--accept-ignored", "x" * 10_000),
    ("--no-vllm-checks", "--accept-ignored", ""),
])
def test_cli_bad_input_is_one_line(site: Site, tmp_path: Path, args: tuple[str, ...]) -> None:
    result = tally("rehearse", "--url", "http://127.0.0.1:9", "--eos", "1", "--out", tmp_path / "r", *args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err
    assert "not a probed field" in result.err and len(result.err) < 600
    assert result.out == "" and not (tmp_path / "r").exists()


# ---------------------------------------------------------------------- hostile replies


def test_hostile_replies_are_bounded_and_never_drive_the_terminal(site: Site, tmp_path: Path) -> None:
    """Frames nested 100,000 deep, 50,000 token ids, escape sequences: read bounded, kept clipped, printed escaped."""
    from tests.measure.hostile import Handler, serve

    class Garbage(Handler):
        def post(self, body: dict[str, Any]) -> None:
            if body.get("stream"):
                data = b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\ndata: [DONE]\n\n"
                self.send_body(200, data, "text/event-stream")
            elif isinstance(body.get("priority"), dict):
                message = "\x1b[2J wiped\nsecond line " * 1000
                self.send_body(400, json.dumps({"error": {"message": message}}).encode())
            else:
                choice = {"text": "\x1b[31m red\r\n" * 10_000, "finish_reason": "length",
                          "token_ids": list(range(50_000))}
                self.send_body(200, json.dumps({"choices": [choice], "usage": {"completion_tokens": 4}}).encode())

    with serve(Garbage) as server:
        code, out, err = _rehearse(server.url, tmp_path / "r", "--no-vllm-checks")
        text = tally("rehearse", "--url", server.url, "--eos", "1", "--out", tmp_path / "t", "--no-vllm-checks")
    assert code == 0, err  # nothing is needed without --window and the vLLM checks
    assert out["fields"]["stream_options.include_usage"] == "unclear"  # the deep frame is not JSON to tally
    assert out["fields"]["priority"] == "unclear"   # read (the object is refused), its scheduling not seen
    for entry in out["probes"] + out["capability_probes"]:
        parts = entry["parts"]
        assert parts.get("token_ids") is None or len(parts["token_ids"]) <= 64
        assert len(json.dumps(parts.get("text"), ensure_ascii=False).encode()) <= 1024
        assert len(json.dumps(entry["error"], ensure_ascii=False).encode()) <= 8 << 10
    assert "\x1b" not in text.out and all(len(line) < 2000 for line in text.out.splitlines())


def test_a_natural_stop_does_not_pass_for_a_forced_one() -> None:
    """A model that ends "Stop here." at once (SmolLM2 on llama-cpp-python does) and a server ignoring
    allowed_token_ids: the terminator passes by coincidence; the capability probe, which forces EOS where
    the baseline runs on, reads allowed_token_ids as ignored and forces with logit_bias instead."""
    from tests.measure.hostile import Handler, serve

    class NaturalStop(Handler):
        def post(self, body: dict[str, Any]) -> None:
            bias = body.get("logit_bias") or {}
            if body.get("prompt") == "Stop here." or bias.get("1") == 100:
                choice, tokens = {"text": "", "finish_reason": "stop"}, 0
            elif bias:  # another token forced: its text, up to max_tokens (stop_token_ids is not read)
                choice, tokens = {"text": " x" * body["max_tokens"], "finish_reason": "length"}, body["max_tokens"]
            else:
                choice, tokens = {"text": " four" * body["max_tokens"], "finish_reason": "length"}, body["max_tokens"]
            self.send_body(200, json.dumps({"choices": [choice], "usage": {"completion_tokens": tokens}}).encode())

    with serve(NaturalStop) as server:
        result = rehearse(server.url, 1, timeout=10.0, vllm_checks=False)
    terminator = next(r for r in result.results if r.name == "terminator")
    assert terminator.ok  # the old probe alone would have said allowed_token_ids works
    got = statuses(result)
    assert got["allowed_token_ids"] == "ignored" and got["logit_bias"] == "honoured"
    assert got["ignore_eos"] == "ignored" and got["stop_token_ids"] == "ignored"
    forced = {r.name: r.request for r in result.capability_results}
    assert "logit_bias" in forced["ignore-eos"] and "allowed_token_ids" not in forced["ignore-eos"]


def test_greedy_identity_refuses_a_repeat_penalty_it_cannot_neutralise_and_accepts_the_others_ignored() -> None:
    """The repeat penalty must be honoured (llama-cpp-python's default 1.1 stays otherwise); presence and
    frequency penalties, 0 by default everywhere, need only be accepted."""
    from runner.plan import load_plan
    from runner.rehearsal.capability import smoke_needs, smoke_refusals

    plan = load_plan(EXAMPLES / "seed003-abba.toml")
    wants = {n.field: n.want for n in smoke_needs(plan)}
    assert wants["repetition_penalty"] == "honoured"
    assert wants["presence_penalty"] == wants["frequency_penalty"] == "accepted"
    quiet = {"repetition_penalty": "honoured", "presence_penalty": "ignored", "frequency_penalty": "ignored"}
    assert smoke_refusals(plan, quiet) == []
    refused = smoke_refusals(plan, {**quiet, "repetition_penalty": "ignored", "presence_penalty": "refused"})
    assert [r.split(" (")[0] for r in refused] == ["the smoke stage relies on repetition_penalty",
                                                  "the smoke stage relies on presence_penalty"]
