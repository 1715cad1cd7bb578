"""Stop strings against the emitted text's tail: what the whole text gives, at linear cost."""

from __future__ import annotations

import random

from runner.sim.model import FIRST_ORDINARY_TOKEN, Step, token_text
from runner.sim.semantics import cut_at_stop

EOS = 2


def _steps(rng: random.Random, n: int) -> list[Step]:
    return [Step(i, tuple(rng.randrange(FIRST_ORDINARY_TOKEN - 3, FIRST_ORDINARY_TOKEN + 40)
                          for _ in range(rng.randint(1, 5))), 4, 3, 1.0) for i in range(n)]


def _run(steps: list[Step], stops: tuple[str, ...], tail_only: bool) -> list[tuple[Step, str, bool]]:
    emitted, out = "", []
    longest = max(len(s) for s in stops)
    for step in steps:
        cut = cut_at_stop(step, stops, emitted[-longest:] if tail_only else emitted, EOS)
        out.append(cut)
        emitted += cut[1]
        if cut[2]:
            break
    return out


def test_a_stop_string_is_found_from_the_tail_exactly_where_the_whole_text_finds_it() -> None:
    rng = random.Random(7)
    words = [token_text(t, EOS) for t in range(FIRST_ORDINARY_TOKEN, FIRST_ORDINARY_TOKEN + 40)]
    stopped = 0
    for _ in range(400):
        steps = _steps(rng, 60)
        text = "".join(token_text(t, EOS) for s in steps for t in s.tokens)
        # stop strings that span word and step boundaries, and some that never occur
        start = rng.randrange(0, max(1, len(text) - 12))
        stops = (text[start:start + rng.randint(1, 12)] or "x", rng.choice(words).strip()[:3] + "#",
                 "".join(rng.sample(words, 2)))
        whole, tail = _run(steps, stops, False), _run(steps, stops, True)
        assert whole == tail
        stopped += whole[-1][2]
    assert stopped > 300  # most cases did stop, at the place the whole text says


def test_a_streamed_reply_ends_before_its_stop_string_as_the_whole_reply_does() -> None:
    import json

    import httpx

    import runner.sim as sim
    from tests.simhelpers import fast_config

    with sim.start(fast_config(), seed=3) as server, httpx.Client(timeout=30) as http:
        body = {"prompt": "one two three four", "temperature": 0, "max_tokens": 200, "ignore_eos": True}
        full = http.post(f"{server.url}/v1/completions", json=body).json()["choices"][0]["text"]
        words = full.split()
        stop = f"{words[150]} {words[151]}"  # spans two tokens, late in the text
        whole = http.post(f"{server.url}/v1/completions", json={**body, "stop": [stop]}).json()["choices"][0]
        streamed = ""
        with http.stream("POST", f"{server.url}/v1/completions", json={**body, "stop": [stop], "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    streamed += "".join(c.get("text", "") for c in json.loads(line[6:])["choices"])
    # the whole reply ends where the stop string begins; a streamed one may have sent the part of a
    # stop string spanning two engine steps that came with the first (the simulator holds nothing back)
    end = full.find(stop)
    assert whole["finish_reason"] == "stop"
    assert whole["text"] == full[:end]
    assert full.startswith(streamed) and end <= len(streamed) < end + len(stop)
