"""``tally promote check`` end to end: simulated seed 000 windows, their decision receipts exported, checked offline."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import note
from ledger.checkpoint import SignedCheckpoint
from ledger.keys import Signer
from ledger.signing import sign_checkpoint
from ledger.witness import Witness

from .worlds import arms, close, gate_all, run, small, window, world

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CELLS = ("short-b1", "32k-b1")  # seed 000's two decision cells, as the policy names them
POLICY = EXAMPLES / "promotion" / "pp4-promote-gate-v2.toml"
BASE = "{ draft_depth = 5, accept_per_pos = [0.80, 0.70, 0.60, 0.50, 0.40], step_base_ms = 9.0, step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }"
BETTER = "{ draft_depth = 5, accept_per_pos = [0.95, 0.90, 0.85, 0.80, 0.75], step_base_ms = 9.0, step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }"


@dataclass
class Exported:
    root: Path
    db: Path
    key: Path
    log_vkey: str
    witnesses: list[str]  # three witness vkeys; the checkpoint carries the first two's cosignatures
    cosigned: Path        # the cosigned checkpoint file
    seqs: dict[str, int]  # window id -> decision seq
    receipts: dict[str, Path]


def cli(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def export(e: Exported, seq: int, out: Path, *extra: str | Path) -> Path:
    code, _, err = cli("--db", e.db, "--key", e.key, "receipt", "export", str(seq), "--out", out, *extra)
    assert code == 0, err
    return out


def policy(tmp: Path, e: Exported, *, witnesses: int = 3, threshold: int = 2, edit: str = "") -> Path:
    text = POLICY.read_text()
    trust = (f'[trust]\nlog_vkeys = ["{e.log_vkey}"]\nwitness_vkeys = {json.dumps(e.witnesses[:witnesses])}\n'
             f"witness_threshold = {threshold}\n")
    text = re.sub(r"\[trust\]\n(?:(?!\[).*\n)*", trust + "\n", text)
    if edit:
        old, new = edit.split(" => ")
        assert old in text
        text = text.replace(old, new)
    path = tmp / f"policy-{abs(hash((witnesses, threshold, edit)))}.toml"
    path.write_text(text)
    return path


def check(receipt: Path, policy_file: Path, *extra: str) -> tuple[int, dict, str]:
    code, out, err = cli("promote", "check", receipt, "--policy", policy_file, "--json", *extra)
    return code, json.loads(out) if out.strip() else {}, err


def failing(out: dict) -> list[str]:
    return [c["check"] for c in out["checks"] if not c["ok"]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """Seed 000's production-policy and controlled windows, each with B clearly better (a WIN), decided;
    a checkpoint cosigned by two of three witnesses; both decision receipts exported with their context."""
    root = tmp_path_factory.mktemp("promote")

    def pp(text: str) -> str:
        return arms(small(text, max_tokens=256, cells=CELLS), P=BASE, B=BETTER)

    def controlled(text: str) -> str:
        return arms(small(text, max_tokens=256, cells=CELLS), A=BASE, B=BETTER)

    w = world(root / "world", [window("seed000-production-policy.toml", "promo-pp", edit=pp, chain="none"),
                               window("seed000-controlled.toml", "promo-ctl", edit=controlled, chain="none")],
              sim_config={"seed": 2, "start_jitter": 0.01}, time_scale=0.02)
    try:
        gate_all(w)
        decisions = {wid: run(w, wid).decision for wid in ("promo-pp", "promo-ctl")}
        assert decisions == {"promo-pp": "WIN", "promo-ctl": "WIN"}, decisions
        seqs = {wid: next(w.book.events(stream=f"window/{wid}", types=["decision.recorded"])).seq
                for wid in decisions}
        signed = sign_checkpoint(w.book, w.root)
        text = signed.note
        witnesses = [Witness(root / f"w{i}", f"witness.example/w{i}", Signer.generate()) for i in range(3)]
        for witness in witnesses[:2]:
            text = witness.cosign(text, [w.root.public_raw], None, now=1_700_000_000).note
        cosigned = root / "cosigned.txt"
        cosigned.write_text(SignedCheckpoint(signed.checkpoint, text).note)
        origin = w.book.info.origin
        e = Exported(root, w.directory / "tally.db", w.directory / ".tally" / "root.pem",
                     note.vkey(origin, w.root.public_raw), [x.vkey() for x in witnesses], cosigned, seqs, {})
    finally:
        close(w)
    for wid, seq in seqs.items():
        e.receipts[wid] = export(e, seq, root / f"r-{wid}", "--checkpoint", cosigned, "--window-context")
    yield e


def test_promote_check_passes_a_seed_000_production_policy_win(exported: Exported, tmp_path: Path) -> None:
    """End to end from a simulated seed-000 production-policy window: the receipt verifies offline
    (two of three witnesses), every policy condition holds, PROMOTABLE, exit 0."""
    code, out, err = check(exported.receipts["promo-pp"], policy(tmp_path, exported))
    assert code == 0, (err, out.get("reasons"))
    assert out["verdict"] == "PROMOTABLE" and out["reasons"] == [] and out["window"] == "promo-pp"
    checks = {c["check"]: c for c in out["checks"]}
    assert set(checks) >= {"receipt", "witness_quorum", "context", "plan", "mode", "rule", "decision", "recompute",
                           "metric_set", "recorded_fields", "gates", "qualification_binding", "rng_binding",
                           "clocks.same_cap", "clocks.production_cap", "clocks.thermal", "clocks.recorded"}
    assert "2 of the policy's 3 witnesses" in checks["witness_quorum"]["detail"]
    assert "mode production-policy" in checks["mode"]["detail"]
    assert "is the carried commit" in checks["qualification_binding"]["detail"]
    assert "all 10 policy tests passed" in checks["rng_binding"]["detail"]
    assert out["receipt"]["seq"] == exported.seqs["promo-pp"] and out["receipt"]["type"] == "decision.recorded"
    # the text form says it in one word, and it read nothing but the files
    code, text, _ = cli("promote", "check", exported.receipts["promo-pp"], "--policy", policy(tmp_path, exported))
    assert code == 0 and text.startswith("PROMOTABLE: decision receipt seq"), text
    print(text)


def test_promote_refuses_controlled_mode(exported: Exported, tmp_path: Path) -> None:
    """A controlled window's WIN (fixed5 greedy vs fixed5 sampled) is not the production comparison."""
    code, out, _ = check(exported.receipts["promo-ctl"], policy(tmp_path, exported))
    assert code == 1 and out["verdict"] == "NOT_PROMOTABLE"
    assert failing(out) == ["mode"]
    assert "mode controlled" in out["reasons"][0] and "accepts production-policy" in out["reasons"][0]
    code, text, _ = cli("promote", "check", exported.receipts["promo-ctl"], "--policy", policy(tmp_path, exported))
    assert code == 1 and text.startswith("NOT PROMOTABLE") and "FAIL mode" in text


