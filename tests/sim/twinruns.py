"""Measured runs written from the step model, in `tally measure --out`'s format (summary.json, requests.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from runner.sim.batch import Acceptance, Budgets, Job, SimResult, StepCosts, simulate


def write_run(directory: Path, result: SimResult, *, concurrency: int, max_tokens: int, family: str,
              speculative: bool, usage: bool = True) -> Path:
    """The run's two files, as the measurement client writes them (times in seconds, offsets from send);
    ``usage`` false: as from a server that reports no usage (llama-cpp-python's, streaming)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for o in result.outcomes:
        send = o.arrival_ms / 1000.0
        chunks = [(t - o.arrival_ms) / 1000.0 for t in o.chunk_ms]
        tokens = o.generated
        tpot = (chunks[-1] - chunks[0]) * 1000.0 / (tokens - 1) if tokens > 1 else None
        lines.append(json.dumps({"index": o.index, "prompt_id": f"p{o.index}", "status": "ok", "send_t": send,
                                 "chunk_t": chunks, "chunk_token_counts": o.chunk_tokens, "delivered_tokens": tokens,
                                 "usage": {"prompt_tokens": o.job.prompt_tokens, "completion_tokens": tokens}
                                 if usage else None,
                                 "tpot_ms": tpot}))
    (directory / "requests.jsonl").write_text("\n".join(lines) + "\n")
    drafts = sum(1 for o in result.outcomes for d in o.drafts if d) if speculative else None
    rounds = sum(len(o.chunk_ms) - 1 for o in result.outcomes)   # decode steps, as vLLM's ITL count gives
    counters = {"rounds": rounds, "drafts": drafts,
                "draft_tokens": sum(sum(o.drafts) for o in result.outcomes) if speculative else None,
                "accepted": sum(a for o in result.outcomes for a, d in zip(o.accepted, o.drafts, strict=True) if d)
                if speculative else None}
    summary = {"measure": {"family": family}, "wave": {
        "family": family, "concurrency": concurrency, "max_tokens": max_tokens, "counters": counters,
        "counter_source": {"name": "vllm", "chunks_are_steps": True}}}
    (directory / "summary.json").write_text(json.dumps(summary))
    return directory


def measured(directory: Path, *, k: int, costs: StepCosts, acceptance: Acceptance, concurrency: int,
             prompts: list[int], max_tokens: int, family: str = "chat", seed: int = 0,
             jitter: float = 0.0, budgets: Budgets = Budgets(), usage: bool = True,
             draft_rate: float = 1.0) -> Path:
    jobs = [Job(p, max_tokens, family=family) for p in prompts]
    result = simulate(jobs, k=k, costs=costs, budgets=budgets, acceptance=acceptance, concurrency=concurrency,
                      seed=seed, jitter=jitter, draft_rate=draft_rate)
    return write_run(directory, result, concurrency=concurrency, max_tokens=max_tokens, family=family,
                     speculative=k > 0, usage=usage)
