"""``tally gate ...`` and ``tally rehearse``: the gates checked before any host contact.

Gates exit 0 PASS, 1 FAIL, 2 bad input (nothing appended), 3 no answer; each appends
``gate.result``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runner.app import (
    check_power_gate,
    record_budget,
    record_power,
    record_qualification,
    record_rng,
    record_standard_spec,
    rehearse_production,
)

from .common import EXIT_FAILED, EXIT_NO_ANSWER, JsonOpt, WindowArg, command, print_json, printable, session

if TYPE_CHECKING:
    from runner.gates import GateRecord


CheckOpt = Annotated[bool, typer.Option(
    "--check", help="Check only: print the result, append nothing (works on a read-only ledger).")]


def _gate_out(window: str, gate: str, verdict: str, summary: str, evidence: dict[str, Any],
              record: GateRecord | None, json_out: bool, details: list[str] | None = None, *,
              checked: bool = False) -> None:
    admitted = None if record is None or record.admitted is None else record.admitted.seq
    if json_out:
        print_json({"window": window, "gate": gate, "verdict": verdict, "summary": summary,
                    "seq": None if record is None else record.event.seq, "admitted_seq": admitted,
                    "evidence": evidence, **({"recorded": False} if checked else {})})
    else:
        print(f"{gate} {summary}")
        for line in details or []:
            print(f"  {line}")
        if record is not None:
            print(f"recorded gate.result at seq {record.event.seq} for window {window}")
        if checked:
            print(f"checked only (--check): nothing recorded for window {window}")
        if admitted is not None:
            print(f"window {window} admitted at seq {admitted} (every required gate PASS)")
    if verdict != "PASS":
        raise typer.Exit(EXIT_FAILED)


def gate_qualification(
    window: WindowArg,
    repo: Annotated[Path, typer.Option(help="The git repository.")],
    qualified_commit: Annotated[str, typer.Option(help="Commit Q the admission qualified.")],
    admission: Annotated[Path, typer.Option(help="Admission receipt JSON (docs/gates.md).")],
    head: Annotated[str | None, typer.Option(help="HEAD to carry to (default: the plan's commit).")] = None,
    file: Annotated[list[str] | None, typer.Option("--file", help="Carried file (repeatable; default: plan).")] = None,
    prefix: Annotated[list[str] | None, typer.Option("--prefix", help="Carried prefix (repeatable).")] = None,
    unit: Annotated[list[str] | None, typer.Option("--unit", help="Carried unit path.py:Qualified.name.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Carry a QUALIFIED admission at Q to HEAD: carried files byte-identical, units AST-identical."""
    out = record_qualification(session, window, repo=repo, qualified_commit=qualified_commit, admission=admission,
                               head=head, files=tuple(file or ()), prefixes=tuple(prefix or ()),
                               units=tuple(unit or ()))
    lines = [f"{'same' if f['identical'] else 'DIFF'} {f['path']} ({f['carried_by']})" for f in out.evidence["files"]]
    lines += [f"{'same' if u['identical'] else 'DIFF'} {u['unit']} (AST)" for u in out.evidence["units"]]
    _gate_out(window, "qualification", out.verdict, out.summary, out.evidence, out.record, json_out, lines)


def gate_rng(
    window: WindowArg,
    receipt: Annotated[Path, typer.Option(help="RNG gate receipt JSON (docs/gates.md).")],
    admission: Annotated[Path, typer.Option(help="Admission receipt JSON with prepared_verifier_sha256.")],
    json_out: JsonOpt = False,
) -> None:
    """PASS RNG receipt at the plan's commit whose kernel sha256 equals the admission's prepared verifier."""
    out = record_rng(session, window, receipt=receipt, admission=admission)
    _gate_out(window, "rng", out.verdict, out.summary, out.evidence, out.record, json_out)