def test_promote_refuses_a_receipt_without_witness_quorum(exported: Exported, tmp_path: Path) -> None:
    # three of three required, two cosigned
    code, out, _ = check(exported.receipts["promo-pp"], policy(tmp_path, exported, threshold=3))
    assert code == 1 and failing(out) == ["witness_quorum"]
    assert "2 of the policy's 3 witnesses cosigned the checkpoint" in out["reasons"][0] and "needs 3" in out["reasons"][0]
    # a receipt proven against an uncosigned checkpoint: no witness at all
    plain = export(exported, exported.seqs["promo-pp"], tmp_path / "plain", "--window-context")
    code, out, _ = check(plain, policy(tmp_path, exported, threshold=1))
    assert code == 1 and failing(out) == ["witness_quorum"] and "0 of the policy's 3" in out["reasons"][0]
    # only the one witness that did not cosign is trusted
    code, out, _ = check(exported.receipts["promo-pp"], _only_third_witness(tmp_path, exported))
    assert code == 1 and failing(out) == ["witness_quorum"]


def _only_third_witness(tmp: Path, e: Exported) -> Path:
    path = policy(tmp, e)
    text = path.read_text().replace(json.dumps(e.witnesses[:3]), json.dumps(e.witnesses[2:3]))
    text = text.replace("witness_threshold = 2", "witness_threshold = 1")
    path.write_text(text)
    return path


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for item in src.iterdir():
        (dst / item.name).write_bytes(item.read_bytes())
    return dst


