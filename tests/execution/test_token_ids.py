"""A plan may keep each wave request's emitted token ids in the wave's records blob."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.rehearsal.capability import plan_needs

from ..runner.script import SIMPLE_PP3
from .test_start_config import spec_off_control
from .worlds import close, gate_all, run, window, world


def _records(w: Any, window_id: str) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for event in w.book.events(stream=f"window/{window_id}", types=["wave.measured"]):
        blob = w.book.blob(event.payload["records"]["blob"].removeprefix("sha256:"))
        lines += [json.loads(line) for line in blob.data.splitlines()]
    return lines


def _keep(text: str) -> str:
    return spec_off_control(text).replace("wave_deadline_s = 60.0", "wave_deadline_s = 60.0\nkeep_token_ids = true")


def test_kept_token_ids_are_every_emitted_token_and_only_when_asked(tmp_path: Path) -> None:
    w = world(tmp_path, [window(str(SIMPLE_PP3), "ids", edit=_keep),
                         window(str(SIMPLE_PP3), "noids", edit=spec_off_control)])
    try:
        needs = [{n.field: n.want for n in plan_needs(item.plan)} for item in w.plans]
        assert [n["return_token_ids"] for n in needs] == ["honoured", "accepted"]  # the rehearsal must confirm ids
        gate_all(w)
        assert run(w, "ids").ending == "restored" and run(w, "noids").ending == "restored"
        kept = _records(w, "ids")
        assert kept and all(r["status"] == "ok" for r in kept)
        for r in kept:  # one id per emitted token, as many as the stream's usage counted
            assert len(r["token_ids"]) == r["delivered_tokens"] == sum(r["chunk_token_counts"]) > 0
            assert all(isinstance(i, int) for i in r["token_ids"])
        plain = _records(w, "noids")
        assert plain and not any("token_ids" in r for r in plain)
    finally:
        close(w)
