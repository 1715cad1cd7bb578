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
    bundle: Path | None = None   # the whole ledger (`tally export`), where the looks are counted
    registered: int = 0          # the seq of the policy's promotion.registered


def cli(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def export(e: Exported, seq: int, out: Path, *extra: str | Path) -> Path:
    code, _, err = cli("--db", e.db, "--key", e.key, "receipt", "export", str(seq), "--out", out, *extra)
    assert code == 0, err
    return out


def policy_text() -> str:
    """The example policy with a budget of two looks: alpha 0.05 spent 0.025 a look, the rule's own one-sided
    level, so each look's WIN at 95 % passes its spent level (the example's 28 looks need far more repeats)."""
    text = POLICY.read_text()
    assert "max_looks = 28" in text
    return text.replace("max_looks = 28", "max_looks = 2")


def policy(tmp: Path, e: Exported, *, witnesses: int = 3, threshold: int = 2, edit: str = "") -> Path:
    text = policy_text()
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


def check(receipt: Path, policy_file: Path, *extra: str | Path, ledger: Path | None = None) -> tuple[int, dict, str]:
    """``promote check --json``, the looks counted in ``ledger`` (default: the fixture's whole-ledger bundle)."""
    bundle = ledger if ledger is not None else LEDGER.get("bundle")
    more = ("--ledger", bundle) if bundle is not None else ()
    code, out, err = cli("promote", "check", receipt, "--policy", policy_file, "--json", *more, *extra)
    return code, json.loads(out) if out.strip() else {}, err


LEDGER: dict[str, Path] = {}


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
        origin = w.book.info.origin
        log_vkey = note.vkey(origin, w.root.public_raw)
        # the policy's error budget over looks, registered before the first look
        trust = f'[trust]\nlog_vkeys = ["{log_vkey}"]\n'
        (root / "registered.toml").write_text(re.sub(r"\[trust\]\n(?:(?!\[).*\n)*", trust + "\n", policy_text()))
        code, out, err = cli("--db", w.directory / "tally.db", "--key", w.directory / ".tally" / "root.pem",
                             "promote", "register", "--policy", root / "registered.toml", "--json")
        assert code == 0, err
        registered = json.loads(out)["seq"]
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
        e = Exported(root, w.directory / "tally.db", w.directory / ".tally" / "root.pem",
                     log_vkey, [x.vkey() for x in witnesses], cosigned, seqs, {}, registered=registered)
    finally:
        close(w)
    for wid, seq in seqs.items():
        e.receipts[wid] = export(e, seq, root / f"r-{wid}", "--checkpoint", cosigned, "--window-context")
    code, _, err = cli("--db", e.db, "--key", e.key, "export", root / "bundle")
    assert code == 0, err
    e.bundle = LEDGER["bundle"] = root / "bundle"
    yield e
    LEDGER.clear()


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
    code, text, _ = cli("promote", "check", exported.receipts["promo-pp"], "--policy", policy(tmp_path, exported),
                        "--ledger", exported.bundle or "")
    assert code == 0 and text.startswith("PROMOTABLE: decision receipt seq"), text
    print(text)


def test_promote_refuses_controlled_mode(exported: Exported, tmp_path: Path) -> None:
    """A controlled window's WIN (fixed5 greedy vs fixed5 sampled) is not the production comparison."""
    code, out, _ = check(exported.receipts["promo-ctl"], policy(tmp_path, exported))
    assert code == 1 and out["verdict"] == "NOT_PROMOTABLE"
    assert failing(out) == ["mode"]
    assert "mode controlled" in out["reasons"][0] and "accepts production-policy" in out["reasons"][0]
    code, text, _ = cli("promote", "check", exported.receipts["promo-ctl"], "--policy", policy(tmp_path, exported),
                        "--ledger", exported.bundle or "")
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
    code, _, err = cli("promote", "check", receipt, "--policy", policy(tmp_path, exported), "--ledger",
                       tmp_path / "absent")
    assert code == 2 and "not a bundle directory" in err and len(err.strip().splitlines()) == 1


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


# ---------------------------------------------------------------------- looks


def test_promote_check_counts_looks_across_separate_windows_of_the_candidate(exported: Exported,
                                                                             tmp_path: Path) -> None:
    """promo-pp and promo-ctl measure one candidate (arm B's declared digest, the experiment commit): two looks,
    both decisions' seqs in the output, and the count covers the receipt's checkpoint of this ledger."""
    code, out, err = check(exported.receipts["promo-pp"], policy(tmp_path, exported))
    assert code == 0, (err, out.get("reasons"))
    looks = out["looks"]
    seqs = sorted(exported.seqs.values())
    assert looks["count"] == 2 and looks["seqs"] == seqs
    assert looks["index"] == seqs.index(exported.seqs["promo-pp"]) + 1
    assert looks["candidate"]["config_digest"] == "1f3d1794386b1163334c6a363cd5fa7e3d2f904bd984538eecef139d9257f9b4"
    assert looks["registered_seq"] == exported.registered < seqs[0]
    assert looks["ledger"]["origin"] == out["receipt"]["origin"]
    assert looks["ledger"]["checkpoint_size"] == out["receipt"]["checkpoint"]["size"]
    assert looks["test"]["confidence"] == pytest.approx(0.95) and looks["test"]["passes"]
    checks = {c["check"]: c for c in out["checks"]}
    assert checks["looks.ledger"]["ok"] and checks["looks.registered"]["ok"] and checks["looks.budget"]["ok"]
    assert f"look {looks['index']} of 2" in checks["looks.budget"]["detail"]


def test_promote_refuses_a_win_past_the_budget_spent(exported: Exported, tmp_path: Path) -> None:
    """The same WIN under the example's budget (28 looks, alpha / 28 each): its 99.64 % interval includes 0."""
    rules = policy(tmp_path, exported, edit="max_looks = 2 => max_looks = 28")
    code, out, _ = check(exported.receipts["promo-pp"], rules)
    assert code == 1 and "looks.budget" in failing(out)
    assert "looks.registered" in failing(out)   # and it is not the budget registered before the first look
    assert out["looks"]["test"]["confidence"] == pytest.approx(1 - 2 * 0.05 / 28)


def test_promote_check_without_the_ledger_cannot_count_looks(exported: Exported, tmp_path: Path) -> None:
    code, out, _ = cli("promote", "check", exported.receipts["promo-pp"], "--policy", policy(tmp_path, exported),
                       "--json")
    result = json.loads(out)
    assert code == 1 and failing(result) == ["looks.ledger"] and "no ledger presented" in result["reasons"][0]
    # a partial export of the window's stream cannot show every look
    partial = tmp_path / "partial"
    assert cli("--db", exported.db, "--key", exported.key, "export", partial, "--stream", "window/promo-pp")[0] == 0
    code, result, _ = check(exported.receipts["promo-pp"], policy(tmp_path, exported), ledger=partial)
    assert code == 1 and failing(result) == ["looks.ledger"] and "partial" in result["reasons"][0]


def test_promote_check_refuses_a_ledger_that_does_not_verify(exported: Exported, tmp_path: Path) -> None:
    import shutil

    assert exported.bundle is not None
    bad = tmp_path / "bundle"
    shutil.copytree(exported.bundle, bad)
    events = bad / "events.jsonl"
    lines = events.read_text().splitlines()
    (index,) = [i for i, line in enumerate(lines) if f'"seq":{exported.seqs["promo-ctl"]},' in line]
    lines[index] = lines[index].replace('"decision":"WIN"', '"decision":"NO_CHANGE"', 1)
    events.write_text("\n".join(lines) + "\n")
    code, out, _ = check(exported.receipts["promo-pp"], policy(tmp_path, exported), ledger=bad)
    assert code == 1 and failing(out) == ["looks.ledger"] and "does not verify" in out["reasons"][0]


def test_promote_refuses_a_budget_not_registered_before_the_first_look(exported: Exported, tmp_path: Path) -> None:
    # another name: never registered
    code, out, _ = check(exported.receipts["promo-pp"], policy(
        tmp_path, exported, edit='name = "PP4-PROMOTE-GATE-V2" => name = "PP4-PROMOTE-GATE-V3"'))
    assert code == 1 and failing(out) == ["looks.registered"] and "holds no promotion.registered" in out["reasons"][0]
    # the registered name with another budget
    code, out, _ = check(exported.receipts["promo-pp"], policy(tmp_path, exported, edit="alpha = 0.05 => alpha = 0.2"))
    assert code == 1 and "looks.registered" in failing(out) and "is not the policy's" in " ".join(out["reasons"])
    # registered again: refused, naming the seq it was registered at
    code, _, err = cli("--db", exported.db, "--key", exported.key, "promote", "register", "--policy",
                       policy(tmp_path, exported))
    assert code == 1 and f"registered already at seq {exported.registered}" in err
    # a policy without [looks] registers no budget: refused
    bare = policy(tmp_path, exported)
    bare.write_text(bare.read_text().split("\n[looks]")[0] + "\n")
    code, out, _ = check(exported.receipts["promo-pp"], bare)
    assert code == 1 and failing(out) == ["looks"] and "registers no error budget" in out["reasons"][0]


def test_a_budget_registered_after_the_first_look_is_refused(exported: Exported, tmp_path: Path) -> None:
    """A policy registered after the candidate's looks: its budget did not exist when they were looked at."""
    late = policy(tmp_path, exported, threshold=0, edit='name = "PP4-PROMOTE-GATE-V2" => name = "PP4-LATE"')
    code, _, err = cli("--db", exported.db, "--key", exported.key, "promote", "register", "--policy", late)
    assert code == 0, err
    code, note_text, err = cli("--db", exported.db, "--key", exported.key, "checkpoint")   # covers the registration
    assert code == 0, err
    (tmp_path / "cp.txt").write_text(note_text)
    receipt = export(exported, exported.seqs["promo-pp"], tmp_path / "receipt", "--window-context", "--checkpoint",
                     tmp_path / "cp.txt")
    assert cli("--db", exported.db, "--key", exported.key, "export", tmp_path / "bundle")[0] == 0
    code, out, _ = check(receipt, late, ledger=tmp_path / "bundle")
    assert code == 1 and failing(out) == ["looks.registered"], out["reasons"]
    assert f"after the candidate's first look at seq {min(exported.seqs.values())}" in out["reasons"][0]
