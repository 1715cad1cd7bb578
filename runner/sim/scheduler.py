"""The engine's waiting queue: which request's prefill starts next, under vLLM's two scheduling policies.

vLLM V1 schedules a step's token budget (``max_num_batched_tokens``) over the running
requests first, then over the waiting ones in queue order: arrival order under the
default ``fcfs`` policy, ``(priority, arrival)`` under ``--scheduling-policy priority``
(a lower value is served earlier). The simulator keeps the part a client can see: a
request's prefill starts when it reaches the head of the queue and its prompt tokens fit
in the budget beside the prefills already under way (a request alone always fits, as
chunked prefill would take it over several steps); the first token comes its model
prefill time later, and the tokens return to the budget then. Outputs of one engine step
reach the clients together, so a prefill never ends before one that started earlier and
is still under way (a short request taken beside long prompts gets its first token with
theirs, as in a step that schedules them all). With a budget of 0 every prefill starts
at once (nothing ever waits). Decode steps do not take budget here: on a real engine
they take one token (1 + k under speculation) each.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["POLICIES", "PrefillQueue", "Ticket"]

POLICIES = ("fcfs", "priority")
_WAIT_SLICE_S = 0.05


@dataclass(order=True)
class Ticket:
    key: tuple[int, int]
    tokens: int = field(compare=False)
    admitted: bool = field(default=False, compare=False)
    end: float = field(default=0.0, compare=False)   # when its prefill ends (perf_counter seconds)
    waited: bool = field(default=False, compare=False)   # it was not admitted on arrival


class PrefillQueue:
    """One engine's waiting queue and prefill budget; thread-safe."""

    def __init__(self, policy: str, budget: int) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {policy!r}")
        self.policy, self.budget = policy, budget
        self._cond = threading.Condition()
        self._waiting: list[Ticket] = []
        self._in_flight = 0
        self._prefilling: list[Ticket] = []   # admitted, in admission order
        self._arrivals = itertools.count()

    def admit(self, tokens: int, priority: int, stopped: Callable[[], bool]) -> Ticket | None:
        """Enter the queue and wait until this request's prefill may start (:meth:`enqueue`, :meth:`wait`)."""
        return self.wait(self.enqueue(tokens, priority), stopped)

    def enqueue(self, tokens: int, priority: int) -> Ticket:
        """Enter the queue (its place in arrival order is taken now)."""
        with self._cond:
            ticket = Ticket((priority if self.policy == "priority" else 0, next(self._arrivals)), max(0, tokens))
            heapq.heappush(self._waiting, ticket)
        return ticket

    def wait(self, ticket: Ticket, stopped: Callable[[], bool]) -> Ticket | None:
        """Wait until the prefill of ``ticket`` may start; ``None`` when ``stopped()`` turned true first."""
        with self._cond:
            while not self._fits(ticket):
                ticket.waited = True
                if stopped():
                    self._waiting.remove(ticket)
                    heapq.heapify(self._waiting)
                    self._cond.notify_all()
                    return None
                self._cond.wait(_WAIT_SLICE_S)
            heapq.heappop(self._waiting)
            ticket.admitted = True
            ticket.end = float("inf")   # not known until prefill_end
            self._in_flight += ticket.tokens
            self._prefilling.append(ticket)
            self._cond.notify_all()   # the next in line may fit beside it
        return ticket

    def prefill_end(self, ticket: Ticket, end: float, stopped: Callable[[], bool] = lambda: False) -> float:
        """When the prefill of ``ticket`` (its model time ending at ``end``) ends: not before the prefills
        admitted before it that are still under way.

        An earlier prefill whose end is not known yet (its thread has not reached this call) is waited
        for, until it reports its end or leaves: otherwise a short request admitted just after a long
        one would end first whenever the long one's thread ran late (a loaded machine), and overtake
        it. ``stopped()`` ends the wait (the end is then taken from what is known)."""
        with self._cond:
            while True:
                earlier = self._prefilling[:self._prefilling.index(ticket)] if ticket in self._prefilling else []
                if all(t.end != float("inf") for t in earlier) or stopped():
                    break
                self._cond.wait(_WAIT_SLICE_S)
            ticket.end = max([end, *(t.end for t in earlier if t.end != float("inf"))])
            self._cond.notify_all()   # a later prefill may be waiting for this end
            return ticket.end

    def release(self, ticket: Ticket | None) -> None:
        """The prefill is done (its first token came) or was abandoned: its tokens return to the budget."""
        if ticket is None or not ticket.admitted:
            return
        with self._cond:
            ticket.admitted = False
            self._in_flight -= ticket.tokens
            self._prefilling.remove(ticket)
            self._cond.notify_all()

    def leave(self, ticket: Ticket) -> None:
        """Done with ``ticket`` whatever became of it: released when admitted, else taken out of the queue."""
        with self._cond:
            if ticket.admitted:
                ticket.admitted = False
                self._in_flight -= ticket.tokens
                self._prefilling.remove(ticket)
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
                heapq.heapify(self._waiting)
            self._cond.notify_all()

    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    def _fits(self, ticket: Ticket) -> bool:
        if self._waiting[0] is not ticket:
            return False
        return self.budget <= 0 or self._in_flight == 0 or self._in_flight + ticket.tokens <= self.budget
