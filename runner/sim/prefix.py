"""The simulated engine's prefix cache, as vLLM's automatic prefix caching behaves (pure, no clock).

vLLM keeps the KV cache of full blocks of prompt tokens (16 tokens a block) under a hash
chain: block i's hash covers every token up to the end of block i, and the request's
``cache_salt`` enters the first block's hash, so requests with different salts never share
blocks. A new request reuses the longest chain of its leading blocks already cached; at
least its last prompt token is computed again (the step that emits the first token). One
cache per engine session: a restart starts empty. Bounded: past ``capacity`` blocks the
cache is emptied (a crude eviction; the simulator's windows never come near it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

__all__ = ["BLOCK_TOKENS", "PrefixCache"]

BLOCK_TOKENS = 16


class PrefixCache:
    def __init__(self, capacity: int = 1 << 20) -> None:
        self.capacity = capacity
        self._blocks: set[int] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _chain(salt: str | None, prompt: Sequence[int]) -> list[int]:
        hashes: list[int] = []
        previous = hash(("tally-sim-prefix", salt))
        for end in range(BLOCK_TOKENS, len(prompt) + 1, BLOCK_TOKENS):
            previous = hash((previous, tuple(prompt[end - BLOCK_TOKENS:end])))
            hashes.append(previous)
        return hashes

    def admit(self, salt: str | None, prompt: Sequence[int]) -> int:
        """The prompt tokens this request finds cached (then caches its own full blocks)."""
        chain = self._chain(salt, prompt)
        with self._lock:
            hit = 0
            for block in chain:
                if block not in self._blocks:
                    break
                hit += 1
            if len(self._blocks) + len(chain) > self.capacity:
                self._blocks.clear()
            self._blocks.update(chain)
        return min(hit * BLOCK_TOKENS, max(len(prompt) - 1, 0))
