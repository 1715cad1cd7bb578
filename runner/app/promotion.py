"""The promotion gate on an exported decision receipt: read its files as hostile input, check them against a policy.

::

    from runner.app import promotion_check

    promotion_register(session, Path("policy.toml"))     # the budget over looks, before the first look
    result, policy = promotion_check(Path("receipt"), Path("policy.toml"), ledger=Path("bundle"))
    result.verdict            # PROMOTABLE or NOT_PROMOTABLE; promotes nothing
    result.looks["count"]     # the candidate's looks in the presented ledger (a full `tally export`)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError, PolicyError, VerificationError

from .files import read_bounded

if TYPE_CHECKING:
    from ..promotion import PromotionPolicy, PromotionResult, ReceiptFiles
    from .session import Session

__all__ = ["promotion_check", "promotion_register", "read_receipt_dir"]

_RECEIPT = re.compile(r"([1-9][0-9]{0,18})\.dsse\.json")
MAX_ENTRIES = 10_000      # entries of RECEIPT_DIR looked at
MAX_FILE_BYTES = 64 << 20  # any one receipt file (a window's context is the largest)


def _text(path: Path, what: str) -> str | None:
    """A receipt file's text (a regular file, bounded, UTF-8); ``None`` when it is absent."""
    from ledger.strictfile import read_optional

    data = read_optional(path, what, MAX_FILE_BYTES)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{what} {path} is not UTF-8") from None


def _decision_seqs(directory: Path) -> list[int]:
    """The seqs of the decision receipts in ``directory`` (by their event files' type)."""
    from ledger.strictjson import read_json

    seqs = []
    try:
        with os.scandir(directory) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    raise FormatError(f"RECEIPT_DIR {directory} has more than {MAX_ENTRIES} entries: "
                                      "name one with --seq")
                match = _RECEIPT.fullmatch(entry.name)
                if match is None:
                    continue
                event = directory / f"{match.group(1)}.event.json"
                text = _text(event, "event file")
                if text is not None:
                    obj = read_json(text, f"event file {event}")
                    if isinstance(obj, dict) and obj.get("type") == "decision.recorded":
                        seqs.append(int(match.group(1)))
    except OSError as exc:
        raise FormatError(f"cannot read RECEIPT_DIR {directory}: {exc.strerror or exc}") from None
    return sorted(seqs)


def read_receipt_dir(directory: Path, seq: int | None) -> ReceiptFiles:
    """The files of one exported receipt, read as hostile input (regular files, bounded, UTF-8)."""
    from ..promotion import ReceiptFiles

    if not directory.is_dir() or directory.is_symlink():
        raise FormatError(f"RECEIPT_DIR {directory} is not a directory")
    if seq is None:
        seqs = _decision_seqs(directory)
        if not seqs:
            raise FormatError(f"RECEIPT_DIR {directory} holds no decision receipt (<seq>.dsse.json with its "
                              "<seq>.event.json: `tally receipt export SEQ --window-context`)")
        if len(seqs) > 1:
            raise FormatError(f"RECEIPT_DIR {directory} holds decision receipts {', '.join(map(str, seqs))}: "
                              "name one with --seq")
        seq = seqs[0]
    names = {"envelope": f"{seq}.dsse.json", "proof": f"{seq}.tlog-proof", "event": f"{seq}.event.json",
             "context": f"{seq}.context.jsonl", "context_proofs": f"{seq}.context-proofs.jsonl"}
    texts: dict[str, str | None] = {}
    for key, name in names.items():
        path = directory / name
        what = key.replace("_", " ") + " file"
        texts[key] = _text(path, what)
        if texts[key] is None and key in ("envelope", "proof", "event"):
            raise FormatError(f"RECEIPT_DIR {directory} has no {name}")
    envelope, proof, event = texts["envelope"], texts["proof"], texts["event"]
    assert envelope is not None and proof is not None and event is not None
    return ReceiptFiles(seq, envelope, proof, event, texts["context"], texts["context_proofs"])


def _policy(policy_file: Path) -> PromotionPolicy:
    from ..promotion import MAX_POLICY_BYTES, read_policy

    return read_policy(read_bounded(policy_file, "--policy", limit=MAX_POLICY_BYTES), f"policy {policy_file}")


def promotion_check(receipt_dir: Path, policy_file: Path, seq: int | None = None, *, ledger: Path | None = None
                    ) -> tuple[PromotionResult, PromotionPolicy]:
    """Check the decision receipt in ``receipt_dir`` (``seq``: when it holds several) offline against the
    promotion policy in ``policy_file``: the receipt verified, then every condition of the policy; the
    candidate's looks counted in ``ledger`` (a full export bundle, verified under the policy's log keys)."""
    from ledger.bundle import verify_bundle

    from ..promotion import check_promotion

    policy = _policy(policy_file)
    files = read_receipt_dir(receipt_dir, seq)
    verified: Any = None
    error = None
    if ledger is not None:
        if not ledger.is_dir() or ledger.is_symlink():
            raise FormatError(f"--ledger {ledger} is not a bundle directory (`tally export DIR`)")
        try:
            verified = verify_bundle(ledger, vkeys=[k.vkey() for k in policy.log_keys])
        except VerificationError as exc:
            error = f"the ledger presented does not verify under the policy's log key: {exc.args[0]}"
    return check_promotion(files, policy, verified, error), policy


def promotion_register(session: Session, policy_file: Path) -> dict[str, Any]:
    """Register the policy's error budget over looks: one ``promotion.registered`` event (stream ``promotion``).

    Register it before the first look of any candidate it will judge (``tally promote check`` refuses a look
    before it). A policy without ``[looks]`` has nothing to register; a name registered already is refused
    (naming its seq), whatever its budget: a budget is registered once."""
    from ..promotion import POLICY_EVENT, POLICY_STREAM, registration_payload

    policy = _policy(policy_file)
    if policy.looks is None:
        raise FormatError(f"policy {policy.name} has no [looks] table: no error budget to register")
    book, signer = session.ledger_and_signer()
    for event in book.events(stream=POLICY_STREAM, types=[POLICY_EVENT]):
        if event.payload.get("policy") == policy.name:
            raise PolicyError(f"policy {policy.name} was registered already at seq {event.seq} "
                              f"(budget {event.payload.get('looks')})")
    stored = book.append(POLICY_STREAM, POLICY_EVENT, registration_payload(policy.name, policy.sha256, policy.looks),
                         signer)
    return {"seq": stored.seq, "policy": policy.name, "policy_sha256": policy.sha256, "looks": policy.looks.to_json()}