def test_promote_refuses_a_tampered_receipt(exported: Exported, tmp_path: Path) -> None:
    seq = exported.seqs["promo-pp"]
    good = exported.receipts["promo-pp"]
    rules = policy(tmp_path, exported)

    # the event file says LOSS where the signed Statement says WIN
    bad = _copy(good, tmp_path / "event")
    event = bad / f"{seq}.event.json"
    event.write_text(event.read_text().replace('"decision":"WIN"', '"decision":"LOSS"', 1))
    code, out, _ = check(bad, rules)
    assert code == 1 and failing(out) == ["receipt"] and "does not verify" in out["reasons"][0]

    # the envelope's payload re-written (its signature no longer holds)
    bad = _copy(good, tmp_path / "envelope")
    envelope = bad / f"{seq}.dsse.json"
    wire = json.loads(envelope.read_text())
    payload = base64.b64decode(wire["payload"]).replace(b'"decision":"WIN"', b'"decision":"NO_CHANGE"', 1)
    wire["payload"] = base64.b64encode(payload).decode()
    envelope.write_text(json.dumps(wire))
    code, out, _ = check(bad, rules)
    assert code == 1 and failing(out) == ["receipt"]

    # a context event edited: the admission receipt's commit in the qualification evidence
    bad = _copy(good, tmp_path / "context")
    context = bad / f"{seq}.context.jsonl"
    lines = context.read_text().splitlines()
    (index,) = [i for i, line in enumerate(lines) if '"gate":"qualification"' in line]
    lines[index] = re.sub(r'"qualified_commit":"[0-9a-f]{40}"', '"qualified_commit":"' + "0" * 40 + '"', lines[index])
    context.write_text("\n".join(lines) + "\n")
    code, out, _ = check(bad, rules)
    assert code == 1 and "context" in failing(out) and "does not hash" in " ".join(out["reasons"])

    # a context event dropped from the middle (its proof line too): the window.admitted event
    bad = _copy(good, tmp_path / "dropped")
    context, proofs = bad / f"{seq}.context.jsonl", bad / f"{seq}.context-proofs.jsonl"
    lines, records = context.read_text().splitlines(), proofs.read_text().splitlines()
    (index,) = [i for i, line in enumerate(lines) if '"type":"window.admitted"' in line]
    context.write_text("\n".join(lines[:index] + lines[index + 1:]) + "\n")
    proofs.write_text("\n".join(records[:index] + records[index + 1:]) + "\n")
    code, out, _ = check(bad, rules)
    assert code == 1 and failing(out) == ["gates"] and "no window.admitted" in out["reasons"][0]

    # the tlog-proof pointed at another checkpoint root
    bad = _copy(good, tmp_path / "proof")
    proof = bad / f"{seq}.tlog-proof"
    text = proof.read_text().split("\n")
    text[2] = base64.b64encode(bytes(32)).decode()
    proof.write_text("\n".join(text))
    code, out, _ = check(bad, rules)
    assert code == 1 and failing(out) == ["receipt"]


def test_promote_refuses_a_receipt_without_window_context(exported: Exported, tmp_path: Path) -> None:
    bare = export(exported, exported.seqs["promo-pp"], tmp_path / "bare", "--checkpoint", exported.cosigned)
    code, out, _ = check(bare, policy(tmp_path, exported))
    assert code == 1 and failing(out) == ["context"] and "--window-context" in out["reasons"][0]


@pytest.mark.parametrize(("edit", "fails"), [
    ('primary = "pooled_rate_tps" => primary = "tpot_ms"', "metric_set"),
    ('reported = ["ms_per_round", "ttft_s"] => reported = ["ms_per_round"]', "metric_set"),
    ('guards = ["accepted_per_round", "decode_tps"] => guards = ["accepted_per_round"]', "metric_set"),
    ('"pp4_sampled_q_multiround_4",\n] => "pp4_sampled_q_multiround_4", "pp4_extra_test",\n]', "rng_binding"),
    ("require_day_to_day = false => require_day_to_day = true", "archive"),
    ('"input.archive", => "input.archive", "result.promotion_fields",', "recorded_fields"),
    ('cells = ["short-b1", "32k-b1"] => cells = ["short-b1", "32k-b1", "8k-b1"]', "metric_set"),
])
def test_promote_policy_conditions_each_refuse(exported: Exported, tmp_path: Path, edit: str, fails: str) -> None:
    code, out, _ = check(exported.receipts["promo-pp"], policy(tmp_path, exported, edit=edit))
    assert code == 1 and failing(out) == [fails], out["reasons"]


