"""A host action's outcome as the ledger can hold it: bounded output, recordable facts, or why not.

Whatever a site prints is hostile input. The ``finished`` record of a host action keeps the
action's stdout and stderr as a blob of at most ``MAX_OUTPUT_BYTES`` per stream (the middle
cut out, the count of bytes cut in ``detail.output_cut``), and its facts only if an event
can carry them (the payload rules: integers within +/-(2^53-1), valid Unicode, nesting,
and at most ``MAX_DETAIL_BYTES`` of them). Facts that cannot be carried are replaced by an
``error`` naming why (and ``unrecordable``): the action then counts as failed, and the
runner acts as if it may have happened (a drain that printed an unrecordable fact line
is restored from). The same holds for a driver that raised, or a record the runner could
not build: :func:`failed_result` is the outcome it records instead.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ledger.canonical import check_payload
from ledger.errors import FormatError
from ledger.store import Blob

if TYPE_CHECKING:
    from ..drivers.base import ActionResult

__all__ = ["MAX_DETAIL_BYTES", "MAX_OUTPUT_BYTES", "failed_result", "output_blob", "recordable", "unrecordable"]

MAX_OUTPUT_BYTES = 1 << 20     # of stdout, and of stderr, kept in an action's output blob
MAX_DETAIL_BYTES = 256 << 10   # of facts in a finished record (an event body is at most 1 MiB)
MAX_REASON = 500               # characters of an error quoted in a fact


def _kept(data: bytes) -> tuple[bytes, int]:
    """``data`` with its middle cut out past ``MAX_OUTPUT_BYTES``, and how many bytes were cut."""
    if len(data) <= MAX_OUTPUT_BYTES:
        return data, 0
    half = MAX_OUTPUT_BYTES // 2
    cut = len(data) - 2 * half
    return data[:half] + f"\n[... {cut} bytes cut ...]\n".encode() + data[-half:], cut


def output_blob(result: ActionResult) -> tuple[Blob, dict[str, int]]:
    """The action's output blob (``{"stdout", "stderr"}`` as JSON), and what was cut from each stream."""
    stdout, out_cut = _kept(result.stdout)
    stderr, err_cut = _kept(result.stderr)
    blob = Blob(json.dumps({"stdout": stdout.decode("utf-8", "replace"), "stderr": stderr.decode("utf-8", "replace")},
                           sort_keys=True).encode(), "application/json")
    cut = {name: n for name, n in (("stdout", out_cut), ("stderr", err_cut)) if n}
    return blob, cut


def recordable(detail: dict[str, Any]) -> str | None:
    """Why ``detail`` cannot go into an event payload (``None``: it can)."""
    try:
        size = len(check_payload(detail))
    except FormatError as exc:
        return str(exc)[:MAX_REASON]
    if size > MAX_DETAIL_BYTES:
        return f"the facts are {size} bytes, over the {MAX_DETAIL_BYTES}-byte limit"
    return None


def unrecordable(result: ActionResult, why: str) -> ActionResult:
    """``result`` as a failure whose facts are only why the site's output could not be recorded."""
    error = f"the site's output for {result.action} could not be recorded: {why}"[:MAX_REASON * 2]
    return replace(result, ok=False, facts={"error": error, "unrecordable": True})


def failed_result(action: str, host: str | None, error: str, *, may_have_run: bool = True,
                  unreachable: bool = False) -> ActionResult:
    """An outcome the runner records when it has no usable one (the driver raised, the record failed).

    ``unreachable``: the site could not reach anything (the driver raised ``ExternalError``)."""
    from ..drivers.base import ActionResult

    facts: dict[str, Any] = {"error": error[:MAX_REASON * 2]}
    if not may_have_run:
        facts["not_run"] = True
    return ActionResult(action=action, host=host, ok=False, exit_code=None, duration_s=0.0, timed_out=False,
                        stdout=b"", stderr=error.encode("utf-8", "replace")[:MAX_OUTPUT_BYTES], facts=facts,
                        unreachable=unreachable)
