"""The promotion gate on an exported decision receipt: read its files as hostile input, check them against a policy.

::

    from runner.app import promotion_check

    result, policy = promotion_check(Path("receipt"), Path("policy.toml"))
    result.verdict            # PROMOTABLE or NOT_PROMOTABLE; promotes nothing
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.errors import FormatError

from .files import read_bounded

if TYPE_CHECKING:
    from ..promotion import PromotionPolicy, PromotionResult, ReceiptFiles

__all__ = ["promotion_check", "read_receipt_dir"]

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


def promotion_check(receipt_dir: Path, policy_file: Path, seq: int | None = None
                    ) -> tuple[PromotionResult, PromotionPolicy]:
    """Check the decision receipt in ``receipt_dir`` (``seq``: when it holds several) offline against the
    promotion policy in ``policy_file``: the receipt verified, then every condition of the policy."""
    from ..promotion import MAX_POLICY_BYTES, check_promotion, read_policy

    policy = read_policy(read_bounded(policy_file, "--policy", limit=MAX_POLICY_BYTES), f"policy {policy_file}")
    files = read_receipt_dir(receipt_dir, seq)
    return check_promotion(files, policy), policy