def test_promote_bad_input_is_exit_2(exported: Exported, tmp_path: Path) -> None:
    receipt = exported.receipts["promo-pp"]
    assert check(receipt, tmp_path / "absent.toml")[0] == 2
    assert cli("promote", "check", receipt, "--policy", POLICY)[0] == 2  # the example's placeholder log vkey
    bad = policy(tmp_path, exported, edit='rule = "win2-v1" => rule = "win2-v1"\nsurprise = 1')
    code, _, err = cli("promote", "check", receipt, "--policy", bad)
    assert code == 2 and "surprise" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("promote", "check", tmp_path, "--policy", policy(tmp_path, exported))
    assert code == 2 and "holds no decision receipt" in err
    code, _, err = cli("promote", "check", receipt, "--policy", policy(tmp_path, exported), "--seq", "1")
    assert code == 2 and "has no 1.dsse.json" in err
    fifo_dir = _copy(receipt, tmp_path / "fifo")
    import os

    context = fifo_dir / f"{exported.seqs['promo-pp']}.context.jsonl"
    context.unlink()
    os.mkfifo(context)
    code, _, err = cli("promote", "check", fifo_dir, "--policy", policy(tmp_path, exported))
    assert code == 2 and "not a regular file" in err


def _context_events(e: Exported) -> list:
    from ledger.event import event_from_json

    seq = e.seqs["promo-pp"]
    lines = (e.receipts["promo-pp"] / f"{seq}.context.jsonl").read_text().splitlines()
    return [event_from_json(json.loads(line)) for line in lines]


def test_qualification_binding_refuses_an_admission_receipt_of_another_commit(exported: Exported) -> None:
    """The binding itself: the admission receipt's commit must be the carried commit, carried to the plan's."""
    import dataclasses

    from runner.plan.parse import parse_plan
    from runner.promotion import check as promotion

    events = _context_events(exported)
    plan = parse_plan(next(e for e in events if e.type == "window.registered").payload["plan"])
    admitted = next(e for e in events if e.type == "window.admitted")
    gate = next(e for e in events if e.type == "gate.result" and e.payload["gate"] == "qualification")

    def binding(payload: dict, admitted_commit: str | None = None) -> promotion.Check:
        checks = promotion._Checks()
        admitted_event = admitted if admitted_commit is None else dataclasses.replace(
            admitted, payload_json=json.dumps({**admitted.payload, "commit": admitted_commit}))
        promotion._binding(dataclasses.replace(gate, payload_json=json.dumps(payload)), admitted_event, plan, checks)
        (check,) = checks.items
        return check

    assert binding(gate.payload).ok
    evidence = gate.payload["evidence"]
    other = {**gate.payload, "evidence": {**evidence, "admission": {**evidence["admission"], "commit": "77" * 20}}}
    check = binding(other)
    assert not check.ok and "is not the carried commit" in check.detail
    unqualified = {**gate.payload, "evidence": {**evidence, "admission": {**evidence["admission"],
                                                                         "verdict": "NOT_QUALIFIED"}}}
    assert "not QUALIFIED" in binding(unqualified).detail
    elsewhere = {**gate.payload, "evidence": {**evidence, "head": "66" * 20}}
    assert "not the plan's commit" in binding(elsewhere).detail
    assert "not the plan's commit" in binding(gate.payload, admitted_commit="66" * 20).detail


def test_receipt_export_window_context_refuses_an_event_outside_a_window(exported: Exported, tmp_path: Path) -> None:
    code, _, err = cli("--db", exported.db, "--key", exported.key, "receipt", "export", "1", "--out", tmp_path / "x",
                       "--window-context")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_receipt_export_window_context_leaves_the_plain_receipt_unchanged(exported: Exported, tmp_path: Path) -> None:
    """The context files are extra: the three receipt files are byte for byte what an export without them writes."""
    seq = exported.seqs["promo-pp"]
    plain = export(exported, seq, tmp_path / "plain", "--checkpoint", exported.cosigned)
    assert sorted(p.name for p in plain.iterdir()) == [f"{seq}.dsse.json", f"{seq}.event.json", f"{seq}.tlog-proof"]
    with_context = exported.receipts["promo-pp"]
    for name in (f"{seq}.tlog-proof", f"{seq}.event.json"):
        assert (plain / name).read_bytes() == (with_context / name).read_bytes()
    code, _, err = cli("receipt", "verify", with_context / f"{seq}.dsse.json", "--vkey", exported.log_vkey)
    assert code == 0, err
