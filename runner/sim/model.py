"""The simulated model: a toy tokenizer and a speculative-decoding generation (pure).

Nothing here reads a clock or does I/O: a :class:`Generation` hands out engine steps
(tokens, drafts, accepted drafts, model milliseconds) from a seeded RNG, and the
server decides when to send them. The same seed key gives the same steps.

Counting follows vLLM's scheduler (``reference/vllm.md`` 1.1): the prefill step emits
the first token and schedules no drafts; every later step schedules
``min(k, remaining - 1)`` draft tokens (one *draft*, counted only when that is > 0),
accepts a prefix of them, and emits ``1 + accepted`` tokens. Accepted counts are
taken before a stop truncates the step, as vLLM's spec-decode stats are.
"""

from __future__ import annotations

import array
import hashlib
import math
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import ArmConfig

__all__ = [
    "Generation",
    "SamplingParams",
    "Step",
    "chat_prompt_tokens",
    "prompt_token_ids",
    "token_text",
]

_WORDS = (
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
    "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will",
    "would", "who", "so", "no", "court", "filing", "opinion", "held", "section", "report", "quarter", "revenue",
    "net", "plaintiff", "appeal", "statute", "income", "risk", "market",
)
FIRST_ORDINARY_TOKEN = 3  # ids 0..2 are special (unk, eos by default, bos)


def prompt_token_ids(text: str, vocab_size: int) -> list[int]:
    """The toy tokenizer: one token per whitespace-separated word (at least one token)."""
    span = vocab_size - FIRST_ORDINARY_TOKEN
    ids = [FIRST_ORDINARY_TOKEN + zlib.crc32(word.encode("utf-8")) % span for word in text.split()]
    return ids or [FIRST_ORDINARY_TOKEN]


def chat_prompt_tokens(messages: Sequence[tuple[str, str]], vocab_size: int) -> list[int]:
    """Prompt ids of a chat: each message's words plus a 4-token header, plus the assistant header."""
    ids: list[int] = []
    for role, content in messages:
        ids.extend(prompt_token_ids(f"<|{role}|> : : :", vocab_size))
        ids.extend(prompt_token_ids(content, vocab_size) if content.split() else [])
    ids.extend(prompt_token_ids("<|assistant|> : :", vocab_size))
    return ids


def token_text(token: int, eos_token_id: int) -> str:
    """How a token reads in the output (special tokens are skipped, as by default in vLLM)."""
    if token < FIRST_ORDINARY_TOKEN or token == eos_token_id:
        return ""
    return " " + _WORDS[token % len(_WORDS)]


def _weight(bias: float) -> float:
    """e^bias, the bias clamped to [-100, 100] as vLLM clamps it."""
    return math.exp(min(max(bias, -100.0), 100.0))


