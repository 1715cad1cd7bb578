"""``tally demo --scenario looks``: a candidate looked at window after window, then the promotion gate.

The promotion policy's budget over looks is registered first (``promotion.registered``).
A candidate with no effect (arm B runs exactly as production's policy P) is measured in
``CHAIN`` chained windows; the best of them (a WIN first, else the one whose smallest cell
point is the largest: the one an operator would present) is checked by the promotion gate
with the whole ledger presented: NOT PROMOTABLE, its looks
counted and the level its look may spend not reached. A candidate with a real effect
(another config digest: its own looks) is measured once and promoted.

Everything is written under ``looks/``: the policy, each checked receipt (as ``tally
receipt export SEQ --window-context`` writes it) and the whole ledger's bundle, so the
check can be run again with ``tally promote check``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["BUDGET", "CHAIN", "check_looks", "looks_windows", "register_budget"]

CHAIN = 3                       # the no-effect candidate's chained windows
BUDGET = {"alpha": 0.05, "max_looks": 5, "spending": "bonferroni"}
"""The demo policy's budget: 5 % over at most five looks (a working week of daily windows), 1 % a look."""
EFFECT_ARM = "fixed5-sampled-tuned"
BETTER = ("{ draft_depth = 5, accept_per_pos = [0.95, 0.90, 0.85, 0.80, 0.75], step_base_ms = 9.0, "
          "step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }")
POLICY = Path(__file__).resolve().parent / "data" / "promotion" / "pp4-promote-gate-v2.toml"  # packaged copy


def _small(text: str) -> str:
    """Shorter outputs and one prompt per family and context: a window in seconds."""
    text = re.sub(r"max_tokens = \d+", "max_tokens = 256", text)
    return re.sub(r'orders = \{ short = \["(\w+-short-\d+)"[^]]*\], 32k = \["(\w+-32k-\d+)"[^]]*\] \}',
                  r'orders = { short = ["\1"], 32k = ["\2"] }', text)


def _sim_of(text: str, role: str) -> re.Match[str]:
    match = re.search(rf'(role = "{role}"\n(?:.*\n)*?sim = )(\{{[^}}]*\}})', text)
    assert match is not None, f"the plan has no sim table for arm {role}"
    return match


def _no_effect(text: str) -> str:
    """Arm B simulated exactly as arm P: the candidate changes nothing."""
    text = _small(text)
    same = _sim_of(text, "P").group(2)
    b = _sim_of(text, "B")
    return text[:b.start(2)] + same + text[b.end(2):]


def _effect(text: str) -> str:
    """Another candidate (its own name and config digest) that accepts far more draft tokens."""
    text = _small(text)
    b = _sim_of(text, "B")
    text = text[:b.start(2)] + BETTER + text[b.end(2):]
    digest = hashlib.sha256(EFFECT_ARM.encode()).hexdigest()
    text = text.replace('name = "fixed5-sampled"', f'name = "{EFFECT_ARM}"', 1)
    return re.sub(r'(role = "B"\n(?:.*\n)*?config_digest = )"[0-9a-f]{64}"', rf'\1"{digest}"', text, count=1)


def looks_windows(window: Callable[..., Any]) -> list[Any]:
    """The chained windows of the no-effect candidate, then one window of the candidate with an effect
    (``window``: ``scenarios.DemoWindow``, passed in so that this module does not import its caller)."""
    chain = [window("seed000-production-policy.toml", f"looks-aa-{i}", {"chain": "chained" if i < CHAIN else "last"},
                    _no_effect) for i in range(1, CHAIN + 1)]
    return [*chain, window("seed000-production-policy.toml", "looks-effect", {"chain": "none"}, _effect)]


def _policy_text(log_vkey: str) -> str:
    text = re.sub(r"\[trust\]\n(?:(?!\[).*\n)*", f'[trust]\nlog_vkeys = ["{log_vkey}"]\n\n', POLICY.read_text())
    looks = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in BUDGET.items())
    return re.sub(r"\[looks\][^\n]*\n(?:(?!\[).*\n)*", f"[looks]\n{looks}", text)


