"""What a simulated answer says beyond its tokens: stop strings, structured output, logprobs (pure).

* *stop strings*: the step that completes a stop string is cut there; the text ends
  before the string (vLLM's default, ``include_stop_str_in_output`` false) and the
  request finishes ``stop``;
* *structured output*: a request carrying a JSON schema (vLLM's ``structured_outputs``
  ``{"json": ...}``, ``guided_json`` before v0.12, ``response_format`` ``json_schema``, or
  llama-cpp-python's ``json_object`` with a ``schema``)
  is answered with an instance of the schema, derived from the prompt's token stream;
* *logprobs*: at T=0 each position's top-2 (the emitted token and the runner-up) with
  their log probabilities, in the completions API's legacy shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .model import Generation, Step, token_text

__all__ = ["completion_logprobs", "cut_at_stop", "schema_instance", "schema_text"]

_MAX_DEPTH = 8


def cut_at_stop(step: Step, stops: Sequence[str], before: str, eos: int) -> tuple[Step, str, bool, int]:
    """The step cut at the first stop string (``before``: the text emitted so far, or its last
    ``max(len(s) for s in stops)`` characters: a stop string wholly in it has ended the text already).

    Returns the (possibly cut) step, its text, whether a stop string ended it, and how many
    of the characters already emitted belong to that stop string (one that began in an
    earlier step: a whole reply drops them). Linear in ``before`` and the step: a caller
    keeps the tail, not the whole text.
    """
    text = before
    longest = max(len(s) for s in stops)
    for j, token in enumerate(step.tokens):
        text += token_text(token, eos)
        window = text[max(0, len(text) - len(token_text(token, eos)) - longest):]
        hits = sorted((window.find(s), i, s) for i, s in enumerate(stops) if s in window)
        if hits:
            at, _, matched = hits[0]
            cut = len(text) - len(window) + at
            # vLLM's stop_reason is the stop string that ended the text
            return (replace(step, tokens=step.tokens[: j + 1], finish_reason="stop", stop_reason=matched),
                    text[len(before):cut] if cut >= len(before) else "", True, max(0, len(before) - cut))
    return step, text[len(before):], False, 0


def schema_instance(schema: Mapping[str, Any], seed: int, depth: int = 0) -> Any:
    """A value valid under ``schema`` (object, array, string, integer, number, boolean, enum)."""
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return schema["enum"][seed % len(schema["enum"])]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[0] if kind else "object"
    if kind == "object" and depth < _MAX_DEPTH:
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        return {name: schema_instance(sub if isinstance(sub, dict) else {}, seed + i, depth + 1)
                for i, (name, sub) in enumerate(props.items())}
    if kind == "array" and depth < _MAX_DEPTH:
        items = schema.get("items")
        low = schema.get("minItems", 1)
        count = low if isinstance(low, int) and 0 <= low <= 8 else 1
        return [schema_instance(items if isinstance(items, dict) else {}, seed + i, depth + 1) for i in range(count)]
    if kind == "integer":
        return seed % 97
    if kind == "number":
        return (seed % 97) / 4
    if kind == "boolean":
        return seed % 2 == 0
    if kind == "null":
        return None
    return token_text(3 + seed % 60, -1).strip() or "value"


def completion_logprobs(generation: Generation, tokens: Sequence[int], eos: int, top: int) -> dict[str, Any]:
    """The completions API's ``logprobs`` object for ``tokens`` (T=0: emitted token first)."""
    texts = [token_text(t, eos) for t in tokens]
    out: dict[str, Any] = {"tokens": texts, "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    offset = 0
    for i, text in enumerate(texts):
        margin = generation.margin(i)
        best = -0.05
        second = best - margin
        runner_up = token_text(generation.runner_up(i), eos)
        if runner_up == text:  # two candidates reading the same cannot share a key
            runner_up = f"{runner_up}_"
        entry = {text: best} if top < 2 else {text: best, runner_up: second}
        out["token_logprobs"].append(best)
        out["top_logprobs"].append(entry)
        out["text_offset"].append(offset)
        offset += len(text)
    return out


def schema_text(schema: Mapping[str, Any], seed: int) -> str:
    return json.dumps(schema_instance(schema, seed))