class Draws:
    """Uniform draws from a key (SHA-256 of the key and a counter): cheap to begin, one per context."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._n = 0

    def random(self) -> float:
        self._n += 1
        return int.from_bytes(hashlib.sha256(b"%s|%d" % (self._key, self._n)).digest()[:7]) / float(1 << 56)

    def randrange(self, start: int, stop: int | None = None) -> int:
        low, high = (0, start) if stop is None else (start, stop)
        return low + min(high - low - 1, int(self.random() * (high - low)))


@dataclass(frozen=True)
class SamplingParams:
    """The request fields that change what is generated."""

    max_tokens: int
    greedy: bool = False             # temperature 0: tokens depend on the prompt alone, never on the arm
    min_tokens: int = 0
    ignore_eos: bool = False
    allowed_token_ids: tuple[int, ...] | None = None
    stop_token_ids: tuple[int, ...] = ()
    logit_bias: tuple[tuple[int, float], ...] = ()   # (token, bias): the token's weight times e^bias
    penalties: tuple[float, float, float] = (1.0, 0.0, 0.0)  # (repetition, presence, frequency): neutral

    @property
    def penalized(self) -> str:
        """T=0: what a non-neutral penalty makes of the token stream ("" when every penalty is neutral)."""
        return "" if self.penalties == (1.0, 0.0, 0.0) else "|penalties={!r},{!r},{!r}".format(*self.penalties)


@dataclass(frozen=True)
class Step:
    """One engine step of one request: what it emits and what it cost (model ms)."""

    index: int                      # 0 = prefill (the first token)
    tokens: tuple[int, ...]         # emitted token ids (1 + accepted, truncated at a stop or max_tokens)
    drafts: int                     # draft tokens scheduled in this step (0 = no draft counted)
    accepted: int                   # accepted draft tokens (before stop truncation)
    duration_ms: float              # model ms from the previous step's output to this one's
    finish_reason: str | None = None
    stop_reason: int | str | None = None   # a stop token id, or the stop string that ended the text


@dataclass
class Generation:
    """The steps of one request under ``arm``; ``next_step`` until it returns ``None``."""

    arm: ArmConfig
    params: SamplingParams
    prompt_tokens: int
    seed_key: str
    eos_token_id: int = 1
    vocab_size: int = 32000
    eos_probability: float = 0.0
    start_factor: float = 1.0       # per-start timing multiplier (engine session jitter)
    step_jitter: float = 0.0        # relative sd of each step's time
    ttft_extra_ms: float = 0.0      # cold start etc. (model ms, added to the first step)
    cached_tokens: int = 0          # prompt tokens found in the prefix cache: their prefill is skipped
    greedy_key: str = ""            # T=0: the key of the token stream, the same on every arm
    context: tuple[int, ...] = ()   # T=0: the prompt's token ids; each token depends on the context before it
    diverge: tuple[int, bool] | None = None  # T=0 fault: (position, near tie) where this arm takes the runner-up
    draft_past_end: bool = True     # vLLM drafts full depth to the end; llama.cpp's server stops at max_tokens
    generated: int = 0
    finish_reason: str | None = None
    steps: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _tokens: random.Random | Draws = field(init=False, repr=False)
    _context: Any = field(init=False, repr=False)
    _keys: list[bytes] = field(init=False, repr=False, default_factory=list)
    rate: float | None = field(init=False, default=None)   # this request's acceptance rate (acceptance_rate arms)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed_key)
        if self.arm.acceptance_rate is not None:   # drawn per request (docs/sim.md "The batch step model")
            mean, conc = self.arm.acceptance_rate, self.arm.acceptance_concentration
            spread = conc > 0 and 0 < mean < 1
            self.rate = self._rng.betavariate(mean * conc, (1 - mean) * conc) if spread else mean
        # At T=0 the tokens come from their own stream, so that drafts and acceptance (which
        # differ by arm) never change what is emitted: every arm emits the same tokens. That
        # stream is keyed by the context (the prompt's ids and the tokens emitted so far), as a
        # model's next token is: a prompt that ends with part of a T=0 continuation continues it
        # (teacher forcing), and a token taken otherwise changes what follows.
        self._context = hashlib.sha256(f"{self.greedy_key}|".encode())
        if self.params.greedy and self.context:  # the same bytes as one update per token
            self._context.update(array.array("q", self.context).tobytes())
        self._tokens = random.Random(self.greedy_key) if self.params.greedy else self._rng

    def _key(self, position: int) -> bytes:
        """T=0: the key of the context before ``position`` (a position not reached: its index)."""
        return self._keys[position] if position < len(self._keys) else f"{self.greedy_key}|{position}".encode()

    def runner_up(self, position: int) -> int:
        """T=0: the second most likely token at ``position`` (an ordinary token, never the emitted one)."""
        token = Draws(self._key(position) + b"|runner-up").randrange(FIRST_ORDINARY_TOKEN, self.vocab_size)
        if token == Draws(self._key(position)).randrange(FIRST_ORDINARY_TOKEN, self.vocab_size):
            token = FIRST_ORDINARY_TOKEN + (token + 1 - FIRST_ORDINARY_TOKEN) % (self.vocab_size - FIRST_ORDINARY_TOKEN)
        return token

    def margin(self, position: int) -> float:
        """T=0: the top-2 logprob margin (nats) at ``position``; a near-tie fault makes it tiny there."""
        if self.diverge is not None and self.diverge[0] == position and self.diverge[1]:
            return 0.01
        return 0.5 + 3.0 * Draws(self._key(position) + b"|margin").random()

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def next_step(self, clock_factor: float = 1.0) -> Step | None:
        """The next engine step; ``clock_factor`` > 1 slows it (a lowered clock cap)."""
        if self.done:
            return None
        index = self.steps
        self.steps += 1
        jitter = 1.0
        if self.step_jitter > 0:
            jitter = max(0.2, 1.0 + self._rng.gauss(0.0, self.step_jitter))
        if index == 0:
            computed = self.prompt_tokens - self.cached_tokens
            base = self.arm.ttft_base_ms + self.arm.ttft_per_1k_tokens_ms * computed / 1000.0
            duration = base * clock_factor * self.start_factor * jitter + self.ttft_extra_ms
            drafts, accepted = 0, 0
        else:
            # Full-depth drafts to the end, as vLLM schedules them (never a partial draft): the
            # step's accepted count includes drafts past max_tokens (or past EOS or a stop
            # token) that the emission below then discards, as vLLM's counters do.
            # (llama.cpp's server caps a draft at the tokens left: no accepted token is ever discarded there)
            remaining = self.params.max_tokens - self.generated
            depth = self.arm.k if self.draft_past_end else min(self.arm.k, remaining - 1)
            drafts = depth if self.arm.speculative else 0
            if drafts and self.arm.draft_rate < 1.0 and self._rng.random() >= self.arm.draft_rate:
                drafts = 0   # a step that finds nothing to draft (prompt lookup without a match)
            accepted = 0
            for position in range(drafts):
                chance = self.arm.acceptance[position] if self.rate is None else self.rate
                if self._rng.random() < chance:
                    accepted += 1
                else:
                    break
            ms = self.arm.step_base_ms + self.arm.step_per_token_ms * (drafts + 1)
            duration = ms * clock_factor * self.start_factor * jitter
        tokens: list[int] = []
        stop_reason: int | None = None
        for _ in range(1 + accepted):
            token = self._sample()
            tokens.append(token)
            self.generated += 1
            if token in self.params.stop_token_ids and self.generated > self.params.min_tokens:
                self.finish_reason, stop_reason = "stop", token
                break
            if token == self.eos_token_id and not self.params.ignore_eos:
                self.finish_reason = "stop"
                break
            if self.generated >= self.params.max_tokens:
                self.finish_reason = "length"
                break
        return Step(index, tuple(tokens), drafts, accepted, duration, self.finish_reason, stop_reason)

    def _sample(self) -> int:
        token = self._draw()
        if self.params.greedy:
            self._context.update(array.array("q", (token,)).tobytes())
        return token

    def _draw(self) -> int:
        if self.params.greedy:
            key = self._context.digest()
            self._keys.append(key)
            self._tokens = Draws(key)
            if self.diverge is not None and self.generated == self.diverge[0]:
                # this arm takes the runner-up here, and goes its own way from then on (its context differs)
                return self.runner_up(self.generated)
        eos = self.eos_token_id
        eos_masked = self.generated < self.params.min_tokens
        allowed = self.params.allowed_token_ids
        bias = {t: b for t, b in self.params.logit_bias if not (eos_masked and t == eos)}
        if allowed:
            # every allowed token masked (EOS held back by min_tokens): the argmax of all -inf, id 0
            pool = [t for t in allowed if not (eos_masked and t == eos)] or [0]
            if bias:
                return self._weighted(pool, [_weight(bias.get(t, 0.0)) for t in pool])
            return pool[self._tokens.randrange(len(pool))]
        if bias:
            return self._biased(bias)
        return self._free()

    def _weighted(self, tokens: Sequence[int], weights: Sequence[float]) -> int:
        point = self._tokens.random() * sum(weights)
        for token, weight in zip(tokens, weights, strict=True):
            point -= weight
            if point < 0:
                return token
        return tokens[-1]

    def _biased(self, bias: dict[int, float]) -> int:
        """A draw with ``logit_bias``: each biased token weighs e^bias against the rest of the vocabulary.

        Every other token keeps weight 1 (the free draw, redrawn when it lands on a biased
        token), so a bias of +100 forces its token and -100 bans it, as in vLLM.
        """
        tokens = sorted(bias)
        weights = [_weight(bias[t]) for t in tokens]
        rest = float(self.vocab_size - len(tokens))
        if self._tokens.random() * (sum(weights) + rest) < sum(weights):
            return self._weighted(tokens, weights)
        while True:
            token = self._free()
            if token not in bias:
                return token

    def _free(self) -> int:
        eos = self.eos_token_id
        eos_masked = self.generated < self.params.min_tokens
        free_eos = not self.params.ignore_eos and not eos_masked
        if free_eos and self.eos_probability > 0 and self._tokens.random() < self.eos_probability:
            return eos
        while True:
            token = self._tokens.randrange(FIRST_ORDINARY_TOKEN, self.vocab_size)
            if token != eos:
                return token