def register_budget(world: Any, emit: Callable[[str], None]) -> Path:
    """Write the demo's policy (the example's, this ledger's key pinned, the demo's budget) and register its
    budget before the first look; returns the policy file."""
    from ledger.note import vkey

    from ..promotion import POLICY_EVENT, POLICY_STREAM, read_policy, registration_payload

    out = world.directory / "looks"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "policy.toml"
    path.write_text(_policy_text(vkey(world.book.info.origin, world.root.public_raw)))
    policy = read_policy(path.read_bytes(), str(path))
    assert policy.looks is not None
    stored = world.book.append(POLICY_STREAM, POLICY_EVENT,
                               registration_payload(policy.name, policy.sha256, policy.looks), world.root)
    emit(f"\nstage budget: policy {policy.name} registers alpha {policy.looks.alpha} over at most "
         f"{policy.looks.max_looks} looks ({policy.looks.spending}: {policy.looks.at(1):.2%} a look) at seq "
         f"{stored.seq}, before the first look (`tally promote register --policy {path}`)")
    return path


def _worst_point(result: Mapping[str, Any]) -> float:
    cells = result.get("cells") or {}
    points = [((body.get("metrics") or {}).get("pooled_rate_tps") or {}).get("point") for body in cells.values()]
    return min((p for p in points if isinstance(p, int | float)), default=float("-inf"))


def check_looks(world: Any, policy_file: Path, summary: dict[str, Any], emit: Callable[[str], None]) -> None:
    """The promotion gate on the best no-effect window and on the effect window, the whole ledger presented."""
    from ledger.bundle import export_bundle, verify_bundle
    from ledger.receipt import build_receipt
    from ledger.signing import sign_checkpoint

    from ..events import WINDOW_RECEIPTS, read_payload, receipt_context
    from ..events import payloads as pl
    from ..promotion import ReceiptFiles, check_promotion, read_policy

    book, root = world.book, world.root
    out = world.directory / "looks"
    policy = read_policy(policy_file.read_bytes(), str(policy_file))
    recorded = [(e, read_payload(e, pl.DecisionRecorded)) for e in book.events(types=["decision.recorded"])]
    decisions = {d.window: e for e, d in recorded}
    results_of = {d.window: d.result for _, d in recorded}
    chain = [w for w in decisions if w.startswith("looks-aa-")]
    best = max(chain, key=lambda w: (results_of[w]["decision"] == "WIN", _worst_point(results_of[w])))
    chosen = {"no effect": best, "effect": "looks-effect"}
    signed = sign_checkpoint(book, root)
    bundle = out / "bundle"
    export_bundle(book, bundle, signer=root)
    ledger = verify_bundle(bundle, vkeys=[k.vkey() for k in policy.log_keys])
    emit(f"\nstage promote: the promotion gate, the whole ledger presented ({bundle}: {len(ledger.events)} events)")
    results = []
    for label, window in chosen.items():
        event = decisions[window]
        receipt = build_receipt(book, event.seq, root, WINDOW_RECEIPTS, signed)
        lines, records = receipt_context(book, receipt.event, signed.checkpoint.size)
        files = ReceiptFiles(event.seq, receipt.envelope.dumps(), receipt.proof.text(), receipt.event.line() + "\n",
                             lines.decode(), records.decode())
        target = out / f"receipt-{window}"
        target.mkdir(exist_ok=True)
        for name, text in ((f"{event.seq}.dsse.json", files.envelope), (f"{event.seq}.tlog-proof", files.proof),
                           (f"{event.seq}.event.json", files.event), (f"{event.seq}.context.jsonl", files.context),
                           (f"{event.seq}.context-proofs.jsonl", files.context_proofs)):
            (target / name).write_text(text or "")
        result = check_promotion(files, policy, ledger)
        looks = result.looks or {}
        failing = [c.name for c in result.checks if not c.ok]
        budget = next((c for c in result.checks if c.name == "looks.budget"), None)
        emit(f"  {label}: window {window} (decision {results_of[window]['decision']}, seq {event.seq}): "
             f"{result.verdict}")
        if budget is not None:
            emit(f"    {'ok  ' if budget.ok else 'FAIL'} looks.budget: {budget.detail}")
        emit(f"    failing: {', '.join(failing) or 'none'}  (`tally promote check {target} --policy {policy_file} "
             f"--ledger {bundle}`)")
        results.append({"label": label, "window": window, "seq": event.seq, "verdict": result.verdict,
                        "decision": results_of[window]["decision"], "failing": failing,
                        "looks": looks.get("count"), "index": looks.get("index"), "seqs": looks.get("seqs")})
    summary["promotion"] = results
    no_effect, effect = results
    summary["ok"] = bool(summary["ok"] and no_effect["verdict"] == "NOT_PROMOTABLE"
                         and "looks.budget" in no_effect["failing"] and no_effect["looks"] == CHAIN
                         and effect["verdict"] == "PROMOTABLE" and effect["looks"] == 1)