def gate_budget(
    window: WindowArg,
    pair_reserve_s: Annotated[float | None, typer.Option(
        "--pair-reserve-s", help="A measured pair reserve (s): decide on it instead of the dry bound.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The plan's stage estimates against its limits; reports the largest reserve that still fits."""
    out = record_budget(session, window, pair_reserve_s=pair_reserve_s)
    evidence = out.evidence
    lines = [f"{row['label']}: total {row['total']} min, measurement ends {row['measurement_end']} min"
             f"{'' if row['fits'] else ' (does not fit)'}" for row in evidence["rows"]]
    lines += [f"{'ok  ' if c['ok'] else 'FAIL'} {c['detail']}" for c in evidence["checks"]]
    lines += [f"note: {note}" for note in evidence["notes"]]
    _gate_out(window, "budget", out.verdict, out.summary, evidence, out.record, json_out, lines)


def gate_standard_spec(
    window: WindowArg,
    start: Annotated[str, typer.Option(help="The start (e.g. s1, A1).")],
    config: Annotated[str, typer.Option(help="The start's speculative config: JSON or @FILE.")],
    json_out: JsonOpt = False,
) -> None:
    """The start's speculative config is standard verification (and the plan's declared one)."""
    out = record_standard_spec(session, window, start=start, config=config)
    _gate_out(window, "standard_spec", out.verdict, out.summary, out.evidence, out.record, json_out)


def gate_power(
    window: WindowArg,
    pilot: Annotated[Path | None, typer.Option(help="Pilot file (JSON, docs/power.md) instead of the archive; kept as a blob.")] = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """The plan's [power]: P(WIN) at the registered effect >= min_power; FAILs closed on a thin archive.

    With --check the gate is computed and printed but nothing is appended (no gate result to
    supersede later): the same exit code, the JSON with seq null and recorded false.
    """
    if check:
        found = check_power_gate(session, window, pilot=pilot)
        _gate_out(window, "power", found.verdict, found.summary, found.evidence, None, json_out, checked=True)
        return
    out = record_power(session, window, pilot=pilot)
    _gate_out(window, "power", out.verdict, out.summary, out.evidence, out.record, json_out)


def rehearse(
    url: Annotated[str, typer.Option(help="Production serving URL, e.g. http://HEAD_IP:8000.")],
    eos: Annotated[int, typer.Option(help="The model's EOS token id.")],
    out: Annotated[Path, typer.Option(help="Directory for rehearsal.json and responses.jsonl.")],
    window: Annotated[str | None, typer.Option(help="Record the result as this window's rehearsal gate.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name to send (default: the server's).")] = None,
    timeout: Annotated[float, typer.Option(
        help="Seconds per probe, for its whole exchange; after a probe gets no answer in time the rest are not sent.")
    ] = 30.0,
    vllm_checks: Annotated[bool, typer.Option(
        "--vllm-checks/--no-vllm-checks",
        help="The vLLM checks decide: the terminator (allowed_token_ids) and the control (logit_bias refused under "
             "speculative decoding). Off for a server that is not vLLM: they are still sent and recorded.")] = True,
    accept_ignored: Annotated[list[str] | None, typer.Option(
        "--accept-ignored", metavar="FIELD",
        help="A needed field this server may ignore (repeatable; recorded in the evidence). A refusal still fails.")
    ] = None,
    probes_file: Annotated[Path | None, typer.Option(
        "--probes", metavar="PROBES.jsonl",
        help="The admission's own probes, one JSON object a line with its expected outcome (docs/gates.md); "
             "sent after the fixed five, each tiny (<= 8 tokens, priority 10), and each decides.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Rehearse the admission's API probes and the capability probe against production (tiny, no idle wait).

    For every request field a window relies on (seed, ignore_eos, max_tokens, priority, cache_salt,
    allowed_token_ids, stop_token_ids, return_token_ids, stream_options.include_usage, logit_bias) it
    records honoured / ignored / refused; with --window it fails when a field the plan needs is not
    as needed. Credentials in --url are sent as an Authorization header and never recorded.
    """
    run = rehearse_production(session, url, eos, out, window=window, model=model, timeout=timeout,
                              vllm_checks=vllm_checks, accept_ignored=tuple(accept_ignored or ()),
                              probes_file=probes_file)
    result, record = run.result, run.record
    data = result.to_json()
    if json_out:
        print_json(dict(data, out=str(out), seq=None if record is None else record.event.seq,
                        admitted_seq=None if record is None or record.admitted is None else record.admitted.seq))
    else:
        print(printable(f"rehearsal {result.summary}"))
        for probe in data["probes"]:
            label = f"{probe['probe']} (vLLM)" if probe["probe"] in run.vllm_probes else probe["probe"]
            mark = ("ok  " if probe["ok"] else "FAIL") if vllm_checks or probe["probe"] not in run.vllm_probes \
                else ("ok  " if probe["ok"] else "no  ")
            print(f"  {label:<17} {probe['status'] if probe['status'] is not None else '---'}  {mark} "
                  f"{printable(probe['detail'])}")
        for probe in data.get("listed_probes", []):
            print(f"  {probe['probe']:<17} {probe['status'] if probe['status'] is not None else '---'}  "
                  f"{'ok  ' if probe['ok'] else 'FAIL'} {printable(probe['detail'])} (listed)")
        print(f"  fields ({'needs from the plan' if run.planned else 'no --window: no plan needs'}"
              f"{', vLLM checks' if vllm_checks else ', vLLM checks off'}):")
        for field in data["capabilities"]:
            print(f"  {'ok  ' if field['ok'] else 'FAIL'} {field['field']:<29} {field['status']:<9} "
                  f"[{_NEED_LABELS[field['want']] if field['needed'] else 'not needed'}"
                  f"{', ignored and accepted' if field['accepted_ignored'] else ''}] {printable(field['detail'])}")
        print(f"wrote {run.summary_path} and {run.responses_path}")
        if record is not None:
            print(f"recorded gate.result at seq {record.event.seq} for window {window}")
            if record.admitted is not None:
                print(f"window {window} admitted at seq {record.admitted.seq} (every required gate PASS)")
    if result.exit_code:
        raise typer.Exit(EXIT_NO_ANSWER if result.exit_code == EXIT_NO_ANSWER else EXIT_FAILED)


_NEED_LABELS = {"honoured": "needed", "refused": "vLLM check: must be refused", "accepted": "sent: not refused"}



def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    gate = typer.Typer(help="Gates checked before any host contact; each appends gate.result.", no_args_is_help=True)
    command(gate, "qualification")(gate_qualification)
    command(gate, "rng")(gate_rng)
    command(gate, "budget")(gate_budget)
    command(gate, "standard-spec")(gate_standard_spec)
    command(gate, "power")(gate_power)
    app.add_typer(gate, name="gate")
    command(app, "rehearse")(rehearse)
