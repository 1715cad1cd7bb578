"""The API rehearsal and the capability probe: tiny requests to production before a window (``docs/gates.md``).

::

    from runner.rehearsal import plan_needs, rehearse, write_rehearsal

    result = rehearse("http://head:8000", eos=2, needs=plan_needs(plan))   # the five probes, then the fields
    result.verdict, result.summary, result.fields
    write_rehearsal(result, Path("out"))      # rehearsal.json and responses.jsonl

- ``probe``: one probe, its bounded exchange and the reply parts that decide (read with
  ``runner.measure.read_frame``);
- ``probe_list``: an admission's own probes with their expected outcomes;
- ``capability``: every request field a window relies on, honoured, ignored or refused;
- ``rehearsal``: the whole rehearsal and its files. Recording it is the rehearsal gate
  (``runner.gates.RehearsalGate``).
"""

from __future__ import annotations

from .capability import FIELDS, GREEDY_NEUTRAL, Need, engine_refusals, plan_needs, smoke_refusals
from .probe import Probe, ProbeResult, not_sent, send, token_count
from .probe_list import MAX_FILE_BYTES as MAX_PROBE_LIST_BYTES
from .probe_list import ProbeList, read_probe_list
from .rehearsal import RESERVED_NAMES, VLLM_PROBES, Rehearsal, rehearse, write_rehearsal

__all__ = [
    "FIELDS",
    "GREEDY_NEUTRAL",
    "MAX_PROBE_LIST_BYTES",
    "RESERVED_NAMES",
    "VLLM_PROBES",
    "Need",
    "Probe",
    "ProbeList",
    "ProbeResult",
    "Rehearsal",
    "engine_refusals",
    "not_sent",
    "plan_needs",
    "read_probe_list",
    "rehearse",
    "send",
    "smoke_refusals",
    "token_count",
    "write_rehearsal",
]
